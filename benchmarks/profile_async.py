"""Where the async (Stellaris) path spends its time, per environment step.

Runs a short ``stellaris train`` (async) and instruments it from the outside, without touching
orchestrator/ or functions/ code:

- every invocation's client-side wall time (submit -> future done) against the function's own
  timings in its payload (actor: fetch / sample / write; learner: fetch / compute / write), so
  invocation overhead = client wall - handler time;
- the aggregator thread's work (decode + buffer, and Adam step + publish + ack), timed;
- the orchestrator process's CPU time;
- pyinstrument profiles: with ``--backend inline`` every thread (dispatcher, aggregator and the
  function threads) gets its own profiler and the sessions are combined per role, so functions
  and orchestrator show in one report; with ``--backend local`` the functions run in runtime
  worker processes, and the orchestrator's threads are profiled.

    python benchmarks/profile_async.py --backend local --minutes 1 --out benchmarks/out/profile
    python benchmarks/profile_async.py --backend inline --minutes 1 --out benchmarks/out/profile

Prints a table (microseconds per env step), writes ``breakdown.json`` and pyinstrument
text/HTML reports into ``--out``, and one record (kind ``profile``: a row per component).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

os.environ.setdefault("OMP_NUM_THREADS", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import psutil  # noqa: E402
from pyinstrument import Profiler  # noqa: E402
from pyinstrument.renderers import ConsoleRenderer, HTMLRenderer  # noqa: E402
from pyinstrument.session import Session  # noqa: E402

from benchmarks.records import command_line, write_record  # noqa: E402
from functions.events import LearnerWarmup, event_schema  # noqa: E402
from orchestrator import aggregator_thread, async_loop, run  # noqa: E402
from orchestrator.cli import parse_set  # noqa: E402
from orchestrator.config import load_config  # noqa: E402
from orchestrator.invokers import inline  # noqa: E402

SESSIONS: dict[str, list[Session]] = defaultdict(list)
TIMES: dict[str, float] = defaultdict(float)
COUNTS: dict[str, int] = defaultdict(int)
LOCK = threading.Lock()


def _add(key: str, dt: float, n: int = 1) -> None:
    with LOCK:
        TIMES[key] += dt
        COUNTS[key] += n


PROFILE = True  # --no-profiler: timings and process CPU only (pyinstrument's hooks cost CPU)


def _profiled(role: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
    if not PROFILE:
        return fn(*args, **kwargs)
    prof = Profiler(interval=0.001)
    prof.start()
    try:
        return fn(*args, **kwargs)
    finally:
        session = prof.stop()
        with LOCK:
            SESSIONS[role].append(session)


def instrument(profile_functions: bool) -> None:
    T = async_loop.AsyncTrainer

    # Client-side wall of each invocation: wrap the invoker's submit.
    orig_build = run.build_invoker

    def build_invoker(*a: Any, **k: Any) -> Any:
        inv = orig_build(*a, **k)
        orig_submit = inv.submit

        def submit(function: str, event: dict[str, Any]) -> Any:
            # The learner's warm-up (its first compile, beside the first rollouts) returns no
            # handler timings: counted apart, or its seconds of compiling would read as
            # invocation overhead.
            warm_up = event_schema(event) == LearnerWarmup.model_fields["schema_"].default
            key = "client_wall.learner_warmup" if warm_up else f"client_wall.{function}"
            t0 = time.perf_counter()
            fut = orig_submit(function, event)
            fut.add_done_callback(lambda f, k=key: _add(k, time.perf_counter() - t0))
            return fut

        inv.submit = submit
        return inv

    run.build_invoker = build_invoker

    def on_actor(self: Any, res: Any, *a: Any) -> Any:
        if res.ok and res.payload:
            t = res.payload.get("timings", {})
            for k in ("fetch_s", "sample_s", "write_s", "total_s"):
                _add(f"actor.{k}", float(t.get(k, 0.0)), 0)
            _add("actor.steps", 0.0, int(res.payload.get("steps", 0)))
            _add("actor.billed_s", res.duration_ms / 1e3)
        return orig_on_actor(self, res, *a)

    def on_learner(self: Any, res: Any, *a: Any) -> Any:
        if res.ok and res.payload:
            t = res.payload.get("timings", {})
            for k in ("fetch_s", "compute_s", "write_s", "total_s"):
                _add(f"learner.{k}", float(t.get(k, 0.0)), 0)
            _add("learner.gradients", 0.0, int(res.payload.get("gradients", 0)))
            _add("learner.billed_s", res.duration_ms / 1e3)
        return orig_on_learner(self, res, *a)

    def offer(self: Any, *a: Any) -> Any:
        # _offer applies each gradient of a message as it buffers it: that part is timed by
        # apply() and left out here
        t0, applying0 = time.perf_counter(), TIMES["aggregator.apply_s"]
        try:
            return orig_offer(self, *a)
        finally:
            _add("aggregator.offer_s",
                 time.perf_counter() - t0 - (TIMES["aggregator.apply_s"] - applying0))

    def apply(self: Any, *a: Any) -> Any:
        t0 = time.perf_counter()
        n0 = self.aggregator.aggregations
        try:
            return orig_apply(self, *a)
        finally:
            _add("aggregator.apply_s", time.perf_counter() - t0,
                 self.aggregator.aggregations - n0)

    def aggregate_forever(self: Any) -> Any:
        return _profiled("aggregator", orig_agg, self)

    A = aggregator_thread.AggregatorThread
    orig_on_actor, orig_on_learner = T._on_actor, T._on_learner
    orig_offer, orig_apply, orig_agg = A._offer, A._apply_while_ready, A._aggregate_forever
    T._on_actor, T._on_learner = on_actor, on_learner
    A._offer, A._apply_while_ready, A._aggregate_forever = offer, apply, aggregate_forever

    if profile_functions:
        orig_call = inline.call_handler

        def call_handler(function: str, *a: Any, **k: Any) -> Any:
            return _profiled(function, orig_call, function, *a, **k)

        inline.call_handler = call_handler


class ProcessCPU:
    """CPU seconds of every process of the run, by role, sampled from a thread.

    The functions run in runtime worker processes and Redis in its own process: their CPU is
    where the two cores go, and it is invisible to this process's profilers. Samples each
    descendant (and any redis-server) every ``interval`` s and keeps the last reading per pid,
    so processes that exit before the end still count up to their last sample.
    """

    def __init__(self, interval: float = 0.5) -> None:
        self.interval = interval
        self.last: dict[int, tuple[str, float]] = {}
        self.base: dict[int, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="cpu-sampler")

    @staticmethod
    def _role(proc: psutil.Process) -> str:
        cmd = " ".join(proc.cmdline())
        if "redis-server" in cmd or proc.name().startswith("redis"):
            return "redis-server"
        if proc.ppid() == os.getpid() and "runtime" in cmd:
            return "runtime server (HTTP API, billing)"
        return "runtime workers (actor and learner functions)"

    def _sample(self) -> None:
        me = psutil.Process()
        procs = me.children(recursive=True)
        procs += [p for p in psutil.process_iter() if p.pid not in {c.pid for c in procs}
                  and "redis-server" in p.name()]
        for proc in procs:
            try:
                with proc.oneshot():
                    t = proc.cpu_times()
                    cpu = t.user + t.system
                    role = self.last[proc.pid][0] if proc.pid in self.last else self._role(proc)
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue
            self.base.setdefault(proc.pid, cpu if not self.last else 0.0)
            self.last[proc.pid] = (role, cpu)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self._sample()

    def start(self) -> None:
        self._sample()  # what existed before the run (e.g. a shared redis-server) is a baseline
        self._thread.start()

    def stop(self) -> dict[str, float]:
        self._sample()
        self._stop.set()
        self._thread.join(timeout=5)
        out: dict[str, float] = defaultdict(float)
        for pid, (role, cpu) in self.last.items():
            out[role] += cpu - self.base.get(pid, 0.0)
        return dict(out)


def write_profiles(out: Path) -> dict[str, str]:
    paths = {}
    for role, sessions in SESSIONS.items():
        if not sessions:
            continue
        combined = sessions[0]
        for s in sessions[1:]:
            combined = Session.combine(combined, s)
        (out / f"profile_{role}.txt").write_text(ConsoleRenderer().render(combined))
        (out / f"profile_{role}.html").write_text(HTMLRenderer().render(combined))
        flat = ConsoleRenderer(flat=True).render(combined)
        (out / f"profile_{role}_flat.txt").write_text(flat)
        paths[role] = str(out / f"profile_{role}.txt")
    return paths


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--env", default="Hopper-v5")
    p.add_argument("--backend", default="local", choices=["inline", "local"])
    p.add_argument("--minutes", type=float, default=1.0)
    p.add_argument("--actors", type=int, default=2)
    p.add_argument("--learners", type=int, default=1)
    p.add_argument("--buffer-max", type=int, help="H_max (default: learners)")
    p.add_argument("--no-profiler", action="store_true",
                   help="no pyinstrument: the CPU numbers without the profiler's own overhead")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="any TrainConfig field, e.g. --set experimental.publish_interval_ms=10")
    p.add_argument("--out", default="benchmarks/out/profile")
    p.add_argument("--records", help="records dir (default: $STELLARIS_RECORDS_DIR or "
                   "benchmarks/records)")
    p.add_argument("--no-record", action="store_true", help="write no record")
    a = p.parse_args(argv)
    name = a.backend + (f"-H{a.buffer_max}" if a.buffer_max else "") + "".join(
        f"-{kv.replace('=', '')}" for kv in a.set)
    out = Path(a.out) / name
    out.mkdir(parents=True, exist_ok=True)
    global PROFILE
    PROFILE = not a.no_profiler
    if a.no_profiler:
        name += "-noprof"
        out = Path(a.out) / name
        out.mkdir(parents=True, exist_ok=True)
    instrument(profile_functions=a.backend == "inline")
    overrides = parse_set(a.set)
    if a.buffer_max is not None:
        overrides.setdefault("aggregation", {})["buffer_max"] = a.buffer_max
    cfg = load_config(None, {**overrides,
        "env": a.env, "mode": "async", "backend": a.backend, "minutes": a.minutes,
        "actors": a.actors, "learners": a.learners, "run_dir": str(out / "run"), "restart": True,
        "progress": "none", "eval_interval_s": 0,
    })
    load0 = os.getloadavg()[0]
    cpu0 = time.process_time()
    processes = ProcessCPU()
    processes.start()
    summary = _profiled("dispatcher", run.train, cfg)
    cpu = time.process_time() - cpu0
    process_cpu = {"orchestrator": cpu, **processes.stop()}
    steps = max(1, int(summary["env_steps"]))
    wall = float(summary["wall_s"])
    us = 1e6 / steps

    actor_client = TIMES["client_wall.actor"]
    learner_client = TIMES["client_wall.learner"]
    rows = {
        "actor sampling (env + policy)": TIMES["actor.sample_s"],
        "actor store (policy fetch + trajectory write)": TIMES["actor.fetch_s"] + TIMES["actor.write_s"],
        "actor invocation overhead (client wall - handler)": actor_client - TIMES["actor.total_s"],
        "learner compute (batch + fwd/bwd, per-minibatch version read)": TIMES["learner.compute_s"],
        "learner store (trajectories + params fetch, gradient flush)":
            TIMES["learner.fetch_s"] + TIMES["learner.write_s"],
        "learner invocation overhead (client wall - handler)": learner_client - TIMES["learner.total_s"],
        "aggregation: decode + buffer (aggregator thread)": TIMES["aggregator.offer_s"],
        "aggregation: Adam step + publish + ack": TIMES["aggregator.apply_s"],
    }
    overhead = sum(v for k, v in rows.items() if "store" in k or "overhead" in k
                   or "aggregation" in k)
    busy = sum(rows.values())
    breakdown = {
        "env": a.env, "backend": a.backend, "actors": a.actors, "learners": a.learners,
        "buffer_max": a.buffer_max, "overrides": overrides, "process_cpu_s": process_cpu,
        "wall_s": wall, "env_steps": steps, "sps": steps / wall, "load_before": load0,
        "load_after": os.getloadavg()[0], "orchestrator_cpu_s": cpu,
        "return": summary.get("mean_return"), "aggregations": COUNTS["aggregator.apply_s"],
        "gradients": COUNTS["learner.gradients"],
        "learner_warmup_client_s": TIMES["client_wall.learner_warmup"],
        "seconds": rows, "us_per_env_step": {k: v * us for k, v in rows.items()},
        "wall_us_per_env_step": wall * us, "overhead_s": overhead,
        "overhead_frac_of_busy": overhead / max(busy, 1e-9),
        "overhead_frac_of_2core_wall": overhead / max(2 * wall, 1e-9),
        "orchestrator_cpu_us_per_env_step": cpu * us,
        "profiles": write_profiles(out),
    }
    (out / "breakdown.json").write_text(json.dumps(breakdown, indent=2))
    print(f"{a.env} async, backend {a.backend}: {steps:,} steps in {wall:.1f} s "
          f"({steps / wall:.0f}/s), return {summary.get('mean_return')}, load "
          f"{load0:.2f}->{breakdown['load_after']:.2f}")
    print(f"{'component':64s} {'s':>8s} {'us/step':>9s}")
    for k, v in rows.items():
        print(f"{k:64s} {v:8.2f} {v * us:9.1f}")
    print(f"{'wall-clock':64s} {wall:8.2f} {wall * us:9.1f}")
    print(f"learner warm-up (compile beside the first rollouts, once a run, not in the table): "
          f"{TIMES['client_wall.learner_warmup']:.2f} s")
    print(f"orchestrator process CPU (all its threads): {cpu:.2f} s = {cpu * us:.1f} us/step")
    print("CPU by process (s, us/step, share of 2 cores x wall):")
    for role, sec in sorted(process_cpu.items(), key=lambda kv: -kv[1]):
        print(f"  {role:62s} {sec:8.2f} {sec * us:9.1f} {100 * sec / (2 * wall):5.1f}%")
    print(f"overhead (store + invocation + aggregation): {overhead:.2f} s = "
          f"{100 * breakdown['overhead_frac_of_busy']:.1f}% of busy time, "
          f"{100 * breakdown['overhead_frac_of_2core_wall']:.1f}% of 2 cores x wall")
    if not a.no_record:
        rows = [{"component": k, "s": v, "µs per env step": v * us} for k, v in rows.items()]
        rows += [{"component": "wall-clock", "s": wall, "µs per env step": wall * us}]
        kept = {k: v for k, v in breakdown.items()
                if k not in ("seconds", "us_per_env_step", "profiles")}
        print(write_record("profile", command_line("benchmarks/profile_async.py", argv), kept,
                           rows=rows, run_dir=out / "run", records=a.records,
                           extra={"title": f"{a.env} async, backend {a.backend}"}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
