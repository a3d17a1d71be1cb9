"""The PPO maths against hand-computed numbers and plain-loop references."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from functions import ppo


def t(x) -> torch.Tensor:
    return torch.tensor(x, dtype=torch.float64)


# -- GAE -------------------------------------------------------------------------------------
def test_gae_hand_computed_termination_and_truncation() -> None:
    # One env, four steps: step 1 terminates, step 2 is truncated (bootstrap from the final
    # observation's value 10), step 3 runs into the end of the segment (bootstrap 4).
    g, lam = 0.5, 0.5
    rewards = t([[1.0], [2.0], [3.0], [4.0]])
    values = t([[1.0], [1.0], [2.0], [3.0]])
    next_values = t([[1.0], [99.0], [10.0], [4.0]])  # 99: ignored after termination
    term = torch.tensor([[False], [True], [False], [False]])
    trunc = torch.tensor([[False], [False], [True], [False]])
    adv, ret = ppo.compute_gae(rewards, values, next_values, term, trunc, g, lam)
    d3 = 4 + 0.5 * 4 - 3  # 3
    d2 = 3 + 0.5 * 10 - 2  # 6 (bootstrap from the final observation)
    d1 = 2 - 1  # 1 (no bootstrap after termination)
    d0 = 1 + 0.5 * 1 - 1  # 0.5
    expected = [d0 + 0.25 * d1, d1, d2, d3]  # recursion cut after steps 1 and 2
    assert adv[:, 0].tolist() == pytest.approx(expected)
    assert torch.equal(ret, adv + values)


def gae_loop(rewards, values, next_values, term, trunc, gamma, lam):
    """Per-env, per-step reference: the sum of discounted deltas until the episode ends."""
    T, N = rewards.shape
    adv = np.zeros((T, N))
    for n in range(N):
        for s in range(T):
            total, coef = 0.0, 1.0
            for k in range(s, T):
                boot = 0.0 if term[k, n] else next_values[k, n]
                total += coef * (rewards[k, n] + gamma * boot - values[k, n])
                if term[k, n] or trunc[k, n]:
                    break
                coef *= gamma * lam
            adv[s, n] = total
    return adv


def random_rollout(seed: int, T: int = 12, N: int = 3):
    rng = np.random.default_rng(seed)
    term = rng.random((T, N)) < 0.15
    trunc = (rng.random((T, N)) < 0.15) & ~term
    return (rng.normal(size=(T, N)), rng.normal(size=(T, N)), rng.normal(size=(T, N)),
            term, trunc)


@pytest.mark.parametrize("seed", range(5))
def test_gae_matches_loop_reference(seed: int) -> None:
    r, v, nv, term, trunc = random_rollout(seed)
    adv, _ = ppo.compute_gae(t(r), t(v), t(nv), torch.from_numpy(term),
                             torch.from_numpy(trunc), 0.99, 0.95)
    np.testing.assert_allclose(adv.numpy(), gae_loop(r, v, nv, term, trunc, 0.99, 0.95),
                               rtol=1e-12, atol=1e-12)


# -- V-trace ---------------------------------------------------------------------------------
def vtrace_loop(rewards, values, next_values, term, trunc, log_rhos, gamma, lam, rho_bar,
                c_bar):
    """IMPALA eq. (1) written as explicit sums, episode by episode."""
    T, N = rewards.shape
    ratio = np.exp(log_rhos)
    rho = np.minimum(rho_bar, ratio)
    c = lam * np.minimum(c_bar, ratio)
    vs = np.zeros((T, N))
    for n in range(N):
        for s in range(T):
            total = 0.0
            for k in range(s, T):
                prod = np.prod([c[i, n] for i in range(s, k)]) if k > s else 1.0
                boot = 0.0 if term[k, n] else next_values[k, n]
                total += gamma ** (k - s) * prod * rho[k, n] * (
                    rewards[k, n] + gamma * boot - values[k, n])
                if term[k, n] or trunc[k, n]:
                    break
            vs[s, n] = values[s, n] + total
    adv = np.zeros((T, N))
    for n in range(N):
        for s in range(T):
            if term[s, n]:
                nxt = 0.0
            elif trunc[s, n] or s == T - 1:
                nxt = next_values[s, n]
            else:
                nxt = vs[s + 1, n]
            adv[s, n] = rewards[s, n] + gamma * nxt - values[s, n]
    return vs, adv


def consistent_rollout(seed: int, T: int = 12, N: int = 3):
    """next_values[t] == values[t+1] inside episodes, as a critic makes them."""
    r, v, nv, term, trunc = random_rollout(seed, T, N)
    done = term | trunc
    for k in range(T - 1):
        nv[k] = np.where(done[k], nv[k], v[k + 1])
    return r, v, nv, term, trunc


@pytest.mark.parametrize("seed", range(5))
def test_vtrace_matches_loop_reference(seed: int) -> None:
    r, v, nv, term, trunc = consistent_rollout(seed)
    log_rhos = np.random.default_rng(100 + seed).normal(scale=0.5, size=r.shape)
    vs, adv = ppo.vtrace(t(r), t(v), t(nv), torch.from_numpy(term), torch.from_numpy(trunc),
                         t(log_rhos), 0.9, 0.95, rho_bar=1.0, c_bar=1.0)
    ref_vs, ref_adv = vtrace_loop(r, v, nv, term, trunc, log_rhos, 0.9, 0.95, 1.0, 1.0)
    np.testing.assert_allclose(vs.numpy(), ref_vs, rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(adv.numpy(), ref_adv, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("seed", range(5))
def test_vtrace_on_policy_targets_are_lambda_returns(seed: int) -> None:
    r, v, nv, term, trunc = consistent_rollout(seed)
    args = (t(r), t(v), t(nv), torch.from_numpy(term), torch.from_numpy(trunc))
    vs, _ = ppo.vtrace(*args, torch.zeros(r.shape, dtype=torch.float64), 0.99, 0.95)
    adv, lambda_returns = ppo.compute_gae(*args, 0.99, 0.95)
    torch.testing.assert_close(vs, lambda_returns, rtol=0, atol=1e-12)
    # and with lambda = 1 the V-trace advantage is the GAE(1) advantage
    vs1, adv1 = ppo.vtrace(*args, torch.zeros(r.shape, dtype=torch.float64), 0.99, 1.0)
    gae1, _ = ppo.compute_gae(*args, 0.99, 1.0)
    torch.testing.assert_close(adv1, gae1, rtol=0, atol=1e-12)


# -- IS weights ------------------------------------------------------------------------------
def test_is_weights_none_is_plain_ppo() -> None:
    w, trunc = ppo.is_weights(t([0.3, -0.2]), t([[-1.0], [-1.0]]), "none")
    assert w.tolist() == [1.0, 1.0] and not trunc.any()


def test_is_weights_truncate_which_samples_and_values() -> None:
    r_self = [1.5, 0.8, 1.0, 0.9]
    r_other = [[2.0, 1.2], [0.5, 3.0], [1.0, 1.0], [1.1, 0.95]]
    lr_self = t(np.log(r_self))
    lr_other = t(np.log(r_other))
    w, trunc = ppo.is_weights(lr_self, lr_other, "truncate", rho_bar=1.0)
    # R' = min(min_i r_i, 1): 1.0 (cap), 0.5 (another version), 1.0, 0.9 (itself)
    expected_R = [1.0, 0.5, 1.0, 0.9]
    np.testing.assert_allclose(w.numpy(), np.array(expected_R) / np.array(r_self), rtol=1e-12)
    assert trunc.tolist() == [True, True, False, False]
    # a looser cap only lets the ratios through
    w2, trunc2 = ppo.is_weights(lr_self, lr_other, "truncate", rho_bar=2.0)
    np.testing.assert_allclose(w2.numpy(), np.array([1.2, 0.5, 1.0, 0.9]) / r_self, rtol=1e-12)
    assert trunc2.tolist() == [True, True, False, False]
    # vtrace uses the same weights
    w3, _ = ppo.is_weights(lr_self, lr_other, "vtrace", rho_bar=1.0)
    torch.testing.assert_close(w3, w)


def test_is_weights_are_stop_gradient_and_reject_unknown_mode() -> None:
    lr = t([0.5, -0.5]).requires_grad_()
    w, _ = ppo.is_weights(lr, None, "truncate")
    assert not w.requires_grad
    with pytest.raises(ValueError, match="bogus"):
        ppo.is_weights(lr, None, "bogus")  # type: ignore[arg-type]


# -- PPO loss --------------------------------------------------------------------------------
def cleanrl_loss(newlogprob, entropy, newvalue, logprob, adv, returns, values,
                 clip=0.2, ent_coef=0.01, vf_coef=0.5):
    """CleanRL ppo_continuous_action.py, verbatim arithmetic."""
    logratio = newlogprob - logprob
    ratio = logratio.exp()
    mb_advantages = (adv - adv.mean()) / (adv.std() + 1e-8)
    pg_loss1 = -mb_advantages * ratio
    pg_loss2 = -mb_advantages * torch.clamp(ratio, 1 - clip, 1 + clip)
    pg_loss = torch.max(pg_loss1, pg_loss2).mean()
    v_loss_unclipped = (newvalue - returns) ** 2
    v_clipped = values + torch.clamp(newvalue - values, -clip, clip)
    v_loss_clipped = (v_clipped - returns) ** 2
    v_loss = 0.5 * torch.max(v_loss_unclipped, v_loss_clipped).mean()
    return pg_loss - ent_coef * entropy.mean() + v_loss * vf_coef


def _small_problem(seed: int = 0):
    """A tiny linear Gaussian policy so the test differentiates through real log-probs."""
    g = torch.Generator().manual_seed(seed)
    B, D = 16, 3
    obs = torch.randn(B, D, generator=g)
    w = torch.randn(D, generator=g).requires_grad_()
    actions = torch.randn(B, generator=g)
    adv = torch.randn(B, generator=g)
    returns = torch.randn(B, generator=g)
    values = torch.randn(B, generator=g)
    newvalue_base = torch.randn(B, generator=g)
    return obs, w, actions, adv, returns, values, newvalue_base


def _forward(obs, w, actions, newvalue_base):
    dist = torch.distributions.Normal(obs @ w, 1.0)
    return dist.log_prob(actions), dist.entropy(), newvalue_base + (obs @ w) * 0.1


@pytest.mark.parametrize("mode", ["none", "truncate", "vtrace", "decoupled"])
def test_no_staleness_gives_exactly_the_standard_ppo_loss_and_gradient(mode: str) -> None:
    obs, w, actions, adv, returns, values, nvb = _small_problem()
    newlogprob, entropy, newvalue = _forward(obs, w, actions, nvb)
    mu = newlogprob.detach().clone()  # behaviour policy == current policy ...
    others = torch.stack([mu - mu, mu - mu], dim=-1)  # ... == every version in flight
    ref = cleanrl_loss(newlogprob, entropy, newvalue, mu, adv, returns, values)
    (ref_grad,) = torch.autograd.grad(ref, w)

    newlogprob, entropy, newvalue = _forward(obs, w, actions, nvb)
    loss, stats = ppo.ppo_loss(newlogprob, entropy, newvalue, mu, adv, returns, values,
                               logratio_others=others, ent_coef=0.01, is_correction=mode,
                               logprob_prox=mu)  # the learner starts from the behaviour policy
    (grad,) = torch.autograd.grad(loss, w)
    assert torch.equal(loss, ref)
    assert torch.equal(grad, ref_grad)
    assert stats["is_truncated_frac"].item() == 0.0


def test_truncated_gradient_is_R_times_A_grad_log_pi_inside_trust_region() -> None:
    B = 6
    lr_self = t([0.0, 0.1, -0.1, 0.15, 0.5, -0.5]).requires_grad_()  # last two clipped
    mu = torch.zeros(B, dtype=torch.float64)
    others = t([[0.0], [-0.3], [-0.05], [0.2], [0.0], [0.0]])
    adv = t([1.0, 1.0, -1.0, 2.0, 1.0, -1.0])
    zeros = torch.zeros(B, dtype=torch.float64)
    loss, stats = ppo.ppo_loss(lr_self, zeros, zeros, mu, adv, zeros, zeros,
                               logratio_others=others, norm_adv=False, clip_coef=0.2,
                               is_correction="truncate")
    (g,) = torch.autograd.grad(loss, lr_self)
    r_self = torch.exp(lr_self.detach())
    R = torch.minimum(torch.minimum(r_self, torch.exp(others[:, 0])), torch.tensor(1.0))
    # d/d(log pi) of -(R/r) * r * A / B is -R * A / B inside the trust region ...
    expected = -R * adv / B
    # ... and zero where PPO's clip is active (r=e^0.5 with A>0, r=e^-0.5 with A<0).
    expected[4:] = 0.0
    torch.testing.assert_close(g, expected, rtol=1e-12, atol=1e-12)
    # samples 1 (another version lower), 3 (cap) and 4 (cap) are truncated
    assert stats["is_truncated_frac"].item() == pytest.approx(3 / 6)


def test_decoupled_clips_around_the_proximal_policy_and_weights_by_R() -> None:
    """Stale data (mu far from the learner's start): the clip is on pi/pi_prox, the weight is
    R' = min(pi_prox/mu, min_i r_i, rho_bar), so the gradient is -R' r_prox A / B inside."""
    B = 5
    prox = t([0.0, 0.0, 0.0, 0.0, 0.0])
    mu = t([0.6, -0.6, 0.0, -0.6, 0.6])  # behaviour policy 0.6 nats away on most samples
    lr = t([0.1, -0.1, 0.5, 0.15, -0.5]).requires_grad_()  # pi_self vs prox; 2 and 4 clipped
    others = t([[0.0], [0.0], [-0.2], [-0.9], [0.0]])
    adv = t([1.0, -1.0, 1.0, 2.0, -1.0])
    zeros = torch.zeros(B, dtype=torch.float64)
    newlogprob = prox + lr
    loss, stats = ppo.ppo_loss(newlogprob, zeros, zeros, mu, adv, zeros, zeros,
                               logratio_others=others, norm_adv=False, clip_coef=0.2,
                               is_correction="decoupled", logprob_prox=prox)
    (g,) = torch.autograd.grad(loss, lr)
    r_prox = torch.exp(lr.detach())
    R = torch.minimum(torch.minimum(torch.exp(prox - mu), torch.exp(others[:, 0])), t([1.0]))
    expected = -R * r_prox * adv / B
    expected[[2, 4]] = 0.0  # r_prox = e^0.5 with A > 0, e^-0.5 with A < 0: PPO's clip
    torch.testing.assert_close(g, expected, rtol=1e-12, atol=1e-12)
    # under plain truncation r_self = pi/mu would be 0.6 nats off: every sample clipped
    assert stats["clipfrac"].item() == pytest.approx(2 / 5)
    # truncated = R' below pi_prox/mu: 1 (the cap), 2 and 3 (another version lower)
    assert stats["is_truncated_frac"].item() == pytest.approx(3 / 5)
    with pytest.raises(ValueError, match="logprob_prox"):
        ppo.ppo_loss(newlogprob, zeros, zeros, mu, adv, zeros, zeros, is_correction="decoupled")


def test_none_keeps_the_ratio_gradient_r_times_A() -> None:
    lr_self = t([0.1, -0.1]).requires_grad_()
    adv = t([1.0, -1.0])
    zeros = torch.zeros(2, dtype=torch.float64)
    loss, stats = ppo.ppo_loss(lr_self, zeros, zeros, zeros, adv, zeros, zeros,
                               logratio_others=t([[-1.0], [-1.0]]), norm_adv=False,
                               is_correction="none")
    (g,) = torch.autograd.grad(loss, lr_self)
    torch.testing.assert_close(g, -torch.exp(lr_self.detach()) * adv / 2)
    assert stats["is_truncated_frac"].item() == 0.0


def test_value_loss_clipping_and_stats() -> None:
    newvalue, old, ret = t([2.0]), t([0.0]), t([3.0])
    zeros = torch.zeros(1, dtype=torch.float64)
    _, clipped = ppo.ppo_loss(zeros, zeros, newvalue, zeros, zeros, ret, old, norm_adv=False)
    _, unclipped = ppo.ppo_loss(zeros, zeros, newvalue, zeros, zeros, ret, old,
                                norm_adv=False, clip_vloss=False)
    assert unclipped["value_loss"].item() == pytest.approx(0.5)
    # clipped prediction 0.2 is further from 3 than 2: max picks it
    assert clipped["value_loss"].item() == pytest.approx(0.5 * 2.8**2)
    lr = t([math.log(1.5), 0.0])
    _, st = ppo.ppo_loss(lr, torch.zeros(2), torch.zeros(2), torch.zeros(2), t([1.0, 1.0]),
                         torch.zeros(2), torch.zeros(2), norm_adv=False)
    assert st["clipfrac"].item() == 0.5
    assert st["approx_kl"].item() == pytest.approx(((1.5 - 1) - math.log(1.5)) / 2)
    assert st["old_approx_kl"].item() == pytest.approx(-math.log(1.5) / 2)


def test_explained_variance() -> None:
    y = t([1.0, 2.0, 3.0])
    assert ppo.explained_variance(y, y) == 1.0
    assert math.isnan(ppo.explained_variance(y, t([1.0, 1.0, 1.0])))


@pytest.mark.parametrize("scale", [0.01, 100.0])
def test_flat_gradient_clipping_matches_torch_clip_grad_norm(scale: float) -> None:
    g = torch.Generator().manual_seed(0)
    grads = [torch.randn(5, 3, generator=g) * scale, torch.randn(7, generator=g) * scale]
    params = [torch.nn.Parameter(torch.zeros_like(x)) for x in grads]
    for p, x in zip(params, grads, strict=True):
        p.grad = x.clone()
    ref_norm = torch.nn.utils.clip_grad_norm_(params, 0.5)
    flat = torch.cat([x.reshape(-1) for x in grads])
    norm = ppo.clip_grad_norm_flat_(flat, 0.5)
    torch.testing.assert_close(norm, ref_norm)
    torch.testing.assert_close(flat, torch.cat([p.grad.reshape(-1) for p in params]))


def test_annealed_learning_rate_decays_linearly_with_the_budget_to_a_floor() -> None:
    assert ppo.annealed_lr(3e-4, 0.0) == 3e-4
    assert ppo.annealed_lr(3e-4, 0.25) == pytest.approx(2.25e-4)
    assert ppo.annealed_lr(3e-4, -0.1) == 3e-4  # a clock read before the start
    for used in (1.0, 1.7):  # the last batch (and a budget overrun) still steps: lr > 0
        assert ppo.annealed_lr(3e-4, used) == pytest.approx(3e-4 * ppo.LR_FLOOR)


def test_kl_exceeded_is_cleanrls_check():
    assert not ppo.kl_exceeded(0.05, None)
    assert ppo.kl_exceeded(0.021, 0.02) and not ppo.kl_exceeded(0.02, 0.02)
