"""Learner function: trajectories in, PPO gradients or a new published version out.

``gradient`` mode (Stellaris): work through ``update_epochs x num_minibatches`` and write one
:class:`Gradient` per minibatch (``gradients_per_message`` of them per stream message), tagged
with the version it was computed at and deduplicated by ``invocation:epoch:minibatch`` so a
retried invocation cannot double-apply. With ``lookahead`` (functions/lookahead.py) each
gradient is also applied locally with the master's Adam and the next one computed there,
tagged with the version the master will apply it at; without, the weights are refreshed from
the newest published version before each minibatch.

``update`` mode (sync rounds; async with ``learner_publishes``): the same loop applying Adam
steps locally, starting from the latest version and the Adam state kept in the store; then
publish ``target_version``. With ``previews`` (async) the weights after each epoch but the
last are stored as a preview of it, which refreshing actors sample with meanwhile.

Timings: ``fetch_s`` (trajectories, weights, the in-flight versions), ``compute_s``,
``write_s`` (gradient mode: only the part of the streaming not overlapped with compute, since
a background thread sends each gradient while the next one is computed; update mode: the
previews, the publish and the optimizer-state save), ``total_s``.
"""

from __future__ import annotations

import math
import threading
import time
import zlib
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np
import redis
import torch

from functions import ppo
from functions.adam import FlatAdam
from functions.compiled import MinibatchLoss, clipped_grad, synthetic_batch
from functions.fused import FusedStep
from functions.graphed import GraphedStep, can_graph
from functions.lookahead import Lookahead
from functions.messages import (
    Gradient,
    LearnerEvent,
    LearnerWarmup,
    PPOHyper,
    Trajectory,
    event_schema,
    parse_event,
)
from functions.normalizer import RunningMeanStd
from functions.policy import (
    ActorCritic,
    build_policy,
    load_policy_tensors,
    param_layout,
    policy_meta,
)
from functions.policy import policy_tensors as to_tensors
from functions.warm import CachedPolicy, PolicyCache, run_store, same_shape, set_threads
from store import Applied, PolicySnapshot, RunStore
from store.errors import StoreError, VersionNotFound

POLICIES = PolicyCache()
OPTIMIZER_STATE = "optimizer"
ADAM_EPS = 1e-5  # CleanRL's


class StalePublish(RuntimeError):
    """Update mode's target version is not above the latest published one."""


class MissingTrajectory(LookupError):
    """A trajectory id is not (or no longer) in the run's traj stream."""


@dataclass
class Rollouts:
    """The trajectories of one invocation as time-major tensors ``[T, N_total, ...]``.

    Trajectories of equal length are concatenated along the env axis, so the recursions run
    once over all of them; ``segments`` keeps one list per distinct length.
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


def _group(trajs: list[Trajectory], device: torch.device) -> list[Rollouts]:
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


def load_trajectories(rs: RunStore, ids: list[str]) -> list[Trajectory]:
    entries = rs.traj.get(ids)
    missing = [i for i, e in zip(ids, entries, strict=True) if e is None or e.blob is None]
    if missing:
        raise MissingTrajectory(
            f"trajectories {missing} are not in the traj stream of run {rs.run_id!r} "
            "(never written, consumed, or trimmed)"
        )
    return [Trajectory.from_blob(e.blob) for e in entries if e is not None and e.blob]


@torch.no_grad()
def critic_next_values(model: ActorCritic, ro: Rollouts, values: torch.Tensor) -> torch.Tensor:
    """``next_values`` re-evaluated with ``model``'s critic (for V-trace targets)."""
    t_len, n = ro.shape
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


def _device(name: str) -> torch.device:
    if name == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("learner event asks for device 'cuda' but CUDA is not available")
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


class OtherPolicies:
    """The policies of the versions other learners hold, for IS truncation's minimum.

    Modules are kept by version while they are held and loaded when a new one appears; a
    version the store no longer has is counted in ``missing``, never skipped silently.
    """

    def __init__(self, rs: RunStore, device: torch.device, live: bool = False) -> None:
        self.rs, self.device, self.live = rs, device, live
        self.models: dict[int, ActorCritic] = {}
        self.used: set[int] = set()
        self.missing: set[int] = set()
        self.asked: set[int] = set()  # the versions of the last update, found or not

    def update(self, versions: list[int] | set[int], exclude: int | None) -> list[ActorCritic]:
        """The modules of ``versions`` (but ``exclude``: ``r_self`` covers the version this
        learner holds), loading the ones not cached."""
        self.asked = {int(v) for v in versions}
        want = sorted(self.asked - ({exclude} if exclude is not None else set()))
        for v in [v for v in self.models if v not in want]:
            del self.models[v]
        out = []
        for v in want:
            if v not in self.models:
                try:
                    snap = self.rs.params.get(v)
                except VersionNotFound:
                    # gone because its learner moved on since we read the holds: not held,
                    # not missing; gone while still held: missing, and counted
                    if not self.live or v in self.rs.params.held().values():
                        self.missing.add(v)
                    continue
                m = build_policy(snap.meta)
                load_policy_tensors(m, snap.tensors)
                self.models[v] = m.to(self.device).eval()
            self.used.add(v)
            out.append(self.models[v])
        return out


@torch.no_grad()
def min_logratio_others(others: list[ActorCritic], batch: Flat) -> torch.Tensor:
    """``[B, 1]``: ``min_i log(pi_i / mu)`` over ``others`` (+inf with none, which the
    truncation's minimum ignores). One column whatever their number, so a compiled loss keeps
    one graph while learners come and go."""
    out = torch.full((len(batch), 1), math.inf, device=batch.obs.device)
    for m in others:
        lr = m.log_prob_entropy(batch.obs, batch.actions)[0] - batch.logprobs
        out = torch.minimum(out, lr.unsqueeze(-1))
    return out


def _minibatches(n: int, hyper: PPOHyper, gen: torch.Generator) -> list[torch.Tensor]:
    perm = torch.randperm(n, generator=gen)
    k = min(hyper.num_minibatches, n)
    return list(torch.tensor_split(perm, k))


def _on_device(mbs: list[torch.Tensor], device: torch.device) -> list[torch.Tensor]:
    """An epoch's minibatch indices on ``device`` in one transfer (the permutation stays the
    CPU generator's, so CPU and GPU learners visit the same minibatches)."""
    if device.type == "cpu":
        return mbs
    return list(torch.split(torch.cat(mbs).to(device), [len(m) for m in mbs]))


class _GradientWriter:
    """Streams gradients to Redis from one background thread, in order.

    Sending a ~40 KB blob is socket time that releases the GIL, so it overlaps with the next
    minibatch's forward/backward instead of adding to it. ``per_message`` consecutive
    gradients travel as one message (:meth:`Gradient.pack`): the encode, the round trip and
    the master's decode are paid once for them — on two cores that CPU is taken from the
    forward/backward. At most ``max_pending`` messages wait (bounded memory); a failed write
    surfaces at the next submit or at ``close``.
    """

    MAX_PENDING = 4

    def __init__(self, rs: RunStore, known_version: int, max_pending: int = MAX_PENDING,
                 lineage: str | None = None, per_message: int = 1,
                 holder: str | None = None, lease_s: float | None = None) -> None:
        self.rs = rs
        self.lineage = lineage  # look-ahead: poll what the master applied, not its weights
        # among several learners: renew our hold and read the others' with each write
        self.holder, self.lease_s = holder, lease_s
        self._others: dict[str, int] | None = None
        self.per_message = max(1, per_message)
        self.max_pending = max_pending
        self.pool = ThreadPoolExecutor(1, thread_name_prefix="stellaris-grad-writer")
        self.pending: deque[Future[tuple[str | None, int]]] = deque()
        self.written = self.duplicates = 0
        self._batch: list[Gradient] = []
        # The newest policy seen after a write, for the compute loop to pick up. Watching
        # here, off the compute thread, takes the per-minibatch version read (a blocking
        # round trip, 10-47% of learner time in the profile) off the critical path.
        self._lock = threading.Lock()
        self._known = known_version
        self._newest: PolicySnapshot | None = None
        self._applied: Applied | None = None

    def _write(self, grads: list[Gradient]) -> tuple[str | None, int]:
        meta, blob, dedupe_id = Gradient.pack(grads)
        if self.lineage is not None:
            entry, applied = self.rs.append_and_poll_applied(
                self.rs.grads, meta, blob, dedupe_id, self.lineage)
            with self._lock:
                self._applied = applied
            return entry, len(grads)
        if self.holder is not None and self.lease_s is not None:
            entry, snap, others = self.rs.append_poll_and_hold(
                self.rs.grads, meta, blob, dedupe_id, self._known, self.holder,
                grads[-1].version_used, self.lease_s)
            with self._lock:
                self._others = others
        else:
            entry, snap = self.rs.append_and_poll(self.rs.grads, meta, blob, dedupe_id,
                                                  self._known)
        if snap is not None:
            with self._lock:
                self._known = snap.version
                self._newest = snap
        return entry, len(grads)

    def take_newest(self) -> PolicySnapshot | None:
        """The newest policy published since the last call (``None``: nothing new)."""
        with self._lock:
            snap, self._newest = self._newest, None
            return snap

    def take_others(self) -> dict[str, int] | None:
        """The versions the other learners held at the newest write since the last call."""
        with self._lock:
            others, self._others = self._others, None
            return others

    def take_applied(self) -> Applied | None:
        """What the master had applied at the newest poll since the last call (look-ahead)."""
        with self._lock:
            applied, self._applied = self._applied, None
            return applied

    def _collect(self, keep: int) -> None:
        while len(self.pending) > keep or (self.pending and self.pending[0].done()):
            entry, n = self.pending.popleft().result()
            if entry is None:
                self.duplicates += n
            else:
                self.written += n

    def submit(self, grad: Gradient) -> None:
        self._batch.append(grad)
        if len(self._batch) >= self.per_message:
            self._flush()

    def _flush(self) -> None:
        if self._batch:
            self._collect(self.max_pending - 1)
            self.pending.append(self.pool.submit(self._write, self._batch))
            self._batch = []

    def close(self) -> None:
        """Send what is left and wait for every write; raises the first write error."""
        try:
            self._flush()
            self._collect(0)
        finally:
            self.pool.shutdown(wait=True, cancel_futures=True)

    def abort(self) -> None:
        """The invocation failed: stop without masking its error by a write error."""
        self.pool.shutdown(wait=True, cancel_futures=True)


class _Stats:
    def __init__(self) -> None:
        self.sums: dict[str, Any] = {}
        self.n = 0

    def add(self, stats: dict[str, torch.Tensor]) -> None:
        # Sum as tensors: a float() per stat per minibatch would sync a GPU eight times.
        for k, v in stats.items():
            self.sums[k] = self.sums.get(k, 0.0) + v.detach()
        self.n += 1

    def result(self) -> dict[str, float]:
        return {f"losses/{k}": float(v) / max(self.n, 1) for k, v in self.sums.items()}


class _EpochKL:
    """``target_kl``'s measure: the mean approx_kl of one epoch's minibatches, read from a
    stats accumulator's running sums (eager :class:`_Stats`, or a graphed step's device sums:
    one read per epoch, never per minibatch)."""

    def __init__(self, acc: _Stats | GraphedStep) -> None:
        self.acc = acc
        self.start()

    def _sum(self) -> float:
        return float(self.acc.sums.get("approx_kl", 0.0))

    def start(self) -> None:
        self.sum0, self.n0 = self._sum(), self.acc.n

    def mean(self) -> float:
        return (self._sum() - self.sum0) / max(self.acc.n - self.n0, 1)


def _stop_early(kl: _EpochKL, hyper: PPOHyper) -> bool:
    """End the update after this epoch (``target_kl``)? Starts the next epoch's count if not."""
    if hyper.target_kl is None:
        return False
    if ppo.kl_exceeded(kl.mean(), hyper.target_kl):
        return True
    kl.start()
    return False


def _loss_stats(stats: _Stats, graphed: GraphedStep | None) -> dict[str, float]:
    return graphed.stats() if graphed is not None else stats.result()


def handler(event: Any, context: Any = None) -> dict[str, Any]:
    if event_schema(event) == "stellaris.learner-warmup/1":
        return warm_up(parse_event(LearnerWarmup, event, context))
    ev = parse_event(LearnerEvent, event, context)
    set_threads()
    device = _device(ev.device)
    t0 = time.perf_counter()
    rs = run_store(ev.redis_url, ev.run_id)
    trajs = load_trajectories(rs, ev.trajectory_ids)
    la = None
    if ev.mode == "gradient" and ev.lookahead:
        pol, la = _lookahead_policy(rs, ev, device)
    else:
        pol, _ = POLICIES.get(rs, "latest", device)
    groups = _group(trajs, device)
    live = ev.hold_lease_s is not None and ev.mode == "gradient"
    pool = OtherPolicies(rs, device, live=live)
    if live:
        # the others hold their versions now; ours is held (pinned) from here on
        held = rs.params.hold(ev.invocation_id, pol.version, ev.hold_lease_s)
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
            result = _gradient_mode(ev, rs, pol, groups, others, device, gen, la, pool)
        else:
            result = _update_mode(ev, rs, pol, groups, others, gen)
    except BaseException:
        POLICIES.invalidate(rs)  # the cached module may be half-updated
        _LOOKAHEADS.drop(rs)
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
    shapes. Update mode takes one fused step per size at a learning rate of 0 with a
    throwaway Adam, and puts the weights back all the same; gradient mode takes the
    minibatch's loss and gradient. Nothing is written to the store. On CUDA the learner
    captures its graphs per batch: nothing to warm here.
    """
    set_threads()
    t0 = time.perf_counter()
    device = _device(ev.device)
    if not ev.compile or device.type != "cpu":
        return {"warmed": False, "invocation_id": ev.invocation_id, "device": str(device),
                "seconds": time.perf_counter() - t0}
    rs = run_store(ev.redis_url, ev.run_id)
    pol, _ = POLICIES.get(rs, "latest", device)
    model, hyper = pol.model, ev.hyper
    batch = synthetic_batch(model, ev.batch_size)
    loss_fn = MinibatchLoss(hyper, compile=True)
    sizes = sorted({len(idx) for idx in _minibatches(ev.batch_size, hyper, torch.Generator())},
                   reverse=True)  # tensor_split's order: the larger minibatches first
    if ev.mode == "update":
        adam = FlatAdam(model, lr=0.0, eps=ADAM_EPS, betas=ev.master_adam_betas)
        weights = adam.flat.detach().clone()
        step = FusedStep(hyper, loss_fn, fused=True)
        try:
            for n in sizes:
                step(model, batch, torch.arange(n), adam)
        finally:
            with torch.no_grad():
                adam.flat.copy_(weights)
            adam.zero_grad()
        compiled = step.steps_fused > 0
    else:
        params = list(model.parameters())
        for n in sizes:
            clipped_grad(loss_fn, model, params, batch, torch.arange(n), hyper.max_grad_norm)
        model.zero_grad(set_to_none=True)
        compiled = loss_fn.compiled
    return {"warmed": compiled, "invocation_id": ev.invocation_id, "device": str(device),
            "mode": ev.mode, "minibatch_sizes": sizes, "version": pol.version,
            "seconds": time.perf_counter() - t0}


class _LookaheadCache(threading.local):
    """Each thread's (each execution environment's) look-ahead state per run: kept warm
    across invocations, like :data:`POLICIES`, so a learner's unconfirmed steps carry over."""

    def __init__(self) -> None:
        self.entries: dict[tuple[str, str], Lookahead] = {}

    def get(self, rs: RunStore) -> Lookahead | None:
        return self.entries.get((rs.store.url, rs.run_id))

    def put(self, rs: RunStore, la: Lookahead) -> None:
        self.entries.pop((rs.store.url, rs.run_id), None)
        self.entries[(rs.store.url, rs.run_id)] = la
        while len(self.entries) > 2:
            self.entries.pop(next(iter(self.entries)))

    def drop(self, rs: RunStore) -> None:
        self.entries.pop((rs.store.url, rs.run_id), None)


_LOOKAHEADS = _LookaheadCache()


def _lookahead_policy(rs: RunStore, ev: LearnerEvent,
                      device: torch.device) -> tuple[CachedPolicy, Lookahead]:
    """The policy a look-ahead learner starts from: the master's latest plus this learner's
    steps the master has not applied yet (a fresh look-ahead when the process is cold)."""
    lr, adam_hyper = ev.hyper.learning_rate, (tuple(ev.master_adam_betas), ADAM_EPS)
    la = _LOOKAHEADS.get(rs)
    if la is not None and (la.hyper != adam_hyper or la.flat.device.type != device.type):
        la = None
    snap, applied = rs.params.latest_with_applied(la.lineage if la else "-")
    if la is not None and not same_shape(la.meta, snap.meta):
        la = None
    if la is None:
        model = build_policy(snap.meta).to(device)
        obs_rms, ret_rms = load_policy_tensors(model, snap.tensors)
        la = Lookahead(model, snap.version, lr, *adam_hyper, meta=snap.meta)
    else:
        obs_rms, ret_rms = _rebase(la, snap, applied)
        la.set_lr(lr)
    _LOOKAHEADS.put(rs, la)
    return CachedPolicy(snap.version, la.model, obs_rms, ret_rms, dict(snap.meta)), la


def _rebase(la: Lookahead, snap: PolicySnapshot,
            applied: Applied) -> tuple[RunningMeanStd, RunningMeanStd]:
    """Onto the master's ``snap`` (read with ``applied``, atomically); returns its normalisers."""
    la.confirm(applied)
    loaded: list[tuple[RunningMeanStd, RunningMeanStd]] = []
    la.rebase(snap.version, lambda: loaded.append(load_policy_tensors(la.model, snap.tensors)))
    return loaded[0]


def _explained_variance(b: Flat) -> float:
    return ppo.explained_variance(b.values, b.returns)


def _gradient_mode(ev: LearnerEvent, rs: RunStore, pol: CachedPolicy, groups: list[Rollouts],
                   others: list[ActorCritic], device: torch.device,
                   gen: torch.Generator, la: Lookahead | None = None,
                   pool: OtherPolicies | None = None) -> dict[str, Any]:
    hyper = ev.hyper
    model = pol.model
    live = ev.hold_lease_s is not None and pool is not None  # the others' versions, now
    batch = build_batch(model, groups, hyper, [] if live else others)
    if live:
        batch.logratio_others = min_logratio_others(others, batch)
        others_held = set(pool.asked)
    others_seen = minibatches_done = 0
    ev_explained = _explained_variance(batch)
    stats = _Stats()
    versions_used: list[int] = []
    params = list(model.parameters())
    layout = param_layout(model)
    writer = _GradientWriter(rs, pol.version, lineage=la.lineage if la else None,
                             per_message=ev.gradients_per_message,
                             holder=ev.invocation_id if live else None, lease_s=ev.hold_lease_s)
    rebases_at_start = la.rebases if la else 0
    loss_fn = MinibatchLoss(hyper, ev.compile)
    # Graphed only with look-ahead: without it a newer version may rebuild the module
    # mid-invocation, and a graph holds on to the parameters it was captured with.
    graphed = (GraphedStep(loss_fn, model, batch, hyper.max_grad_norm)
               if la is not None and can_graph(device, ev.cuda_graph,
                                               hyper.is_correction == "vtrace") else None)
    epoch_kl = _EpochKL(graphed if graphed is not None else stats)
    epochs = 0
    try:
        for epoch in range(hyper.update_epochs):
            if epoch and _stop_early(epoch_kl, hyper):
                break
            epochs += 1
            if epoch and hyper.is_correction == "vtrace":
                # V-trace targets depend on the current critic: once per epoch, not per
                # refresh (a whole-batch rebuild per minibatch made it 3x slower).
                batch = build_batch(model, groups, hyper, [] if live else others)
                if live:
                    batch.logratio_others = min_logratio_others(others, batch)
            minibatches = _minibatches(len(batch), hyper, gen)
            on_device = _on_device(minibatches, device) if graphed is not None else minibatches
            for mb, (idx, idx_dev) in enumerate(zip(minibatches, on_device, strict=True)):
                if la is not None:
                    applied = writer.take_applied()  # no round trip: the writer thread polls
                    if applied is not None and la.diverged(applied):
                        _rebase(la, *rs.params.latest_with_applied(la.lineage))
                    version_used = la.version
                else:
                    snap = writer.take_newest()  # no round trip: the writer thread watches
                    if snap is not None and snap.version > pol.version:
                        pol = POLICIES.install(rs, snap, device)
                        if pol.model is not model:  # rebuilt (new shape): new parameter objects
                            model = pol.model
                            params = list(model.parameters())
                            layout = param_layout(model)
                    version_used = pol.version
                if live:
                    held = writer.take_others()  # no round trip: read with the last write
                    if held is not None and set(held.values()) != others_held:
                        others_held = set(held.values())
                        others = pool.update(others_held, exclude=None)
                        batch.logratio_others = min_logratio_others(others, batch)
                    others_seen += len(others)
                    minibatches_done += 1
                if not versions_used or versions_used[-1] != version_used:
                    versions_used.append(version_used)
                if graphed is not None:
                    flat_grad = graphed(idx_dev)  # a static buffer: copied below, then reused
                else:
                    # a fresh flat copy, which the writer thread serialises while the next
                    # backward runs
                    flat_grad, mb_stats = clipped_grad(loss_fn, model, params, batch, idx,
                                                       hyper.max_grad_norm)
                    stats.add(mb_stats)
                seq = la.step(flat_grad)[0] if la is not None else None
                writer.submit(Gradient.from_flat(
                    flat_grad.cpu().numpy(),
                    layout,
                    invocation_id=ev.invocation_id,
                    epoch=epoch,
                    minibatch=mb,
                    version_used=version_used,
                    n_samples=int(idx.numel()),
                    behaviour_versions=sorted(set(batch.behaviour_version[idx].tolist())),
                    lineage=la.lineage if la is not None else None,
                    seq=seq,
                    lr=hyper.learning_rate,
                ))
    except BaseException:
        writer.abort()
        raise
    tw = time.perf_counter()
    writer.close()
    model.zero_grad(set_to_none=True)
    out: dict[str, Any] = _loss_stats(stats, graphed)
    out["losses/explained_variance"] = ev_explained
    out["compiled"] = loss_fn.compiled
    out["cuda_graph_replays"] = graphed.replays if graphed is not None else 0
    out["losses/update_epochs"] = epochs
    if live:
        # how many other learners' policies the truncation saw, per gradient on the mean
        out["is_others_mean"] = others_seen / max(minibatches_done, 1)
    out.update({"gradients": writer.written, "duplicates": writer.duplicates,
                "versions_used": sorted(set(versions_used)),
                "_write_s": time.perf_counter() - tw})
    if la is not None:
        out["lookahead_rebases"] = la.rebases - rebases_at_start
    return out


# -- update mode: sync rounds, and async with one publishing learner ----------------------------
def _load_adam(rs: RunStore, model: ActorCritic, lr: float,
               betas: tuple[float, float] = (0.9, 0.999)) -> FlatAdam:
    adam = FlatAdam(model, lr=lr, eps=ADAM_EPS, betas=betas)
    saved = rs.get_state(OPTIMIZER_STATE)
    if saved is not None:
        adam.load_state_arrays(saved[0])
    return adam


def ppo_step(loss_fn: MinibatchLoss, model: ActorCritic, batch: Flat, idx: torch.Tensor,
             adam: FlatAdam, max_grad_norm: float) -> dict[str, torch.Tensor]:
    """One PPO minibatch: loss, backward, the global-norm clip, one Adam step; the minibatch's
    stats. The eager reference of :class:`functions.fused.FusedStep`, which the sync learner
    and the lean PPO step with (so they stay bit-identical to each other)."""
    flat_grad, mb_stats = clipped_grad(loss_fn, model, adam.params, batch, idx, max_grad_norm)
    adam.step(flat_grad)
    return mb_stats


def _update_mode(ev: LearnerEvent, rs: RunStore, pol: CachedPolicy, groups: list[Rollouts],
                 others: list[ActorCritic], gen: torch.Generator) -> dict[str, Any]:
    hyper = ev.hyper
    model, start_version = pol.model, pol.version
    target = int(ev.target_version or 0)
    adam = _load_adam(rs, model, hyper.learning_rate, ev.master_adam_betas)
    stats = _Stats()
    batch = build_batch(model, groups, hyper, others)
    ev_explained = _explained_variance(batch)
    loss_fn = MinibatchLoss(hyper, ev.compile)
    step = FusedStep(hyper, loss_fn, fused=ev.compile)
    device = adam.flat.device
    graphed = (GraphedStep(loss_fn, model, batch, hyper.max_grad_norm, adam.optimizer, adam.flat)
               if can_graph(device, ev.cuda_graph, hyper.is_correction == "vtrace") else None)
    obs_rms = RunningMeanStd.from_dict(ev.obs_stats) if ev.obs_stats else pol.obs_rms
    ret_rms = RunningMeanStd.from_dict(ev.ret_stats) if ev.ret_stats else pol.ret_rms
    steps, previews, preview_s, preview = 0, 0, 0.0, ev.previews
    epoch_kl, epochs = _EpochKL(graphed if graphed is not None else stats), 0
    for epoch in range(hyper.update_epochs):
        if epoch and _stop_early(epoch_kl, hyper):
            break
        epochs += 1
        if epoch and hyper.is_correction == "vtrace":
            batch = build_batch(model, groups, hyper, others)
        if epoch and preview:
            # Async actors sample on while this update runs: give them its weights so far
            # (the store drops it if start_version is no longer the latest).
            tp = time.perf_counter()
            try:
                previews += rs.params.publish_preview(
                    start_version, epoch, hyper.update_epochs, ev.invocation_id,
                    to_tensors(model, obs_rms, ret_rms), policy_meta(model))
            except StoreError:
                preview = False  # only a fresher behaviour policy: never fail the update
            preview_s += time.perf_counter() - tp
        minibatches = _minibatches(len(batch), hyper, gen)
        if graphed is not None:
            for idx in _on_device(minibatches, device):
                graphed(idx)
                steps += 1
            continue
        for idx in minibatches:
            stats.add(step(model, batch, idx, adam))
            steps += 1
    adam.zero_grad()

    tw = time.perf_counter()
    try:
        rs.params.publish(target, to_tensors(model, obs_rms, ret_rms), policy_meta(model),
                          state=(OPTIMIZER_STATE, adam.state_arrays(), {"version": target}))
    except redis.ResponseError as exc:
        raise StalePublish(
            f"cannot publish version {target} of run {rs.run_id!r}: {exc}") from exc
    POLICIES.set_version(rs, target, obs_rms, ret_rms)
    out: dict[str, Any] = _loss_stats(stats, graphed)
    out["losses/explained_variance"] = ev_explained
    out["compiled"] = loss_fn.compiled or step.steps_fused > 0
    out["fused_steps"] = step.steps_fused
    out["cuda_graph_replays"] = graphed.replays if graphed is not None else 0
    out["losses/update_epochs"] = epochs
    out.update({"published_version": target, "optimizer_steps": steps, "gradients": 0,
                "versions_used": [start_version], "previews": previews,
                "_write_s": time.perf_counter() - tw + preview_s})
    return out
