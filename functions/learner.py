"""Learner function: trajectories in, PPO gradients or a new published version out.

Event: :class:`functions.events.LearnerEvent` (or a :class:`~functions.events.LearnerWarmup`,
which compiles the step before the first batch). The handler loads the trajectories and the
policy, then runs the update in one of two modes:

- ``gradient`` (the paper's learner): each minibatch's gradient streamed to the master
  (:mod:`functions.gradient_mode`);
- ``update`` (sync rounds; async with ``learner_publishes``): the Adam steps taken here and
  the next version published (:mod:`functions.update_mode`).

Both go through the same batch (:mod:`functions.batch`), epochs (:mod:`functions.epochs`) and
minibatch step (:mod:`functions.step`). Timings: ``fetch_s`` (trajectories, weights, the
in-flight versions), ``compute_s``, ``write_s`` (gradient mode: only the part of the
streaming not overlapped with compute; update mode: the previews, the publish and the
optimizer-state save), ``total_s``.
"""

from __future__ import annotations

import time
import zlib
from typing import Any

import torch

from functions.adam import ADAM_EPS, OPTIMIZER_STATE
from functions.batch import MissingTrajectory, group_rollouts, load_trajectories
from functions.epochs import minibatch_sizes
from functions.events import LearnerEvent, LearnerWarmup, event_schema, parse_event
from functions.gradient_mode import gradient_mode
from functions.lookahead import LOOKAHEADS, Lookahead, lookahead_policy
from functions.other_policies import OtherPolicies
from functions.step import warm
from functions.update_mode import StalePublish, update_mode
from functions.warm import CachedPolicy, PolicyCache, run_store, set_threads
from store import PolicySnapshot, RunStore

POLICIES = PolicyCache()

__all__ = ["ADAM_EPS", "OPTIMIZER_STATE", "POLICIES", "MissingTrajectory", "StalePublish",
           "handler", "warm_up"]


def _device(name: str) -> torch.device:
    if name == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("learner event asks for device 'cuda' but CUDA is not available")
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def _policy_and_hold(ev: LearnerEvent, rs: RunStore, device: torch.device, live: bool,
                     ) -> tuple[CachedPolicy, Lookahead | None, dict[str, int]]:
    """The policy to compute with (and the look-ahead, when this learner looks ahead); among
    several learners (``live``) also our hold on it and the other holders' versions."""
    if ev.mode == "gradient" and ev.lookahead:
        pol, la = lookahead_policy(rs, ev.hyper.learning_rate, ev.master_adam_betas, device)
        return pol, la, (rs.params.hold(ev.invocation_id, pol.version, ev.hold_lease_s)
                         if live else {})
    if not live:
        return POLICIES.get(rs, "latest", device)[0], None, {}
    held: dict[str, int] = {}

    def fetch_and_hold(known: int | None) -> PolicySnapshot | None:
        # fetched first and held after, the version could be evicted by publishes in
        # between while the others read it as held: one step
        snap, others = rs.params.hold_latest(ev.invocation_id, ev.hold_lease_s, known)
        held.update(others)
        return snap

    return POLICIES.get(rs, "latest", device, fetch=fetch_and_hold)[0], None, held


def handler(event: Any, context: Any = None) -> dict[str, Any]:
    if event_schema(event) == "stellaris.learner-warmup/1":
        return warm_up(parse_event(LearnerWarmup, event, context))
    ev = parse_event(LearnerEvent, event, context)
    set_threads()
    device = _device(ev.device)
    t0 = time.perf_counter()
    rs = run_store(ev.redis_url, ev.run_id)
    trajs = load_trajectories(rs, ev.trajectory_ids)
    live = ev.hold_lease_s is not None and ev.mode == "gradient"
    pol, la, held = _policy_and_hold(ev, rs, device, live)
    groups = group_rollouts(trajs, device)
    pool = OtherPolicies(rs, device, live=live)
    if live:
        others = pool.update(set(held.values()), exclude=None)
    else:
        others = pool.update(ev.versions_in_flight, exclude=pol.version)
    t_fetch = time.perf_counter()
    gen = torch.Generator()
    gen.manual_seed((ev.seed * 1_000_003 + zlib.crc32(ev.invocation_id.encode())) % (2**63))

    if ev.mode == "update" and pol.version >= int(ev.target_version or 0):
        raise StalePublish(
            f"cannot publish version {ev.target_version} of run {rs.run_id!r}: the latest "
            f"version is already {pol.version} (a retried sync round?)")
    try:
        if ev.mode == "gradient":
            result = gradient_mode(ev, rs, pol, groups, others, device, gen, POLICIES, la, pool)
        else:
            result = update_mode(ev, rs, pol, groups, others, gen, POLICIES)
    except BaseException:
        POLICIES.invalidate(rs)  # the cached module may be half-updated
        LOOKAHEADS.drop(rs)
        raise
    t_end = time.perf_counter()
    result["timings"] = {
        "fetch_s": t_fetch - t0,
        "compute_s": t_end - t_fetch - result.pop("_write_s", 0.0),
        "total_s": t_end - t0,
    }
    result["timings"]["write_s"] = t_end - t0 - result["timings"]["fetch_s"] - \
        result["timings"]["compute_s"]
    result.update({
        "invocation_id": ev.invocation_id,
        "n_samples": sum(tr.steps * tr.n_envs for tr in trajs),
        "behaviour_versions": sorted({int(v) for tr in trajs for v in tr.versions}),
        "is_versions": sorted(pool.used),
        "is_versions_missing": sorted(pool.missing),
        "device": str(device),
    })
    return result


def warm_up(ev: LearnerWarmup) -> dict[str, Any]:
    """Compile this environment's learner step for the run's policy (:class:`LearnerWarmup`).

    The step runs on a synthetic batch of ``ev.batch_size`` samples with the minibatch sizes
    the learner will cut from it, so the first update finds every graph compiled for its
    shapes (:func:`functions.step.warm`). Nothing is written to the store, and the cached
    policy's weights stay as they were. On CUDA the learner captures its graphs per batch:
    nothing to warm here.
    """
    set_threads()
    t0 = time.perf_counter()
    device = _device(ev.device)
    if not ev.compile or device.type != "cpu":
        return {"warmed": False, "invocation_id": ev.invocation_id, "device": str(device),
                "seconds": time.perf_counter() - t0}
    rs = run_store(ev.redis_url, ev.run_id)
    pol, _ = POLICIES.get(rs, "latest", device)
    sizes = minibatch_sizes(ev.batch_size, ev.hyper)
    compiled = warm(ev.hyper, pol.model, sizes, batch_size=ev.batch_size,
                    update=ev.mode == "update", betas=ev.master_adam_betas)
    return {"warmed": compiled, "invocation_id": ev.invocation_id, "device": str(device),
            "mode": ev.mode, "minibatch_sizes": sizes, "version": pol.version,
            "seconds": time.perf_counter() - t0}
