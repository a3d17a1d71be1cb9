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
