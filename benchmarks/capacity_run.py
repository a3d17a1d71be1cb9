"""One point of the capacity benchmark: the real orchestrator, real Redis, synthetic functions.

The orchestrator is a process of its own, started with the real command line (``python -m
orchestrator.cli train --backend lambda``) against the capacity host's Lambda endpoint
(benchmarks/capacity_host.py, another process) or against AWS Lambda; on Ray, a child that
runs the same :class:`~orchestrator.async_loop.AsyncTrainer` with the synthetic handlers as
Ray tasks (benchmarks/capacity_backends.py). After the first rollout and a warm-up, one window
is measured: the CPU time of the orchestrator's process, of ``redis-server`` and of the host
(psutil, each its own), the run's stream counters and Redis's network bytes (INFO), and the
store timings the synthetic functions recorded.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import psutil
import redis

from store import RunKeys, free_port

REPO = Path(__file__).resolve().parents[1]
ENV_ID = "Hopper-v5"
N_ENVS, ROLLOUT_STEPS = 8, 256
ROLLOUT_ENV_STEPS = N_ENVS * ROLLOUT_STEPS


@dataclass
class Point:
    """What one measurement runs."""

    hidden: int  # the policy's hidden width: 64 -> 64x64, 256 -> 256x256
    actors: int
    learners: int
    latency_ms: float = 50.0
    latency_sigma: float = 0.0
    window_s: float = 20.0
    warmup_s: float = 5.0
    backend: str = "emulated"  # emulated (the capacity host) | lambda (AWS) | ray
    env_steps_per_s: float = 6471.0
    minibatch_ms: float = 1.0
    ray_address: str | None = None
    region: str = "us-east-1"
    prefix: str = "cap"
    function_redis_url: str | None = None
    extra_set: list[str] = field(default_factory=list)

    @property
    def policy(self) -> str:
        return f"{self.hidden}x{self.hidden}"

    @property
    def learner_batch_steps(self) -> int:
        """Room for four rollouts of every actor under the async backpressure, so the actors
        stay in flight while the learners take their batches (a learner streams its gradients
        one round trip each): a round of ``4 x actors`` rollouts, shared by the learners or a
        whole one each — either way ``epochs x minibatches`` gradients per round."""
        return 4 * self.actors * ROLLOUT_ENV_STEPS


def train_args(p: Point, redis_url: str, run_dir: Path, run_id: str,
               endpoint: str | None) -> list[str]:
    """``stellaris train`` flags of a point (the orchestrator's whole configuration)."""
    args = [
        "--env", ENV_ID, "--mode", "async", "--backend", "lambda" if p.backend != "ray" else "ray",
        "--actors", str(p.actors), "--learners", str(p.learners),
        "--n-envs", str(N_ENVS), "--rollout-steps", str(ROLLOUT_STEPS),
        "--learner-batch-steps", str(p.learner_batch_steps),
        "--minutes", str(round((p.warmup_s + p.window_s + 120) / 60, 2)),
        "--redis-url", redis_url, "--function-prefix", p.prefix, "--region", p.region,
        "--eval-interval-s", "0", "--checkpoint-interval-s", "3600", "--progress", "none",
        "--run-dir", str(run_dir), "--run-id", run_id,
        "--set", f"policy.hidden_sizes=[{p.hidden},{p.hidden}]",
        # the paper's path: gradients aggregated by the orchestrator, whatever the learners
        "--set", "experimental.learner_publishes=false",
        "--set", "experimental.filler_envs=0",
        # every actor asked for in flight: just in time would hold some back on purpose
        "--set", "experimental.actor_start=eager",
    ]
    if endpoint:
        args += ["--endpoint-url", endpoint]
    if p.function_redis_url:
        args += ["--function-redis-url", p.function_redis_url]
    if p.ray_address:
        args += ["--ray-address", p.ray_address]
    for item in p.extra_set:
        args += ["--set", item]
    return args


def _cpu_s(proc: psutil.Process | None) -> float:
    if proc is None:
        return 0.0
    try:
        t = proc.cpu_times()
        return t.user + t.system
    except psutil.Error:
        return 0.0


def _stats(endpoint: str | None) -> dict[str, Any]:
    if endpoint is None:
        return {}
    with urllib.request.urlopen(f"{endpoint}/capacity/stats", timeout=10) as resp:
        return json.loads(resp.read())


@dataclass
class _Sample:
    t: float
    cpu: dict[str, float]
    traj: int
    grads: int
    net_in: int
    net_out: int
    commands: dict[str, dict[str, float]]


def _sample(r: redis.Redis, keys: RunKeys, procs: dict[str, psutil.Process | None]) -> _Sample:
    info = r.info("stats")
    cmd = r.info("commandstats")
    return _Sample(
        time.monotonic(), {k: _cpu_s(p) for k, p in procs.items()},
        int(r.get(keys.stream_appended("traj")) or 0), int(r.get(keys.stream_appended("grads")) or 0),
        int(info["total_net_input_bytes"]), int(info["total_net_output_bytes"]),
        {k.removeprefix("cmdstat_"): {"calls": float(v["calls"]), "usec": float(v["usec"])}
         for k, v in cmd.items()})


def _start_host(p: Point, log: Path) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    with log.open("wb") as err:  # the child keeps its own descriptor
        proc = subprocess.Popen(
            [sys.executable, str(REPO / "benchmarks" / "capacity_host.py"), "--port", str(port),
             "--prefix", p.prefix, "--invoke-latency-ms", str(p.latency_ms),
             "--invoke-latency-sigma", str(p.latency_sigma),
             "--env-steps-per-s", str(p.env_steps_per_s), "--minibatch-ms", str(p.minibatch_ms)],
            cwd=REPO, stdout=subprocess.DEVNULL, stderr=err, start_new_session=True,
            env={**os.environ, "OMP_NUM_THREADS": "1"})
    endpoint = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        try:
            _stats(endpoint)
            return proc, endpoint
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("the capacity host did not start") from None
            time.sleep(0.2)


def _stop(proc: subprocess.Popen[bytes] | None) -> None:
    if proc is None or proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)


def _orchestrator_cmd(p: Point, args: list[str]) -> list[str]:
    if p.backend == "ray":
        return [sys.executable, str(REPO / "benchmarks" / "capacity_backends.py"), *args]
    return [sys.executable, "-m", "orchestrator.cli", "train", *args]


def run_point(p: Point, redis_url: str, redis_pid: int | None, out_dir: Path) -> dict[str, Any]:
    """Measure one point; returns its row (flat numbers) and its op timings."""
    r = redis.Redis.from_url(redis_url)
    r.flushall()
    run_id = f"cap-{p.policy}-a{p.actors}-l{p.learners}-{int(time.time())}"
    keys = RunKeys(run_id)
    host, endpoint = (_start_host(p, out_dir / f"{run_id}.host.log") if p.backend == "emulated"
                      else (None, None))
    log = (out_dir / f"{run_id}.log").open("wb")
    orch = None
    try:
        orch = subprocess.Popen(
            _orchestrator_cmd(p, train_args(p, redis_url, out_dir / run_id, run_id, endpoint)),
            cwd=REPO, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
            env={**os.environ, "OMP_NUM_THREADS": "1"})
        deadline = time.monotonic() + 180
        while int(r.get(keys.stream_appended("traj")) or 0) < 1:
            if orch.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the orchestrator made no rollout; see {log.name}")
            time.sleep(0.2)
        time.sleep(p.warmup_s)
        procs = {"orchestrator": psutil.Process(orch.pid), "redis": psutil.Process(redis_pid) if redis_pid else None,
                 "host": psutil.Process(host.pid) if host else None}
        _stats(endpoint)  # start the functions' timings afresh
        psutil.cpu_percent()  # the machine's, from now
        a = _sample(r, keys, procs)
        time.sleep(p.window_s)
        b = _sample(r, keys, procs)
        machine = psutil.cpu_percent() * psutil.cpu_count() / 100.0  # cores busy
        ops = _stats(endpoint).get("ops", {})
        alive = orch.poll() is None
    finally:
        _stop(orch)
        _stop(host)
        log.close()
    return summarise(p, a, b, ops, machine, alive)


def _rate(ops: dict[str, Any], op: str, key: str, dt: float) -> float:
    return float(ops.get(op, {}).get(key, 0)) / dt


def summarise(p: Point, a: _Sample, b: _Sample, ops: dict[str, Any], machine_cores: float,
              alive: bool) -> dict[str, Any]:
    dt = b.t - a.t
    rollouts = (b.traj - a.traj) / dt
    cpu = {k: (b.cpu[k] - a.cpu[k]) / dt for k in b.cpu}
    grads_per_message = 32 if p.learners == 1 else 1
    gradients = _rate(ops, "grad_append", "items", dt) if ops else \
        (b.grads - a.grads) * grads_per_message / dt
    # actor invocations in flight, on average: their summed durations (latency included)
    busy = _rate(ops, "actor_invocation", "sum_ms", dt) / 1e3 if ops else None
    row: dict[str, Any] = {
        "policy": p.policy, "actors": p.actors, "learners": p.learners,
        "latency_ms": p.latency_ms, "backend": p.backend,
        "rollouts_s": rollouts, "env_steps_s": rollouts * ROLLOUT_ENV_STEPS,
        "gradients_s": gradients,
        "param_reads_s": _rate(ops, "param_read", "calls", dt) if ops else None,
        "param_polls_s": _rate(ops, "param_poll", "calls", dt) if ops else None,
        "actors_busy": busy, "actor_use": busy / p.actors if busy is not None else None,
        "orch_cpu": cpu["orchestrator"], "redis_cpu": cpu["redis"] if b.cpu["redis"] else None,
        "host_cpu": cpu["host"] if p.backend == "emulated" else None,
        "machine_cores": machine_cores,
        "redis_in_mb_s": (b.net_in - a.net_in) / dt / 1e6,
        "redis_out_mb_s": (b.net_out - a.net_out) / dt / 1e6,
        "orch_ms_per_rollout": cpu["orchestrator"] / rollouts * 1e3 if rollouts else None,
        "orch_alive": alive,
    }
    row["mean_actor_ms"] = (ops["actor_invocation"]["sum_ms"] / ops["actor_invocation"]["calls"]
                            if ops.get("actor_invocation", {}).get("calls") else None)
    lat = {op: {q: v.get(q) for q in ("p50_ms", "p95_ms", "p99_ms")} | {"calls": v["calls"]}
           for op, v in ops.items() if not op.endswith("_bytes")}
    server = {}
    for cmd, v in b.commands.items():
        calls = v["calls"] - a.commands.get(cmd, {}).get("calls", 0.0)
        if calls > 0:
            usec = v["usec"] - a.commands.get(cmd, {}).get("usec", 0.0)
            server[cmd] = {"calls_s": calls / dt, "usec_per_call": usec / calls}
    return {"point": asdict(p), "row": row, "latency": lat, "redis_commands": server}
