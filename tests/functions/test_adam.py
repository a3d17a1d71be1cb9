"""The fast fused Adam step is torch.optim's fused Adam, bit for bit."""

from __future__ import annotations

import copy

import torch

from functions.adam import adam_step


def _pair(n: int = 1000, **kw):
    torch.manual_seed(0)
    a = torch.nn.Parameter(torch.randn(n))
    b = torch.nn.Parameter(a.detach().clone())
    opts = [torch.optim.Adam([p], lr=3e-4, eps=1e-5, fused=True, **kw) for p in (a, b)]
    return a, b, opts[0], opts[1]


def _step_both(a, b, oa, ob, steps: int) -> None:
    """``steps`` random gradients: through optimizer.step for ``a``, adam_step for ``b``."""
    for _ in range(steps):
        g = torch.randn(a.numel())
        a.grad = g.clone()
        oa.step()
        a.grad = None
        adam_step(ob, b, g.clone())


def test_same_numbers_as_optimizer_step() -> None:
    a, b, oa, ob = _pair(betas=(0.5, 0.999))
    _step_both(a, b, oa, ob, 50)
    assert torch.equal(a, b) and b.grad is None
    for key in ("exp_avg", "exp_avg_sq", "step"):
        assert torch.equal(oa.state[a][key], ob.state[b][key]), key


def test_loaded_state_and_unusual_options_still_match() -> None:
    """A state restored from a checkpoint steps on from there; AMSGrad takes optimizer.step."""
    a, b, oa, ob = _pair(amsgrad=True)
    _step_both(a, b, oa, ob, 5)
    assert torch.equal(a, b)
    c = torch.nn.Parameter(b.detach().clone())
    oc = torch.optim.Adam([c], lr=3e-4, eps=1e-5, fused=True, amsgrad=True)
    oc.load_state_dict(copy.deepcopy(ob.state_dict()))  # (it would share the tensors)
    g = torch.randn(a.numel())
    adam_step(ob, b, g.clone())
    adam_step(oc, c, g.clone())
    assert torch.equal(b, c)


def _policy_pair():
    from functions.policy import init_policy

    a, _ = init_policy("Pendulum-v1", seed=0)
    return a, copy.deepcopy(a)


def test_flat_adam_is_per_parameter_adam_with_the_global_clip() -> None:
    """The PPO step's flat path: one cat, the flat clip, one fused step — the update of
    per-tensor ``clip_grad_norm_`` + ``torch.optim.Adam`` (to float rounding)."""
    from functions.adam import FlatAdam, flat_grad
    from functions.ppo import clip_grad_norm_flat_

    ref, model = _policy_pair()
    opt = torch.optim.Adam(ref.parameters(), lr=3e-4, eps=1e-5)
    adam = FlatAdam(model, lr=3e-4, eps=1e-5)
    x = torch.randn(64, ref.obs_dim)
    for _ in range(20):
        for m in (ref, model):
            m.zero_grad(set_to_none=True)
            (m.critic(x).pow(2).mean() * 50 + m.actor(x).pow(3).mean()
             + m.actor_logstd.pow(2).sum()).backward()
        torch.nn.utils.clip_grad_norm_(ref.parameters(), 0.5)
        opt.step()
        g = flat_grad(adam.params)
        clip_grad_norm_flat_(g, 0.5)
        adam.step(g)
    for (name, p), q in zip(ref.named_parameters(), model.parameters(), strict=True):
        torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-7, msg=name)
    # the parameters are views of the one vector Adam steps
    assert all(p.untyped_storage().data_ptr() == adam.flat.untyped_storage().data_ptr()
               for p in model.parameters())


def test_flat_adam_state_round_trips_per_name_and_refuses_another_shape() -> None:
    from functions.adam import FlatAdam
    from functions.hyper import PolicySpec
    from functions.policy import init_policy

    _, model = _policy_pair()
    adam = FlatAdam(model, lr=3e-4, eps=1e-5)
    for _ in range(3):
        adam.step(torch.randn(adam.flat.numel()))
    saved = adam.state_arrays()
    assert set(saved) == {f"{k}.{n}" for n, _ in model.named_parameters()
                          for k in ("exp_avg", "exp_avg_sq", "step")}
    other = FlatAdam(copy.deepcopy(model), lr=3e-4, eps=1e-5)
    assert other.load_state_arrays(saved)
    for key in ("exp_avg", "exp_avg_sq", "step"):
        assert torch.equal(other.optimizer.state[other.flat][key],
                           adam.optimizer.state[adam.flat][key]), key
    g = torch.randn(adam.flat.numel())
    adam.step(g.clone())
    other.step(g.clone())
    assert torch.equal(adam.flat, other.flat)
    wider, _ = init_policy("Pendulum-v1", PolicySpec(hidden_sizes=[32, 32]), 0)
    fresh = FlatAdam(wider, lr=3e-4, eps=1e-5)
    assert not fresh.load_state_arrays(saved) and not fresh.optimizer.state
