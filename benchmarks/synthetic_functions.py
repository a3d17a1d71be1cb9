"""Synthetic actor and learner functions for the capacity benchmark (benchmarks/capacity.py).

They do no RL work: they send and receive the real messages at the real sizes, through the
real store code, so that the orchestrator and Redis see what a run of many actors gives them
while the functions themselves cost almost no CPU.

- ``actor``: reads the newest policy as a real async actor does (``fetch_newest``, once at the
  start and every ``refresh_steps`` steps), sleeps the env time of its ``n_envs x steps``
  (``CAPACITY_ENV_STEPS_PER_S``), appends one trajectory blob of the real size and format
  (:class:`functions.wire.Trajectory`, encoded once per shape) and returns the real actor's
  result fields.
- ``learner``: reads its batch's trajectories (the real round trip and bytes), the policy, holds
  its version as a learner among several does, and streams ``epochs x minibatches`` gradients of
  the policy's real layout through the real :class:`functions.gradient_writer.GradientWriter`
  (one or 32 a message, pipelined with the version poll), sleeping ``CAPACITY_MINIBATCH_MS``
  per minibatch for its compute. A learner warm-up answers at once.

Handlers are named like the real ones (``benchmarks.synthetic_functions.actor`` ...), so the
local runtime, Lambda or Ray can serve them. Every store operation is timed into :data:`STATS`,
which the capacity host (benchmarks/capacity_host.py) reads and resets.
"""

from __future__ import annotations

import os
import threading
import time
import uuid
from collections import defaultdict
from typing import Any

import numpy as np

from functions.batch import MissingTrajectory
from functions.events import ActorEvent, LearnerEvent, event_schema, parse_event
from functions.gradient_writer import GradientWriter
from functions.warm import run_store
from functions.wire import Gradient, Layout, Trajectory
from store import RunStore

ENV_STEPS_PER_S = "CAPACITY_ENV_STEPS_PER_S"  # one actor's sampling speed (env steps/s)
MINIBATCH_MS = "CAPACITY_MINIBATCH_MS"  # one minibatch's forward/backward on a learner
# One 8-env Hopper actor on one core of the development machine (docs/decisions.md, the
# actor_nice entry: 6,471 env steps/s); a 1,769 MB Lambda is one vCPU.
DEFAULT_ENV_STEPS_PER_S = 6471.0
DEFAULT_MINIBATCH_MS = 1.0


def _pct(values: list[float], q: float) -> float | None:
    return float(np.percentile(values, q)) if values else None


class OpStats:
    """Latencies (ms), counts and bytes of each store operation and invocation, since the last
    :meth:`take`; thread-safe (handlers run on many threads)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._reset()

    def _reset(self) -> None:
        self.ms: dict[str, list[float]] = defaultdict(list)
        self.bytes: dict[str, int] = defaultdict(int)
        self.count: dict[str, int] = defaultdict(int)  # items: gradients in a message...
        self.since = time.monotonic()

    def record(self, op: str, ms: float, nbytes: int = 0, items: int = 1) -> None:
        with self._lock:
            self.ms[op].append(ms)
            self.bytes[op] += nbytes
            self.count[op] += items

    def take(self) -> dict[str, Any]:
        """What was recorded since the last call (and start afresh): per operation its calls,
        items, bytes, summed ms and p50/p95/p99 ms, and the seconds it covers."""
        with self._lock:
            ms, nbytes, count, since = self.ms, self.bytes, self.count, self.since
            self._reset()
        ops = {op: {"calls": len(v), "items": count[op], "bytes": nbytes[op],
                    "sum_ms": float(sum(v)), "p50_ms": _pct(v, 50), "p95_ms": _pct(v, 95),
                    "p99_ms": _pct(v, 99)} for op, v in ms.items()}
        return {"seconds": time.monotonic() - since, "ops": ops}


STATS = OpStats()


def _timed(op: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
    t0 = time.perf_counter()
    out = fn(*args, **kwargs)
    STATS.record(op, (time.perf_counter() - t0) * 1e3)
    return out


def _blob_bytes(snap: Any) -> int:
    return sum(int(a.nbytes) for a in snap.tensors.values()) if snap is not None else 0


def _env_float(name: str, default: float) -> float:
    return float(os.environ.get(name) or default)


# -- actor -----------------------------------------------------------------------------------
_TEMPLATES: dict[tuple[str, int, int], tuple[bytes, dict[str, Any]]] = {}
_TEMPLATE_LOCK = threading.Lock()
_LOCAL = threading.local()  # per thread, as a warm process's cache: the token it holds


def _trajectory_template(env_id: str, n_envs: int, steps: int) -> tuple[bytes, dict[str, Any]]:
    """One trajectory of the real shapes and dtypes for this env, encoded once: the blob's
    size and format are the real actor's, its numbers are not."""
    key = (env_id, n_envs, steps)
    with _TEMPLATE_LOCK:
        if key not in _TEMPLATES:
            from functions.envs import space_info

            info = space_info(env_id)
            rng = np.random.default_rng(0)
            t, n, d = steps, n_envs, info.obs_dim
            space = info.action_space
            act = (rng.integers(0, int(space["n"]), (t, n)) if space["type"] == "discrete"
                   else rng.standard_normal((t, n, *space["shape"])).astype(np.float32))
            f = lambda *shape: rng.standard_normal(shape).astype(np.float32)  # noqa: E731
            traj = Trajectory(
                obs=f(t, n, d), actions=act, logprobs=f(t, n), values=f(t, n),
                next_values=f(t, n), rewards=f(t, n), terminated=np.zeros((t, n), bool),
                truncated=np.zeros((t, n), bool), next_obs=f(n, d),
                final_obs=np.zeros((0, d), np.float32), final_index=np.zeros(0, np.int64),
                behaviour_version=0, env_id=env_id, invocation_id="template",
                obs_stats={"count": float(t * n), "mean": [0.0] * d, "var": [1.0] * d},
                ret_stats={"count": float(t * n), "mean": 0.0, "var": 1.0})
            _TEMPLATES[key] = (traj.to_blob(), traj.meta())
        return _TEMPLATES[key]


def _fetch_newest(rs: RunStore) -> int:
    """One ``fetch_newest`` round trip, as the real actor's PolicyCache makes it; the version
    this thread holds after it."""
    token = getattr(_LOCAL, "token", None)
    t0 = time.perf_counter()
    snap = rs.params.fetch_newest(token)
    ms = (time.perf_counter() - t0) * 1e3
    if snap is None:
        STATS.record("param_poll", ms)
        return int(_LOCAL.version)
    STATS.record("param_read", ms, _blob_bytes(snap))
    _LOCAL.token, _LOCAL.version = snap.token, snap.version
    return snap.version


def actor(event: Any, context: Any = None) -> dict[str, Any]:
    if isinstance(event, dict) and "preflight" in event:  # the real actor's store check
        from functions import preflight

        return preflight.handler(event["preflight"], context)
    ev = parse_event(ActorEvent, event, context)
    t0 = time.perf_counter()
    rs = run_store(ev.redis_url, ev.run_id)
    blob, meta = _trajectory_template(ev.env_id, ev.n_envs, ev.steps)
    version = first = _fetch_newest(rs)
    t_fetch = time.perf_counter()
    # the env time, cut where the real actor looks for a newer policy
    chunks = max(1, ev.steps // ev.refresh_steps) if ev.refresh_steps else 1
    env_s = ev.n_envs * ev.steps / _env_float(ENV_STEPS_PER_S, DEFAULT_ENV_STEPS_PER_S)
    versions = []
    for i in range(chunks):
        time.sleep(env_s / chunks)
        versions.append(version)
        if ev.refresh_steps and i < chunks - 1:
            version = _fetch_newest(rs)
    t_sample = time.perf_counter()
    meta = {**meta, "behaviour_version": first, "invocation_id": ev.invocation_id}
    traj_id = _timed("traj_append", rs.traj.append, meta, blob)
    STATS.record("traj_bytes", 0.0, len(blob))
    t_write = time.perf_counter()
    d = len(meta["obs_stats"]["mean"])
    return {
        "trajectory_id": traj_id, "behaviour_version": first, "behaviour_version_last": version,
        "behaviour_version_mean": float(np.mean(versions)), "preview_steps": 0,
        "steps": ev.n_envs * ev.steps, "episodes": 2, "episode_returns": [100.0, 120.0],
        "episode_lengths": [500, 600],
        "obs_stats": {"count": float(ev.n_envs * ev.steps), "mean": [0.0] * d, "var": [1.0] * d},
        "ret_stats": {"count": float(ev.n_envs * ev.steps), "mean": 0.0, "var": 1.0},
        "timings": {"fetch_s": t_fetch - t0, "sample_s": t_sample - t_fetch,
                    "write_s": t_write - t_sample, "total_s": t_write - t0},
        "cached": False, "invocation_id": ev.invocation_id,
    }


# -- learner ---------------------------------------------------------------------------------
class _TimedWriter(GradientWriter):
    """The real writer, each message's round trip timed."""

    def _write(self, grads: list[Gradient]) -> tuple[str | None, int]:
        t0 = time.perf_counter()
        out = super()._write(grads)
        STATS.record("grad_append", (time.perf_counter() - t0) * 1e3,
                     sum(int(g.flat_vector().nbytes) for g in grads), items=len(grads))
        return out


_LAYOUTS: dict[str, Layout] = {}


def _layout(meta: dict[str, Any]) -> Layout:
    """The policy's parameter layout, as the master has it (built once per policy shape)."""
    key = repr(sorted((k, str(v)) for k, v in meta.items() if k in ("obs_dim", "action_space",
                                                                   "spec")))
    with _TEMPLATE_LOCK:
        if key not in _LAYOUTS:
            from functions.policy import build_policy, param_layout

            _LAYOUTS[key] = param_layout(build_policy(meta))
        return _LAYOUTS[key]


def learner(event: Any, context: Any = None) -> dict[str, Any]:
    if event_schema(event) == "stellaris.learner-warmup/1":
        return {"warmed": False, "invocation_id": event.get("invocation_id"), "device": "cpu",
                "seconds": 0.0}
    ev = parse_event(LearnerEvent, event, context)
    if ev.mode != "gradient":
        raise ValueError("the synthetic learner streams gradients (learner_publishes=false)")
    t0 = time.perf_counter()
    rs = run_store(ev.redis_url, ev.run_id)
    entries = _timed("traj_read", rs.traj.get, ev.trajectory_ids)
    missing = [i for i, e in zip(ev.trajectory_ids, entries, strict=True)
               if e is None or e.blob is None]
    if missing:
        raise MissingTrajectory(f"trajectories {missing} are not in the traj stream")
    STATS.record("traj_read_bytes", 0.0, sum(len(e.blob or b"") for e in entries))
    n_samples = sum(int(e.meta.get("steps", 0)) * int(e.meta.get("n_envs", 0)) for e in entries)
    behaviour = sorted({int(e.meta.get("behaviour_version", 0)) for e in entries})
    t = time.perf_counter()
    snap = rs.params.latest()
    STATS.record("param_read", (time.perf_counter() - t) * 1e3, _blob_bytes(snap))
    version, layout = snap.version, _layout(snap.meta)
    live = ev.hold_lease_s is not None
    if live:
        _timed("hold", rs.params.hold, ev.invocation_id, version, ev.hold_lease_s)
    lineage = f"syn-{uuid.uuid4().hex[:12]}" if ev.lookahead else None
    writer = _TimedWriter(rs, version, lineage=lineage, per_message=ev.gradients_per_message,
                          holder=ev.invocation_id if live else None, lease_s=ev.hold_lease_s)
    flat = np.zeros(sum(int(np.prod(s)) for _, s in layout), np.float32)
    minibatch_s = _env_float(MINIBATCH_MS, DEFAULT_MINIBATCH_MS) / 1e3
    h = ev.hyper
    seq = 0
    try:
        for epoch in range(h.update_epochs):
            for mb in range(h.num_minibatches):
                time.sleep(minibatch_s)
                newer = writer.take_newest()
                if newer is not None and newer.version > version:
                    version = newer.version
                    STATS.record("param_read", 0.0, _blob_bytes(newer))  # came with a write
                seq += 1
                writer.submit(Gradient.from_flat(
                    flat, layout, invocation_id=ev.invocation_id, epoch=epoch, minibatch=mb,
                    version_used=version, n_samples=max(1, n_samples // h.num_minibatches),
                    behaviour_versions=behaviour, lineage=lineage,
                    seq=seq if lineage else None, lr=h.learning_rate))
    except BaseException:
        writer.abort()
        raise
    writer.close()
    return {"gradients": writer.written, "duplicates": writer.duplicates, "device": "cpu",
            "invocation_id": ev.invocation_id, "n_samples": n_samples,
            "timings": {"total_s": time.perf_counter() - t0}}


def evaluator(event: Any, context: Any = None) -> dict[str, Any]:
    """Evaluations are off in the benchmark (``eval_interval_s = 0``); answer one anyway."""
    return {"mean_return": 0.0, "episodes": 0}


HANDLERS = {"actor": actor, "learner": learner, "evaluator": evaluator}
