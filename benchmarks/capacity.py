"""How far one orchestrator and one Redis carry: the capacity benchmark.

    python benchmarks/capacity.py                          # the sweep, records under records/capacity
    python benchmarks/capacity.py --actors 16 64 --policies 64 --window-s 10 --no-record
    python benchmarks/capacity.py --backend ray --ray-address ray://head:10001 --function-redis-url redis://...
    python benchmarks/capacity.py --backend lambda --region us-east-1 --function-redis-url redis://...

Drives the real orchestrator (its own process, the real ``stellaris train``), the real store
and a real ``redis-server`` with synthetic functions (benchmarks/synthetic_functions.py) that
do no RL work but send and receive the real messages at the real sizes: rollouts of 8 x 256
Hopper steps, parameter reads of a 64x64 or 256x256 policy, per-minibatch gradients of one to
eight learners, with a real platform's invoke latency emulated. Per point it measures rollouts,
gradients and parameter reads per second, the CPU of the orchestrator's process, of Redis and
of the function host (each its own), Redis's network bytes and the latency percentiles of every
store operation the functions make; then, per policy, a linear fit of the orchestrator's CPU
against its rollouts/s gives the actor count at which it would reach 70% of a core (see
docs/scale.md). Records: one per invocation, ``benchmarks/records/capacity/``.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.capacity_run import ROLLOUT_ENV_STEPS, Point, run_point  # noqa: E402
from benchmarks.records import command_line, write_record  # noqa: E402
from store import EmbeddedRedis  # noqa: E402

CPU_LIMIT = 0.70  # of one core: above it the orchestrator, not the functions, sets the pace
USE_MIN = 0.90  # actors busy / asked: below it the actors wait for something


def points(a: argparse.Namespace) -> list[Point]:
    """The actor sweep per policy (at ``--learners``), then the learner sweep (at
    ``--learner-sweep-actors``), without repeating a point."""
    common = dict(latency_ms=a.invoke_latency_ms, latency_sigma=a.invoke_latency_sigma,
                  window_s=a.window_s, warmup_s=a.warmup_s, backend=a.backend,
                  env_steps_per_s=a.env_steps_per_s, minibatch_ms=a.minibatch_ms,
                  ray_address=a.ray_address, region=a.region, prefix=a.function_prefix,
                  function_redis_url=a.function_redis_url, extra_set=a.set)
    out: list[Point] = []
    seen: set[tuple[int, int, int]] = set()
    for hidden in a.policies:
        wanted = [(n, a.learners) for n in a.actors]
        wanted += [(a.learner_sweep_actors, m) for m in a.learner_sweep]
        for actors, learners in wanted:
            if (hidden, actors, learners) not in seen:
                seen.add((hidden, actors, learners))
                out.append(Point(hidden, actors, learners, **common))  # type: ignore[arg-type]
    return out


def _limit(r: dict[str, Any]) -> str:
    """What set the pace at a point that fell short: the process nearest its ceiling (the
    orchestrator's is 70% of a core; Redis and the functions' host are one thread or one
    GIL each: a core), or the machine when its cores were all busy."""
    if r.get("machine_cores", 0) >= 1.9:
        return "machine"
    use = {"orchestrator": r["orch_cpu"] / CPU_LIMIT, "redis": r.get("redis_cpu") or 0.0,
           "function host": r.get("host_cpu") or 0.0}
    return max(use, key=use.__getitem__)


def capacity(rows: list[dict[str, Any]], learners: int) -> dict[str, dict[str, Any]]:
    """Per policy, from the actor sweep (at ``learners``):

    - ``rollouts_s_per_actor``: one actor's rate when nothing waits (the smallest point's mean
      invocation, latency included);
    - ``measured_actors``: the most actors at which the orchestrator stayed under 70% of a
      core and the rollouts reached 90% of that rate times the actors; ``short_at`` and
      ``limit``: the first point that fell short and what set its pace;
    - ``model_actors``: the actors whose rollouts would take the orchestrator to 70% of a core
      at its measured CPU per rollout with the most actors in flight (that point's gradients
      and in-flight bookkeeping included): ``0.7 / (cpu_per_rollout x rate_per_actor)``.
    """
    out: dict[str, dict[str, Any]] = {}
    for policy in dict.fromkeys(r["policy"] for r in rows):
        sweep = sorted((r for r in rows if r["policy"] == policy and r["learners"] == learners
                        and r.get("mean_actor_ms")), key=lambda r: r["actors"])
        if not sweep:
            continue
        per_actor = 1e3 / sweep[0]["mean_actor_ms"]
        carried, short = 0, None
        for r in sweep:
            if r["orch_cpu"] < CPU_LIMIT and r["rollouts_s"] >= USE_MIN * r["actors"] * per_actor:
                carried = r["actors"]
            elif short is None:
                short = r
        top = sweep[-1]
        ms = top["orch_cpu"] / top["rollouts_s"] * 1e3 if top["rollouts_s"] else None
        model = int(CPU_LIMIT / (ms / 1e3 * per_actor)) if ms else None
        out[policy] = {
            "rollouts_s_per_actor": per_actor,
            "measured_actors": carried,
            "short_at": short["actors"] if short else None,
            "limit": _limit(short) if short else None,
            "orch_ms_per_rollout": ms, "at_actors": top["actors"],
            "model_actors": model,
            "env_steps_s_at_model": model * per_actor * ROLLOUT_ENV_STEPS if model else None,
        }
    return out


def lambda_usd_per_hour(row: dict[str, Any], actors: int = 1000, memory_mb: int = 1769,
                        prices: Any = None) -> dict[str, float]:
    """What ``actors`` actors cost per hour on Lambda, from one measured point: each actor
    invocation billed its measured duration less the emulated latency (the platform's, not
    billed), at ``memory_mb``, plus the request price; back to back, so an actor runs
    ``3600 / duration`` invocations an hour. Prices: orchestrator/cost.py's table."""
    from orchestrator.cost import PriceTable

    prices = prices or PriceTable()
    total_s = row["mean_actor_ms"] / 1e3
    billed_s = max(1e-3, total_s - row["latency_ms"] / 1e3)
    per_hour = actors * 3600.0 / total_s  # invocations
    gb_s = per_hour * billed_s * memory_mb / 1024
    return {"invocations_per_hour": per_hour, "billed_ms": billed_s * 1e3,
            "usd_per_hour": gb_s * prices.lambda_gb_second_usd
            + per_hour * prices.lambda_request_usd,
            "usd_per_learner_hour": 3600.0 * memory_mb / 1024 * prices.lambda_gb_second_usd}


def resummarise(record: Path, learners: int) -> None:
    """Recompute a record's ``capacity`` from its rows (the measurements stay as they were);
    the record says which commit's model the summary comes from."""
    from benchmarks.records import dumps, git_state

    doc = json.loads(record.read_text())
    doc["curve_points"]["capacity"] = capacity(doc["rows"], learners)
    doc["summary"]["capacity_model_commit"] = git_state()[0]
    record.write_text(dumps(doc))
    print(json.dumps(doc["curve_points"]["capacity"], indent=1))


def print_cost(record: Path, actors: int) -> None:
    """The Lambda bill of ``actors`` actors per hour at each point of a capacity record."""
    for row in json.loads(record.read_text())["rows"]:
        if row.get("mean_actor_ms"):
            c = lambda_usd_per_hour(row, actors)
            print(f"{row['policy']} actors={row['actors']} learners={row['learners']}: "
                  f"{c['billed_ms']:.0f} ms billed per rollout, {actors} actors "
                  f"${c['usd_per_hour']:.2f}/hour (a learner ${c['usd_per_learner_hour']:.3f}/hour)")


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--policies", type=int, nargs="+", default=[64, 256], metavar="WIDTH",
                   help="hidden widths of the two-layer policies (default 64 256)")
    p.add_argument("--actors", type=int, nargs="+", default=[16, 64, 128, 256],
                   metavar="N", help="actor counts of the actor sweep")
    p.add_argument("--learners", type=int, default=4,
                   help="learners in flight during the actor sweep (default 4)")
    p.add_argument("--learner-sweep", type=int, nargs="*", default=[1, 8], metavar="M",
                   help="learner counts of the learner sweep (default 1 8; none: skip it)")
    p.add_argument("--learner-sweep-actors", type=int, default=64,
                   help="actors in flight during the learner sweep (default 64)")
    p.add_argument("--invoke-latency-ms", type=float, default=50.0,
                   help="emulated median invoke latency, ms (default 50; emulated backend)")
    p.add_argument("--invoke-latency-sigma", type=float, default=0.0,
                   help="log-normal spread of the invoke latency (default 0: fixed)")
    p.add_argument("--env-steps-per-s", type=float, default=6471.0,
                   help="one synthetic actor's sampling speed (default 6471: one 8-env Hopper "
                   "actor on one core)")
    p.add_argument("--minibatch-ms", type=float, default=1.0,
                   help="one synthetic learner minibatch's compute, ms (default 1)")
    p.add_argument("--window-s", type=float, default=15.0,
                   help="measured seconds per point (default 15)")
    p.add_argument("--warmup-s", type=float, default=4.0,
                   help="seconds after the first rollout before the window (default 4)")
    p.add_argument("--backend", choices=["emulated", "lambda", "ray"], default="emulated",
                   help="emulated: the capacity host on this machine; lambda: AWS (functions "
                   "deployed with benchmarks/capacity_backends.py deploy); ray: a Ray cluster")
    p.add_argument("--ray-address", help="Ray cluster address (ray backend; unset: a local Ray)")
    p.add_argument("--region", default="us-east-1", help="AWS region (lambda backend)")
    p.add_argument("--function-prefix", default="cap",
                   help="prefix of the synthetic functions' names (default cap)")
    p.add_argument("--redis-url", help="an existing Redis (unset: an embedded redis-server; "
                   "its CPU is measured only when it is on this machine)")
    p.add_argument("--function-redis-url", help="Redis URL as the functions see it (AWS, Ray)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="more config fields for the orchestrator, as stellaris train --set")
    p.add_argument("--out", default="benchmarks/out/capacity",
                   help="folder for the orchestrators' run folders and logs")
    p.add_argument("--records", help="records dir (default benchmarks/records)")
    p.add_argument("--label", default="",
                   help="words added to the record's title (e.g. what changed since the last)")
    p.add_argument("--cost", type=Path, metavar="RECORD",
                   help="measure nothing: print what --cost-actors actors cost per hour on "
                   "Lambda at each point of this capacity record")
    p.add_argument("--cost-actors", type=int, default=1000,
                   help="actors priced by --cost (default 1000)")
    p.add_argument("--resummarise", type=Path, metavar="RECORD",
                   help="measure nothing: recompute a capacity record's capacity summary from "
                   "its rows with this commit's model, noting the commit in the record")
    p.add_argument("--no-record", action="store_true", help="print the rows, write no record")
    p.add_argument("--dump", type=Path, help="also write every point's full result (row, op "
                   "latencies, Redis commands) to this JSON file")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    a = parse(argv)
    if a.cost:
        print_cost(a.cost, a.cost_actors)
        return 0
    if a.resummarise:
        resummarise(a.resummarise, a.learners)
        return 0
    # a stopped sweep still stops its redis-server and the point's processes (finally blocks)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    out_dir = REPO / a.out
    out_dir.mkdir(parents=True, exist_ok=True)
    results = []
    redis = None if a.redis_url else EmbeddedRedis(maxmemory="6gb").start()
    try:
        url = a.redis_url or redis.url  # type: ignore[union-attr]
        pid = redis.process.pid if redis and redis.process else _local_redis_pid(url)
        for p in points(a):
            t0 = time.monotonic()
            res = run_point(p, url, pid, out_dir)
            results.append(res)
            r = res["row"]
            print(f"{p.policy} actors={p.actors} learners={p.learners}: "
                  f"{r['rollouts_s']:.0f} rollouts/s, {r['gradients_s']:.0f} grads/s, "
                  f"orchestrator {r['orch_cpu']:.0%}, redis {_pct(r['redis_cpu'])}, "
                  f"actors busy {_pct(r['actor_use'])} ({time.monotonic() - t0:.0f} s)",
                  flush=True)
    finally:
        if redis is not None:
            redis.close()
    if a.dump:
        a.dump.write_text(json.dumps(results, indent=1))
    rows = [r["row"] for r in results]
    cap = capacity(rows, a.learners)
    print(json.dumps(cap, indent=1))
    if not a.no_record:
        path = write_record(
            "capacity", command_line("benchmarks/capacity.py", argv),
            {"backend": a.backend, "latency_ms": a.invoke_latency_ms,
             "env_steps_per_s_per_actor": a.env_steps_per_s, "minibatch_ms": a.minibatch_ms,
             "window_s": a.window_s},
            {"capacity": cap}, path="aggregation (1-8 learners)", rows=rows,
            records=a.records,
            extra={"title": f"Capacity, {a.backend} functions, {a.invoke_latency_ms:g} ms invoke "
                            f"latency{', ' + a.label if a.label else ''}",
                   "legend": LEGEND,
                   "latency": [{"policy": r["point"]["hidden"], "actors": r["point"]["actors"],
                                "learners": r["point"]["learners"], "ops": r["latency"],
                                "redis_commands": r["redis_commands"]} for r in results]})
        print(f"wrote {path}")
    return 0


def _pct(x: float | None) -> str:
    """A share as a percentage; n/a where it was not measured (a Redis elsewhere, the
    functions' timings on Ray or Lambda)."""
    return "n/a" if x is None else f"{x:.0%}"


def _local_redis_pid(url: str) -> int | None:
    """The pid of the redis-server serving ``url`` when it runs on this machine (None:
    elsewhere, its CPU is not measured here)."""
    from urllib.parse import urlparse

    from redis import Redis

    if urlparse(url).hostname not in ("127.0.0.1", "localhost", "::1"):
        return None
    return int(Redis.from_url(url).info("server")["process_id"])


LEGEND = (
    "Each row: one point measured for its window after a warm-up. Rates per second; "
    "`orch_cpu`, `redis_cpu`, `host_cpu`: cores used by the orchestrator's process, "
    "redis-server and the synthetic functions' host; `machine_cores`: the whole machine's "
    "(2 cores); `actor_use`: actor invocations in flight (their durations summed over the "
    "window, latency included) over the actors asked for; `param_reads_s`: policy blobs "
    "transferred, `param_polls_s`: version checks that transferred none. Store-operation "
    "latency percentiles per point are in the record's `latency` field.")


if __name__ == "__main__":
    raise SystemExit(main())
