"""A learner's batch: trajectories from the store in, one flat batch with its targets out.

The trajectories of one invocation are grouped by length into time-major tensors
(:class:`Rollouts`), their advantages and value targets computed once over each group (GAE,
or V-trace), and everything flattened into the ``[B]`` batch (:class:`Flat`) the epochs draw
their minibatches from. The maths is :mod:`functions.ppo`'s; docs/algorithm.md says which
critic and which ratio each target uses.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from functions import ppo
from functions.hyper import PPOHyper
from functions.policy import ActorCritic
from functions.wire import Trajectory
from store import RunStore


class MissingTrajectory(LookupError):
    """A trajectory id is not (or no longer) in the run's traj stream."""


def load_trajectories(rs: RunStore, ids: list[str]) -> list[Trajectory]:
    entries = rs.traj.get(ids)
    missing = [i for i, e in zip(ids, entries, strict=True) if e is None or e.blob is None]
    if missing:
        raise MissingTrajectory(
            f"trajectories {missing} are not in the traj stream of run {rs.run_id!r} "
            "(never written, consumed, or trimmed)"
        )
    return [Trajectory.from_blob(e.blob) for e in entries if e is not None and e.blob]


@dataclass
class Rollouts:
    """The trajectories of one invocation as time-major tensors ``[T, N_total, ...]``.

    Trajectories of equal length are concatenated along the env axis, so the recursions run
    once over all of them; :func:`group_rollouts` makes one per distinct length.
    """

    obs: torch.Tensor
    actions: torch.Tensor
    logprobs: torch.Tensor
    values: torch.Tensor
    next_values: torch.Tensor
    rewards: torch.Tensor
    terminated: torch.Tensor
    truncated: torch.Tensor
    next_obs: torch.Tensor  # [N, D]
    final_obs: torch.Tensor  # [K, D]
    final_index: torch.Tensor  # [K] flat t * N + n
    behaviour_version: torch.Tensor  # [T, N]

    @property
    def shape(self) -> tuple[int, int]:
        return int(self.obs.shape[0]), int(self.obs.shape[1])


def group_rollouts(trajs: list[Trajectory], device: torch.device) -> list[Rollouts]:
    """``trajs`` as :class:`Rollouts` on ``device``, one per distinct length."""
    by_len: dict[int, list[Trajectory]] = {}
    for tr in trajs:
        by_len.setdefault(tr.steps, []).append(tr)
    out = []
    for group in by_len.values():
        offsets = np.cumsum([0] + [tr.n_envs for tr in group])[:-1]
        n_total = sum(tr.n_envs for tr in group)

        def cat(name: str, group: list[Trajectory] = group) -> torch.Tensor:
            return torch.from_numpy(np.concatenate([getattr(tr, name) for tr in group], axis=1))

        finals, index = [], []
        for tr, off in zip(group, offsets, strict=True):
            t, n = divmod(tr.final_index, tr.n_envs)
            finals.append(tr.final_obs)
            index.append(t * n_total + n + off)
        versions = np.concatenate(
            [np.broadcast_to(tr.versions[:, None], (tr.steps, tr.n_envs)) for tr in group],
            axis=1)
        out.append(Rollouts(
            obs=cat("obs").float().to(device),
            actions=cat("actions").to(device),
            logprobs=cat("logprobs").float().to(device),
            values=cat("values").float().to(device),
            next_values=cat("next_values").float().to(device),
            rewards=cat("rewards").float().to(device),
            terminated=cat("terminated").to(device),
            truncated=cat("truncated").to(device),
            next_obs=torch.from_numpy(
                np.concatenate([tr.next_obs for tr in group])).float().to(device),
            final_obs=torch.from_numpy(np.concatenate(finals)).float().to(device),
            final_index=torch.from_numpy(np.concatenate(index).astype(np.int64)).to(device),
            behaviour_version=torch.from_numpy(versions).to(device),
        ))
    return out


@torch.no_grad()
def critic_next_values(model: ActorCritic, ro: Rollouts, values: torch.Tensor) -> torch.Tensor:
    """``next_values`` re-evaluated with ``model``'s critic (for V-trace targets)."""
    nv = torch.empty_like(values)
    nv[:-1] = values[1:]
    nv[-1] = model.get_value(ro.next_obs)
    done = ro.terminated | ro.truncated
    nv[done] = 0.0
    if ro.final_index.numel():
        nv.view(-1)[ro.final_index] = model.get_value(ro.final_obs)
    return nv


@dataclass
class Flat:
    """A flat ``[B]`` batch the minibatches are drawn from."""

    obs: torch.Tensor
    actions: torch.Tensor
    logprobs: torch.Tensor
    values: torch.Tensor
    advantages: torch.Tensor
    returns: torch.Tensor
    behaviour_version: torch.Tensor
    logratio_others: torch.Tensor  # [B, k]
    logprobs_prox: torch.Tensor  # [B] the learner's starting policy ("decoupled"; else mu's)

    def __len__(self) -> int:
        return int(self.obs.shape[0])


def _flat(x: torch.Tensor) -> torch.Tensor:
    return x.reshape(-1, *x.shape[2:])


def build_batch(
    model: ActorCritic, groups: list[Rollouts], hyper: PPOHyper, others: list[ActorCritic]
) -> Flat:
    """Advantages and targets for the whole batch.

    GAE uses the behaviour critic's values recorded by the actor (as CleanRL does), or with
    ``gae_values="learner"`` ``model``'s critic; V-trace re-evaluates values and ratios with
    ``model`` (IMPALA), so it is recomputed whenever the learner's weights change. With
    ``norm_adv_scope="batch"`` the advantages are standardized here, once over the batch.
    """
    parts: dict[str, list[torch.Tensor]] = {k: [] for k in Flat.__dataclass_fields__}
    with torch.no_grad():
        for ro in groups:
            if hyper.is_correction == "vtrace":
                values = model.get_value(ro.obs)
                next_values = critic_next_values(model, ro, values)
                newlogp, _ = model.log_prob_entropy(ro.obs, ro.actions)
                returns, adv = ppo.vtrace(
                    ro.rewards, values, next_values, ro.terminated, ro.truncated,
                    newlogp - ro.logprobs, hyper.gamma, hyper.gae_lambda, hyper.rho_bar,
                    hyper.c_bar)
            else:
                if hyper.gae_values == "learner":
                    values = model.get_value(ro.obs)
                    next_values = critic_next_values(model, ro, values)
                else:
                    values, next_values = ro.values, ro.next_values
                adv, returns = ppo.compute_gae(
                    ro.rewards, values, next_values, ro.terminated, ro.truncated,
                    hyper.gamma, hyper.gae_lambda)
            other_lr = [m.log_prob_entropy(ro.obs, ro.actions)[0] - ro.logprobs for m in others]
            prox = (model.log_prob_entropy(ro.obs, ro.actions)[0]
                    if hyper.is_correction == "decoupled" else ro.logprobs)
            t_len, n = ro.shape
            parts["obs"].append(_flat(ro.obs))
            parts["actions"].append(_flat(ro.actions))
            parts["logprobs"].append(_flat(ro.logprobs))
            parts["logprobs_prox"].append(_flat(prox))
            parts["values"].append(_flat(values))
            parts["advantages"].append(_flat(adv))
            parts["returns"].append(_flat(returns))
            # on the CPU: read per minibatch for the gradient's metadata, no device sync
            parts["behaviour_version"].append(_flat(ro.behaviour_version).cpu())
            parts["logratio_others"].append(
                torch.stack([_flat(x) for x in other_lr], dim=-1) if other_lr
                else ro.obs.new_zeros((t_len * n, 0)))
    flat = Flat(**{k: torch.cat(v) for k, v in parts.items()})
    if hyper.norm_adv and hyper.norm_adv_scope == "batch":
        flat.advantages = ppo.standardize_advantages(flat.advantages)
    return flat


def explained_variance(batch: Flat) -> float:
    """CleanRL's ``losses/explained_variance`` of the batch's values for its returns."""
    return ppo.explained_variance(batch.values, batch.returns)


def synthetic_batch(model: ActorCritic, n: int, k: int = 0, seed: int = 0) -> Flat:
    """A random flat batch of ``n`` samples shaped for ``model`` (``k`` other versions'
    log-ratios), with actions as actors record them: int64 indices, or float vectors. What a
    step compiles on before the first real batch (:func:`functions.step.warm`)."""
    g = torch.Generator().manual_seed(seed)

    def r(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=g)

    actions = (torch.randint(model.act_dim, (n,), generator=g) if model.discrete
               else r(n, model.act_dim))
    return Flat(obs=r(n, model.obs_dim), actions=actions, logprobs=r(n) - 3.0, values=r(n),
                advantages=r(n), returns=r(n), behaviour_version=torch.zeros(n, dtype=torch.long),
                logratio_others=0.1 * r(n, k), logprobs_prox=r(n) - 3.0)
