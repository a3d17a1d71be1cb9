"""The PPO maths with the paper's importance-sampling truncation. Pure functions, no I/O.

Shapes: rollout tensors are time-major ``[T, N]``; loss inputs are flat minibatches ``[B]``.
``next_values[t]`` is the value of the state that *followed* step ``t`` (the final
observation's value when step ``t`` ended an episode): termination zeroes it here, truncation
keeps it — bootstrap on truncation, not on termination.
"""

from __future__ import annotations

import math
from typing import Literal

import torch

ISCorrection = Literal["none", "truncate", "vtrace", "decoupled"]
_TRUNC_TOL = 1e-5


def compute_gae(
    rewards: torch.Tensor,
    values: torch.Tensor,
    next_values: torch.Tensor,
    terminated: torch.Tensor,
    truncated: torch.Tensor,
    gamma: float,
    gae_lambda: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Generalised advantage estimation; returns (advantages, returns = advantages + values)."""
    term = terminated.to(values.dtype)
    done = torch.maximum(term, truncated.to(values.dtype))
    deltas = rewards + gamma * (1.0 - term) * next_values - values
    advantages = torch.zeros_like(values)
    lastgaelam = torch.zeros_like(values[0])
    for t in reversed(range(values.shape[0])):
        # An episode boundary cuts the recursion; a truncated step's delta already holds
        # the bootstrap from its final observation.
        lastgaelam = deltas[t] + gamma * gae_lambda * (1.0 - done[t]) * lastgaelam
        advantages[t] = lastgaelam
    return advantages, advantages + values


def vtrace(
    rewards: torch.Tensor,
    values: torch.Tensor,
    next_values: torch.Tensor,
    terminated: torch.Tensor,
    truncated: torch.Tensor,
    log_rhos: torch.Tensor,
    gamma: float,
    gae_lambda: float = 1.0,
    rho_bar: float = 1.0,
    c_bar: float = 1.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """V-trace targets ``vs`` and policy-gradient advantages (IMPALA, Espeholt et al. 2018).

    ``log_rhos = log pi(a|s) - log mu(a|s)``; ``rho_t = min(rho_bar, r_t)``,
    ``c_t = lambda * min(c_bar, r_t)``. The advantage is ``r_t + gamma * vs_{t+1} - V(x_t)``
    *without* the ``rho_t`` factor: the PPO loss applies the IS weight itself. With
    ``pi == mu`` the targets equal the lambda-returns (GAE + V).
    """
    term = terminated.to(values.dtype)
    done = torch.maximum(term, truncated.to(values.dtype))
    ratios = torch.exp(log_rhos)
    rhos = torch.clamp(ratios, max=rho_bar)
    cs = gae_lambda * torch.clamp(ratios, max=c_bar)
    deltas = rhos * (rewards + gamma * (1.0 - term) * next_values - values)
    acc = torch.zeros_like(values)  # vs - V
    nxt = torch.zeros_like(values[0])
    for t in reversed(range(values.shape[0])):
        nxt = deltas[t] + gamma * cs[t] * (1.0 - done[t]) * nxt
        acc[t] = nxt
    vs = values + acc
    # vs_{t+1}: inside an episode V(x_{t+1}) + its correction; at a boundary the bootstrap
    # value alone (zero after termination, via the (1 - term) factor below).
    acc_next = torch.cat([acc[1:], torch.zeros_like(acc[:1])], dim=0)
    vs_next = next_values + (1.0 - done) * acc_next
    advantages = rewards + gamma * (1.0 - term) * vs_next - values
    return vs, advantages


def _log_truncated(
    logratio: torch.Tensor, logratio_others: torch.Tensor | None, rho_bar: float
) -> torch.Tensor:
    """``log R' = min(log r, min_i log r_i, log rho_bar)``: the paper's truncated weight."""
    log_r = torch.clamp(logratio, max=math.log(rho_bar))
    if logratio_others is not None and logratio_others.numel():
        log_r = torch.minimum(log_r, logratio_others.detach().min(dim=-1).values)
    return log_r


def standardize_advantages(advantages: torch.Tensor) -> torch.Tensor:
    """Zero mean, unit std: CleanRL's per-minibatch ``norm_adv`` formula, also used once over
    the whole batch (``norm_adv_scope="batch"``, as RLlib's GAE connector does)."""
    if advantages.numel() <= 1:
        return advantages
    return (advantages - advantages.mean()) / (advantages.std() + 1e-8)


def is_weights(
    logratio_self: torch.Tensor,
    logratio_others: torch.Tensor | None,
    is_correction: ISCorrection,
    rho_bar: float = 1.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The stop-gradient weight ``R' / r_self`` of each sample and a mask of truncated ones.

    ``R' = min(min_i r_i, rho_bar)`` over every version ``i`` held by a learner in flight,
    ``r_self`` included (``logratio_others``: ``[B, k]`` log-ratios of the other versions).
    ``none`` is ``R' = r_self`` (weight 1, plain PPO). A sample is *truncated* when its
    weight is below one.
    """
    lr_self = logratio_self.detach()
    if is_correction == "none":
        return torch.ones_like(lr_self), torch.zeros_like(lr_self, dtype=torch.bool)
    if is_correction not in ("truncate", "vtrace", "decoupled"):
        raise ValueError(f"unknown is_correction {is_correction!r}")
    log_r = _log_truncated(lr_self, logratio_others, rho_bar)
    weight = torch.exp(log_r - lr_self)  # in log space: R'/r_self without overflow
    # "Truncated" ignores float noise: an actor's batch-8 forward and a learner's batch-B
    # forward of the same weights differ in the last bits.
    return weight, weight < 1.0 - _TRUNC_TOL


def ppo_loss(
    newlogprob: torch.Tensor,
    entropy: torch.Tensor,
    newvalue: torch.Tensor,
    logprob_mu: torch.Tensor,
    advantages: torch.Tensor,
    returns: torch.Tensor,
    old_values: torch.Tensor,
    *,
    logratio_others: torch.Tensor | None = None,
    clip_coef: float = 0.2,
    ent_coef: float = 0.0,
    vf_coef: float = 0.5,
    norm_adv: bool = True,
    clip_vloss: bool = True,
    is_correction: ISCorrection = "truncate",
    rho_bar: float = 1.0,
    logprob_prox: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """PPO clipped surrogate with IS correction + (clipped) value loss - entropy bonus.

    ``L_pi = -mean( sg(R'/r_self) * min(r_self*A, clip(r_self, 1-eps, 1+eps)*A) )``, with
    ``r_self = pi_self / mu``. Stats use CleanRL's names (without the ``losses/`` prefix).

    ``decoupled`` (needs ``logprob_prox``, the log-probs of the policy the learner started
    its batch with): the trust region is centred on that *proximal* policy instead of the
    stale behaviour policy, and the paper's truncated weight carries the off-policy part:
    ``L_pi = -mean( sg(R') * min(r_prox*A, clip(r_prox, 1-eps, 1+eps)*A) )``,
    ``r_prox = pi_self / pi_prox``, ``R' = min(pi_prox/mu, min_i r_i, rho_bar)`` (decoupled
    PPO, Hilton et al. 2022). Inside the clip a sample's gradient is again ``R'*A*grad log
    pi`` scaled by ``r_prox``; with fresh data (``pi_prox = mu``) it is standard PPO. Stale
    data no longer spends PPO's trust region before the first step.
    """
    if is_correction == "decoupled":
        if logprob_prox is None:
            raise ValueError("is_correction 'decoupled' needs logprob_prox")
        lr_prox_mu = (logprob_prox - logprob_mu).detach()
        logratio = newlogprob - logprob_prox.detach()
        log_r = _log_truncated(lr_prox_mu, logratio_others, rho_bar)  # log space: no overflow
        weight = log_r.exp()
        truncated = log_r < lr_prox_mu + math.log1p(-_TRUNC_TOL)  # cut below pi_prox / mu
    else:
        logratio = newlogprob - logprob_mu
    ratio = logratio.exp()
    with torch.no_grad():
        old_approx_kl = (-logratio).mean()
        approx_kl = ((ratio - 1) - logratio).mean()
        clipfrac = ((ratio - 1.0).abs() > clip_coef).float().mean()

    mb_advantages = standardize_advantages(advantages) if norm_adv else advantages

    pg_loss1 = -mb_advantages * ratio
    pg_loss2 = -mb_advantages * torch.clamp(ratio, 1 - clip_coef, 1 + clip_coef)
    pg_per_sample = torch.max(pg_loss1, pg_loss2)
    if is_correction != "decoupled":
        weight, truncated = is_weights(logratio, logratio_others, is_correction, rho_bar)
    if is_correction != "none":
        pg_per_sample = weight * pg_per_sample
    pg_loss = pg_per_sample.mean()

    if clip_vloss:
        v_loss_unclipped = (newvalue - returns) ** 2
        v_clipped = old_values + torch.clamp(newvalue - old_values, -clip_coef, clip_coef)
        v_loss_clipped = (v_clipped - returns) ** 2
        v_loss = 0.5 * torch.max(v_loss_unclipped, v_loss_clipped).mean()
    else:
        v_loss = 0.5 * ((newvalue - returns) ** 2).mean()

    entropy_loss = entropy.mean()
    loss = pg_loss - ent_coef * entropy_loss + v_loss * vf_coef
    stats = {
        "policy_loss": pg_loss.detach(),
        "value_loss": v_loss.detach(),
        "entropy": entropy_loss.detach(),
        "old_approx_kl": old_approx_kl,
        "approx_kl": approx_kl,
        "clipfrac": clipfrac,
        "is_truncated_frac": truncated.float().mean(),
        "is_weight_mean": weight.mean(),
    }
    return loss, stats


def kl_exceeded(epoch_approx_kl: float, target_kl: float | None) -> bool:
    """CleanRL's ``target_kl`` early stop: does an epoch whose minibatches moved the policy
    ``epoch_approx_kl`` (mean approx_kl from the update's starting policy) end the update?"""
    return target_kl is not None and epoch_approx_kl > target_kl


def clip_grad_norm_flat_(flat_grad: torch.Tensor, max_norm: float) -> torch.Tensor:
    """``torch.nn.utils.clip_grad_norm_`` for a gradient already in one flat vector: scale it
    in place by ``min(1, max_norm / (||g|| + 1e-6))``; returns the norm before clipping. (Two
    ops instead of a norm per parameter tensor plus a scaling pass over them.)"""
    norm = torch.linalg.vector_norm(flat_grad)
    flat_grad.mul_(torch.clamp(max_norm / (norm + 1e-6), max=1.0))
    return norm


def explained_variance(y_pred: torch.Tensor, y_true: torch.Tensor) -> float:
    """1 - Var[y - y_pred] / Var[y] (CleanRL), NaN when Var[y] is zero."""
    var_y = torch.var(y_true)
    if var_y.item() == 0:
        return float("nan")
    return float(1 - torch.var(y_true - y_pred) / var_y)


LR_FLOOR = 1e-3  # annealing stops at this fraction of the initial rate: Adam needs lr > 0


def annealed_lr(initial_lr: float, budget_used: float) -> float:
    """CleanRL's ``anneal_lr``: the rate decays linearly with the fraction of the run's budget
    used (env steps, or wall clock, whichever is further along), to a floor just above 0.

    Late in a long run a constant rate keeps taking full-size steps on a policy that is
    already good, and Hopper's return can peak and then fall; a decaying one lets it settle.
    Off by default: docs/decisions.md#rejected-anneal-lr-default.
    """
    return initial_lr * max(1.0 - min(max(budget_used, 0.0), 1.0), LR_FLOOR)
