"""Actor function: sample ``n_envs x steps`` transitions with one policy version.

Event: :class:`functions.events.ActorEvent`. Writes one :class:`Trajectory` to the run's
``traj`` stream and returns a small JSON summary (never tensors). Warm processes keep the
vector env (episodes continue across invocations), the policy module and the last weights;
weights are refetched only when the wanted version moved (one round trip either way).
"""

from __future__ import annotations

import time
import zlib
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from functions import preflight
from functions.behaviour import behaviour_sampler
from functions.envs import drop_warm_env, warm_env
from functions.events import ActorEvent, parse_event
from functions.normalizer import RunningMeanStd
from functions.policy import normalize_obs
from functions.warm import PolicyCache, lower_cpu_priority, run_store, set_threads
from functions.wire import Trajectory

POLICIES = PolicyCache()


class PolicyEnvMismatch(ValueError):
    """The published policy does not fit the requested env's spaces."""


def handler(event: Any, context: Any = None) -> dict[str, Any]:
    if isinstance(event, dict) and "preflight" in event:  # the store check, no rollout
        return preflight.handler(event["preflight"], context)
    ev = parse_event(ActorEvent, event, context)
    set_threads()
    lower_cpu_priority(ev.nice)
    t0 = time.perf_counter()
    rs = run_store(ev.redis_url, ev.run_id)
    # An async actor (refresh_steps > 0) samples with the newest weights there are: a
    # publishing learner's preview of the next version when it has one.
    refreshing = bool(ev.refresh_steps)
    if refreshing and ev.policy_version == "latest":
        pol, cached = POLICIES.newest(rs)
    else:
        pol, cached = POLICIES.get(rs, ev.policy_version)
    t_fetch = time.perf_counter()

    wenv, _ = warm_env(ev.run_id, ev.env_id, ev.n_envs, ev.seed)
    if (wenv.info.obs_dim, wenv.info.action_space) != (pol.model.obs_dim, pol.model.action_space):
        raise PolicyEnvMismatch(
            f"policy version {pol.version} of run {ev.run_id!r} was built for "
            f"{pol.meta.get('env_id')!r} (obs_dim {pol.model.obs_dim}, actions "
            f"{pol.model.action_space}); env {ev.env_id!r} has obs_dim {wenv.info.obs_dim}, "
            f"actions {wenv.info.action_space}"
        )
    refresh = (lambda: POLICIES.newest(rs)[0]) if refreshing else None
    try:
        traj = rollout(wenv, pol, ev, refresh)
    except BaseException:
        # The env moved on but its bookkeeping did not: never reuse it half-stepped.
        drop_warm_env(ev.run_id, ev.env_id, ev.n_envs)
        raise
    t_sample = time.perf_counter()

    traj_id = rs.traj.append(traj.meta(), traj.to_blob())
    t_write = time.perf_counter()
    return {
        "trajectory_id": traj_id,
        "behaviour_version": traj.behaviour_version,
        "behaviour_version_last": int(traj.versions[-1]),
        # a rollout that picked up newer weights is as old as its steps are on average; a
        # step with a preview counts as its base version plus the preview's progress
        "behaviour_version_mean": traj.version_mean,
        "preview_steps": traj.preview_steps * traj.n_envs,  # env steps
        "steps": ev.n_envs * ev.steps,
        "episodes": len(traj.episode_returns),
        "episode_returns": traj.episode_returns,
        "episode_lengths": traj.episode_lengths,
        "obs_stats": traj.obs_stats,
        "ret_stats": traj.ret_stats,
        "timings": {
            "fetch_s": t_fetch - t0,
            "sample_s": t_sample - t_fetch,
            "write_s": t_write - t_sample,
            "total_s": t_write - t0,
        },
        "cached": cached,
        "invocation_id": ev.invocation_id,
    }


def _generator(seed: int, invocation_id: str) -> torch.Generator:
    g = torch.Generator()
    g.manual_seed((int(seed) * 1_000_003 + zlib.crc32(invocation_id.encode())) % (2**63))
    return g


@torch.inference_mode()
def rollout(wenv: Any, pol: Any, ev: ActorEvent,
            refresh: Callable[[], Any] | None = None) -> Trajectory:
    """Step the warm vector env ``ev.steps`` times with the behaviour policy ``pol``.

    With ``refresh`` (async actors: ``ev.refresh_steps > 0``) the actor asks for the newest
    policy every ``refresh_steps`` steps and samples on with it — a rollout then spans
    versions, each step tagged with its own (``step_versions``), so its data is on average
    half a rollout fresher. Log-probs, values, normalisation and reward scale are those of
    the version that took the step, so the learner's importance ratios stay exact. A preview
    (a publishing learner's weights part-way through an update) is tagged with the version
    it updates, and its progress past it is averaged into ``preview_progress``.
    """
    n, steps, dim = ev.n_envs, ev.steps, wenv.info.obs_dim
    gen = _generator(ev.seed, ev.invocation_id)
    step_versions = np.full(steps, pol.version, dtype=np.int64)
    step_progress = np.zeros(steps, dtype=np.float64)

    raw_obs = np.zeros((steps, n, dim), dtype=np.float64)
    obs = np.zeros((steps, n, dim), dtype=np.float32)
    actions: list[np.ndarray] = []
    logprobs = np.zeros((steps, n), dtype=np.float32)
    values = np.zeros((steps, n), dtype=np.float32)
    next_values = np.zeros((steps, n), dtype=np.float32)
    rewards = np.zeros((steps, n), dtype=np.float32)
    terminated = np.zeros((steps, n), dtype=bool)
    truncated = np.zeros((steps, n), dtype=bool)
    disc_returns = np.zeros((steps, n), dtype=np.float64)
    final_obs: list[np.ndarray] = []
    final_index: list[int] = []
    ep_returns: list[float] = []
    ep_lengths: list[int] = []
    # (t, env) of done steps whose next value is V(final obs), filled after the loop.
    pending_final: list[tuple[int, int, np.ndarray]] = []

    def behaviour(p: Any) -> tuple[Any, Any, Any, float, np.ndarray, np.ndarray]:
        # The behaviour version's sampler and normalisation constants, hoisted out of the loop.
        spec = p.model.spec
        scale = 1.0 / float(np.sqrt(p.ret_rms.var + 1e-8)) if spec.reward_scaling else 1.0
        return (p.model, behaviour_sampler(p.model, gen), spec, scale, p.obs_rms.mean,
                1.0 / np.sqrt(p.obs_rms.var + 1e-8))

    model, sample, spec, reward_scale, mean, inv_std = behaviour(pol)
    lo, hi = -spec.obs_clip, spec.obs_clip
    cur = wenv.obs
    for t in range(steps):
        if refresh is not None and t and t % ev.refresh_steps == 0:
            newer = refresh()
            if newer.token != pol.token:
                pol = newer
                model, sample, spec, reward_scale, mean, inv_std = behaviour(pol)
                lo, hi = -spec.obs_clip, spec.obs_clip
        step_versions[t], step_progress[t] = pol.version, pol.progress
        raw_obs[t] = cur
        if spec.obs_norm:
            obs[t] = np.minimum(np.maximum((cur - mean) * inv_std, lo), hi)
        else:
            obs[t] = cur
        action, logprobs[t], values[t], env_action = sample(obs[t])
        actions.append(action)
        nxt, rew, term, trunc, info = wenv.envs.step(env_action)
        rew = np.asarray(rew, dtype=np.float64)
        terminated[t], truncated[t] = term, trunc
        done = np.logical_or(term, trunc)

        # CleanRL NormalizeReward: discounted return per env, reset when an episode ends.
        wenv.disc_return = wenv.disc_return * ev.gamma + rew
        disc_returns[t] = wenv.disc_return
        scaled = rew * reward_scale
        if spec.reward_scaling:
            scaled = np.minimum(np.maximum(scaled, -spec.reward_clip), spec.reward_clip)
        rewards[t] = scaled
        wenv.ep_return += rew
        wenv.ep_length += 1

        cur = wenv._flat(nxt)
        if done.any():
            fin = info.get("final_obs")
            for i in np.flatnonzero(done):
                ep_returns.append(float(wenv.ep_return[i]))
                ep_lengths.append(int(wenv.ep_length[i]))
                if trunc[i] and not term[i]:
                    f = normalize_obs(np.asarray(fin[i], dtype=np.float64).reshape(1, -1),
                                      pol.obs_rms, spec)[0]
                    pending_final.append((t, int(i), f))
            wenv.disc_return[done] = 0.0
            wenv.ep_return[done] = 0.0
            wenv.ep_length[done] = 0
    wenv.obs = cur

    # Values of the states that followed each step: the next row inside an episode, the
    # final observation after truncation (one batched forward), nothing after termination.
    next_obs = normalize_obs(cur, pol.obs_rms, spec)
    next_values[:-1] = values[1:]
    next_values[-1] = model.get_value(torch.from_numpy(next_obs)).numpy()
    next_values[terminated | truncated] = 0.0
    if pending_final:
        fo = np.stack([f for _, _, f in pending_final]).astype(np.float32)
        fv = model.get_value(torch.from_numpy(fo)).numpy()
        for (t, i, _), v in zip(pending_final, fv, strict=True):
            next_values[t, i] = v
        final_obs = [fo]
        final_index = [t * n + i for t, i, _ in pending_final]

    act = np.stack(actions)
    act = act.astype(np.int64) if model.discrete else act.astype(np.float32)
    obs_stats = RunningMeanStd.from_batch(raw_obs.reshape(-1, dim), (dim,)).to_dict()
    ret_stats = RunningMeanStd.from_batch(disc_returns.reshape(-1), ()).to_dict()
    return Trajectory(
        obs=obs,
        actions=act,
        logprobs=logprobs,
        values=values,
        next_values=next_values,
        rewards=rewards,
        terminated=terminated,
        truncated=truncated,
        next_obs=next_obs.astype(np.float32),
        final_obs=(np.concatenate(final_obs) if final_obs
                   else np.zeros((0, dim), dtype=np.float32)),
        final_index=np.asarray(final_index, dtype=np.int64),
        behaviour_version=int(step_versions[0]),
        env_id=ev.env_id,
        invocation_id=ev.invocation_id or "",
        episode_returns=ep_returns,
        episode_lengths=ep_lengths,
        obs_stats=obs_stats,
        ret_stats=ret_stats,
        step_versions=step_versions if step_versions[-1] != step_versions[0] else None,
        preview_progress=float(step_progress.mean()),
        preview_steps=int(np.count_nonzero(step_progress)),
    )
