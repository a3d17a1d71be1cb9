"""Stellaris async vs our sync PPO vs RLlib 2.60 PPO vs a lean single-process PPO, side by side.

One command runs every system for the same wall-clock budget and the same seeds,
*sequentially* (never two systems at once: they would fight for the same two cores), each in
its own process, and writes:

- a run folder per (env, system, seed) under ``--out`` (default ``benchmarks/out/compare``)
  with ``metrics.csv`` (same columns for every system), ``summary.json`` and ``bench.json``
  (command, exit status, load average before and after);
- PNG figures per env: return vs wall-clock, vs env steps, vs $ (mean over seeds, min-max
  band), final-cost bars, staleness histograms of the Stellaris runs;
- the section ``## Stellaris vs sync PPO vs RLlib vs lean PPO`` of ``benchmarks/RESULTS.md``
  (only that section), regenerated from *every* run folder found for the env and budget, so
  ablation runs made with the same budget add rows to it.

    python benchmarks/compare.py --quick                      # Hopper-v5, 2 min, 2 seeds
    python benchmarks/compare.py                              # 3 envs, 10 min, 3 seeds
    python benchmarks/compare.py --quick --systems stellaris --is-correction none   # ablation
    python benchmarks/compare.py --quick --report-only        # redraw + rewrite the section
    python benchmarks/compare.py --envs Hopper-v5 --minutes 5 --report-only \
        --out benchmarks/out/compare-s17 --pool benchmarks/out/compare-s16   # pool sessions
    python benchmarks/compare.py ... --report-only --pool <older out> --label-by-hyper
        # pool sessions by the hyper-parameters each run recorded, not the flags of then

System names: ``stellaris`` (async, ``--backend``, default local runtime), ``sync`` (our
synchronous PPO on the same functions: 2 actors x 4 envs x 256 steps = a 2048-step round, the
lean PPO's 8 trajectories of 256 steps split over the two cores),
``rllib`` (:mod:`benchmarks.rllib_ppo`), ``lean`` (:mod:`benchmarks.lean_ppo`). Ablation flags
change the Stellaris system only and tag its variant name, e.g. ``stellaris[is=none]``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import statistics
import subprocess
import sys
import time
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks._common import read_curve, read_summary, rewrite_section  # noqa: E402
from orchestrator.cost import UNSIZED_FIXED_PRICES, PriceTable, reprice_fixed  # noqa: E402

SYSTEMS = ("stellaris", "sync", "rllib", "lean")
LABELS = {"stellaris": "Stellaris (async)", "sync": "our sync PPO", "rllib": "RLlib 2.60 PPO",
          "lean": "lean PPO"}
TARGETS = {"Hopper-v5": [1000, 1500, 2000], "Walker2d-v5": [1000, 2000, 3000],
           "HalfCheetah-v5": [1000, 2000, 3000], "CartPole-v1": [100, 200, 400]}
QUICK_TARGETS = {"Hopper-v5": [250, 500]}  # reachable in a short budget: ratios need a target
FULL_ENVS = ["Hopper-v5", "HalfCheetah-v5", "Walker2d-v5"]
SECTION = "## Stellaris vs sync PPO vs RLlib vs lean PPO"
KEEP_MARKER = "<!-- compare.py keeps what follows: hand-written notes -->"
GRACE_S = 5.0  # a run's last row may land a few seconds after its budget (shutdown)


# -- running ---------------------------------------------------------------------------------
def variant_tag(args: argparse.Namespace) -> str:
    parts = []
    if args.is_correction:
        parts.append(f"is={args.is_correction}")
    if args.no_staleness_weights:
        parts.append("noweights")
    if args.no_bound_decay:
        parts.append("nodecay")
    if args.actors is not None:
        parts.append(f"a={args.actors}")
    if args.learners is not None:
        parts.append(f"l={args.learners}")
    if args.buffer_max is not None:
        parts.append(f"H={args.buffer_max}")
    if args.backend != "local":
        parts.append(f"backend={args.backend}")
    if args.no_compile:  # its own folders: eager runs must not overwrite the compiled ones
        parts.append("nocompile")
    parts += list(args.set)
    return ",".join(parts)


def variant_name(system: str, tag: str) -> str:
    return f"{system}[{tag}]" if tag and system == "stellaris" else system


def _dirname(variant: str) -> str:
    return re.sub(r"[^A-Za-z0-9._=-]", "_", variant)


def budget_dir(out: Path, env: str, minutes: float) -> Path:
    return out / f"{env}-{minutes:g}min"


def command(system: str, env: str, seed: int, minutes: float, run_dir: Path,
            args: argparse.Namespace) -> list[str]:
    py = sys.executable
    if system in ("stellaris", "sync"):
        cmd = [py, "-c", "import sys; from orchestrator.cli import main; sys.exit(main())", "train",
               "--env", env, "--seed", str(seed), "--minutes", f"{minutes:g}",
               "--run-dir", str(run_dir), "--restart", "--progress", "plain",
               "--eval-interval-s", "0"]
        if args.no_compile:
            cmd += ["--set", "learner_compile=false"]
        if args.anneal_lr:
            cmd += ["--set", "hyper.anneal_lr=true"]
        for kv in shared_hyper(args):
            cmd += ["--set", f"hyper.{kv}"]
        cmd += stop_flag(args) + init_flag(args)
        if system == "sync":
            # the lean PPO's batch exactly (8 envs x 256 steps), its sampling on both cores;
            # 2 actors x 8 envs x 128 steps bootstrapped GAE twice as often and learned less
            # per env step (benchmarks/RESULTS.md, session 6)
            cmd += ["--mode", "sync", "--backend", args.backend, "--actors", "2",
                    "--n-envs", "4", "--rollout-steps", "256"]
            return cmd
        cmd += ["--mode", "async", "--backend", args.backend]
        if args.actors is not None:
            cmd += ["--actors", str(args.actors)]
        if args.learners is not None:
            cmd += ["--learners", str(args.learners)]
        if args.is_correction:
            cmd += ["--is-correction", args.is_correction]
        if args.no_staleness_weights:
            cmd.append("--no-staleness-weights")
        if args.no_bound_decay:
            cmd.append("--no-bound-decay")
        if args.buffer_max is not None:
            cmd += ["--set", f"buffer_max={args.buffer_max}"]
        for kv in args.set:
            cmd += ["--set", kv]
        return cmd
    script = "lean_ppo.py" if system == "lean" else "rllib_ppo.py"
    cmd = [py, str(REPO / "benchmarks" / script), "--env", env, "--seed", str(seed),
           "--minutes", f"{minutes:g}", "--out", str(run_dir)]
    if system == "lean" and args.is_correction:
        cmd += ["--is-correction", args.is_correction]
    if system == "lean" and args.no_compile:
        cmd.append("--no-compile")
    if system == "lean" and args.anneal_lr:
        cmd += ["--hyper", "anneal_lr=true"]
    if system == "rllib" and args.anneal_lr:
        # RLlib's schedules count env steps: the steps it gets through in this budget here
        cmd += ["--anneal-lr-steps", str(int(minutes * 60 * args.rllib_sps))]
    for kv in shared_hyper(args):  # lean_ppo.py and rllib_ppo.py both take PPOHyper fields
        cmd += ["--hyper", kv]
    return cmd + stop_flag(args) + init_flag(args)


def init_flag(args: argparse.Namespace) -> list[str]:
    init_from = getattr(args, "init_from", None)
    return ["--init-from", str(Path(init_from).resolve())] if init_from else []


def shared_hyper(args: argparse.Namespace) -> list[str]:
    """``--hyper`` pairs: one PPOHyper change given to every system alike (a matched change,
    unlike ``--set``, which is Stellaris' alone)."""
    return list(getattr(args, "hyper", []) or [])


def stop_flag(args: argparse.Namespace) -> list[str]:
    """``--stop-at-return`` for any system's command: each stops on its own logged mean return."""
    stop = getattr(args, "stop_at_return", None)
    return [] if stop is None else ["--stop-at-return", f"{stop:g}"]


def hyper_suffix(pairs: Sequence[str]) -> str:
    """The ``--out`` suffix of a shared hyper-parameter change: its runs get their own folders,
    as a changed baseline must not be pooled with the defaults' runs by accident."""
    return "".join(f"-{_dirname(kv)}" for kv in pairs)


def warm_compile_cache(env: str) -> None:
    """Compile the learner loss for ``env`` once before the timed runs, so every system and
    seed finds inductor's disk cache warm (~2 s to compile in a run) and none pays the cold
    ~15 s of the first run on a machine. Untimed, like the runtime's and Ray's start-up."""
    code = ("import sys; from functions.compiled import warm_cache; "
            "print(f'compile cache for {sys.argv[1]}: warm in {warm_cache(sys.argv[1]):.1f} s')")
    subprocess.run([sys.executable, "-c", code, env], cwd=REPO, check=True)


def wait_for_load(max_load: float | None, max_wait_s: float) -> float:
    load = os.getloadavg()[0]
    if max_load is None:
        return load
    deadline = time.monotonic() + max_wait_s
    while load > max_load and time.monotonic() < deadline:
        time.sleep(5)
        load = os.getloadavg()[0]
    return load


def run_one(system: str, env: str, seed: int, minutes: float, run_dir: Path,
            args: argparse.Namespace, extra: Sequence[str] = ()) -> dict[str, Any]:
    """Run one system's command (plus ``extra`` arguments) into ``run_dir``."""
    run_dir.mkdir(parents=True, exist_ok=True)
    for stale in ("metrics.csv", "summary.json", "bench.json"):
        (run_dir / stale).unlink(missing_ok=True)
    cmd = command(system, env, seed, minutes, run_dir, args) + list(extra)
    load0 = wait_for_load(args.max_load, args.max_load_wait_s)
    t0 = time.monotonic()
    # the repo first, then whatever the caller's PYTHONPATH holds (packages installed there)
    pythonpath = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)
    env_vars = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": pythonpath}
    with open(run_dir / "stdout.log", "w") as fh:
        rc = subprocess.call(cmd, cwd=REPO, stdout=fh, stderr=subprocess.STDOUT, env=env_vars,
                             timeout=minutes * 60 + 300)
    info = {"system": system, "env": env, "seed": seed, "minutes": minutes, "cmd": cmd, "rc": rc,
            "elapsed_s": time.monotonic() - t0, "load_before": load0,
            "stop_at_return": getattr(args, "stop_at_return", None),
            "load_after": os.getloadavg()[0], "started": time.strftime("%Y-%m-%d %H:%M:%S")}
    (run_dir / "bench.json").write_text(json.dumps(info, indent=2))
    s = read_summary(run_dir)
    ret = s.get("mean_return")
    print(f"  {system:10s} seed {seed}: rc {rc} | {s.get('env_steps', 0):>8,} steps | "
          f"{s.get('sps', 0):6.0f} steps/s | return {'-' if ret is None else f'{ret:7.1f}'} | "
          f"${(s.get('cost') or {}).get('total_usd', 0):.5f} | load {load0:.2f}->"
          f"{info['load_after']:.2f}", flush=True)
    return info


# -- reading -----------------------------------------------------------------------------------
def collect(root: Path, redis_host: str | None = None) -> dict[str, list[dict[str, Any]]]:
    """variant -> runs (curve, summary, bench) found under one env/budget folder.
    ``redis_host`` (``orchestrator`` / ``elasticache``): every serverless run's bill with Redis
    placed so (:func:`place_redis`), whatever its run chose; None: as each run billed it."""
    out: dict[str, list[dict[str, Any]]] = {}
    if not root.exists():
        return out
    for vdir in sorted(p for p in root.iterdir() if p.is_dir() and p.name != "figures"):
        for sdir in sorted(vdir.glob("seed*")):
            bench = json.loads((sdir / "bench.json").read_text()) if (sdir / "bench.json").exists() \
                else {}
            summary = read_summary(sdir)
            if not summary:
                continue
            curve = read_curve(sdir)
            if redis_host is not None:
                summary = place_redis(curve, summary, redis_host == "orchestrator")
            curve["cost_usd_unsized"] = unsized_costs(curve, summary)
            curve["cost_usd_redis_node"] = redis_node_costs(curve, summary)
            out.setdefault(bench.get("variant", vdir.name), []).append({
                "dir": sdir, "seed": int(sdir.name[4:]), "curve": curve,
                "summary": summary, "bench": bench})
    return out


def repriced_costs(curve: dict[str, list[float]], summary: dict[str, Any],
                   overrides: dict[str, float], redis_on_orchestrator: bool) -> list[float]:
    """A run's $ column with its always-on parts priced by ``overrides`` on top of the run's
    prices and Redis placed as asked; a serverful run's bill (one machine) is unchanged.
    Redis's CPU (it shares the orchestrator's baseline only where it runs there) is the row's,
    or for runs from before session 28, which logged none, its run's mean rate."""
    cost = summary.get("cost") or {}
    if "orchestrator" not in (cost.get("fixed") or {}):
        return list(curve["cost_usd"])
    run_prices = PriceTable.from_overrides(cost.get("prices"))
    other = PriceTable.from_overrides({**(cost.get("prices") or {}), **overrides})
    redis_cpu = curve.get("redis_cpu_s") or []
    if not any(redis_cpu):
        redis_cpu = [_redis_vcpu(summary) * w for w in curve["wall_s"]]
    return [reprice_fixed(c, w, cpu, run_prices, other,
                          bool(cost.get("redis_on_orchestrator", False)), redis_on_orchestrator,
                          rcpu)
            for c, w, cpu, rcpu in zip(curve["cost_usd"], curve["wall_s"],
                                       curve["orchestrator_cpu_s"], redis_cpu, strict=True)]


def _redis_vcpu(summary: dict[str, Any]) -> float:
    """Redis's mean vCPU over a run (its footprint): its CPU where no row or bill logged it."""
    return float(((summary.get("footprint") or {}).get("redis") or {}).get("vcpu_mean") or 0.0)


def place_redis(curve: dict[str, list[float]], summary: dict[str, Any],
                on_orchestrator: bool) -> dict[str, Any]:
    """A serverless run's bill (its curve's $ columns, in place, and the summary returned)
    with Redis on the orchestrator's instance or on its own node, so that runs from before
    and after session 28 (which made the former the default) are priced alike in one report."""
    cost = summary.get("cost") or {}
    if ("orchestrator" not in (cost.get("fixed") or {})
            or bool(cost.get("redis_on_orchestrator", False)) == on_orchestrator):
        return summary
    # the always-on parts' change per row, the same in the dedicated-vCPU bill
    shift = [m - c for m, c in zip(repriced_costs(curve, summary, {}, on_orchestrator),
                                   curve["cost_usd"], strict=True)]
    for column in ("cost_usd", "cost_usd_dedicated_vcpu"):
        curve[column] = [c + d for c, d in zip(curve[column], shift, strict=True)]
    wall = float(cost.get("wall_s") or summary.get("wall_s") or 0.0)
    redis_cpu = cost.get("redis_cpu_s")
    if redis_cpu is None:
        redis_cpu = wall * _redis_vcpu(summary)
    prices = PriceTable.from_overrides(cost.get("prices"))
    total = reprice_fixed(float(cost.get("total_usd") or 0.0), wall,
                          float(cost.get("orchestrator_cpu_s") or 0.0), prices, prices,
                          bool(cost.get("redis_on_orchestrator", False)), on_orchestrator,
                          float(redis_cpu))
    return {**summary, "cost": {**cost, "total_usd": total,
                                "redis_on_orchestrator": on_orchestrator}}


def unsized_costs(curve: dict[str, list[float]], summary: dict[str, Any]) -> list[float]:
    """A run's $ column with its always-on parts at the unsized prices (a t3.medium
    orchestrator and a cache.t4g.small Redis of its own, as sessions 1-21 priced them), to
    report next to the sized ones."""
    return repriced_costs(curve, summary, UNSIZED_FIXED_PRICES, redis_on_orchestrator=False)


def redis_node_costs(curve: dict[str, list[float]], summary: dict[str, Any]) -> list[float]:
    """A run's $ column with Redis on a cache.t4g.micro of its own, as sessions 22-27 priced
    every run (since session 28 Redis runs on the orchestrator's instance by default)."""
    return repriced_costs(curve, summary, {}, redis_on_orchestrator=False)


def collect_pooled(roots: list[Path], by_hyper: bool = False,
                   redis_host: str | None = None) -> dict[str, list[dict[str, Any]]]:
    """:func:`collect` over several env/budget folders (e.g. earlier sessions' ``--out``), each
    variant's runs in one list. A seed found in two folders counts twice: an async run is not
    reproducible from its seed (which version each actor samples with depends on timing), so
    each run is its own draw. ``by_hyper``: each run under :func:`label_by_hyper`'s name."""
    out: dict[str, list[dict[str, Any]]] = {}
    for root in roots:
        for variant, runs in collect(root, redis_host).items():
            for run in runs:
                out.setdefault(label_by_hyper(variant, run) if by_hyper else variant, []).append(run)
    return out


def default_hyper(system: str) -> dict[str, Any]:
    """What ``system`` runs with when given no hyper-parameters today: RLlib's matched baseline
    for RLlib, PPOHyper's defaults for ours."""
    from benchmarks.rllib_ppo import baseline_hyper  # imports torch: only when relabelling
    from functions.messages import PPOHyper

    return (baseline_hyper() if system == "rllib" else PPOHyper()).model_dump()


# PPOHyper fields added after runs were recorded, with the value that is exactly what every run
# before the field did (the code had no other way then): such a run is labelled as if it had
# recorded that value, not ``unrecorded``.
BEHAVIOUR_BEFORE_FIELD: dict[str, Any] = {"norm_adv_scope": "minibatch"}


def label_by_hyper(variant: str, run: dict[str, Any]) -> str:
    """``variant`` renamed for the hyper-parameters its run recorded (``config.json``): the
    system, its tags that are not hyper-parameters, and each PPOHyper field that differs from
    what the system runs with by default today (``hyper.target_kl=null``). Runs of the same
    settings then pool across sessions whatever flags, or defaults, named them then; a field
    the run did not record (it predates it) is ``unrecorded``, so such a run never passes for
    today's defaults — unless :data:`BEHAVIOUR_BEFORE_FIELD` says what every run before the
    field did. A run without a recorded ``hyper`` keeps its name."""
    cfg = run["dir"] / "config.json"
    hyper = json.loads(cfg.read_text()).get("hyper") if cfg.exists() else None
    if not isinstance(hyper, dict):
        return variant
    name, _, rest = variant.partition("[")
    system = run["bench"].get("system") or name
    tags = [t for t in rest.rstrip("]").split(",") if t and not t.startswith("hyper.")]
    for field, default in default_hyper(system).items():
        recorded = field in hyper or field in BEHAVIOUR_BEFORE_FIELD
        ran_with = hyper[field] if field in hyper else BEHAVIOUR_BEFORE_FIELD.get(field)
        if not recorded or ran_with != default:
            tags.append(f"hyper.{field}={json.dumps(ran_with) if recorded else 'unrecorded'}")
    return f"{system}[{','.join(tags)}]" if tags else system


def return_at(curve: dict[str, list[float]], t: float) -> float | None:
    """The return logged at wall-clock ``t`` (``None`` when the run ended before ``t``)."""
    if not curve["wall_s"] or curve["wall_s"][-1] < t - GRACE_S:
        return None
    best = None
    for w, r in zip(curve["wall_s"], curve["episodic_return"], strict=True):
        if w <= t + GRACE_S:
            best = r
    return best


def first_reaching(curve: dict[str, list[float]], target: float) -> int | None:
    """Index of the first logged row whose return reaches ``target`` (None: never)."""
    return next((i for i, r in enumerate(curve["episodic_return"]) if r >= target), None)


def time_to(curve: dict[str, list[float]], target: float,
            cost: str = "cost_usd") -> tuple[float, float] | None:
    """(wall s, $) at the first row reaching ``target``; ``cost`` names the $ column (e.g.
    ``cost_usd_dedicated_vcpu``; a curve without it has only the one bill)."""
    i = first_reaching(curve, target)
    return None if i is None else (curve["wall_s"][i], (curve.get(cost) or curve["cost_usd"])[i])


def steps_to(curve: dict[str, list[float]], target: float) -> float | None:
    """Env steps at the first row reaching ``target``: sample efficiency, which the machine's
    load does not enter (time = steps / throughput)."""
    i = first_reaching(curve, target)
    return None if i is None else curve["env_steps"][i]


def entropy_at(curve: dict[str, list[float]], target: float) -> float | None:
    """The policy's entropy (nats, its last update's) at the first row reaching ``target``:
    how narrow a system's policy had become for the same progress. Stale data narrows it
    faster per unit of return (benchmarks/RESULTS.md, session 32), a suspect in async's
    plateaus though not the whole story. None: not reached, or a run that logs no entropy."""
    return _at_first(curve, target, "entropy")


def _at_first(curve: dict[str, list[float]], target: float, column: str) -> float | None:
    """``column``'s value at the first row reaching ``target``; None where the return never
    got there or the run logs no value then (a missing column, NaN)."""
    i = first_reaching(curve, target)
    values = curve.get(column) or []
    if i is None or i >= len(values) or math.isnan(values[i]):
        return None
    return values[i]


def reward_per_step_at(curve: dict[str, list[float]], target: float) -> float | None:
    """Reward per env step (mean return / mean episode length, the same last 100 episodes) at
    the first row reaching ``target``. In a locomotion task it is the gait's speed plus the
    alive bonus: the same return from shorter, faster episodes is a gait that falls. On a
    plateau it climbs while the return stalls or sinks (benchmarks/RESULTS.md, session 42:
    session 41's two plateaued runs had the fastest gaits of 88 at 1,000, session 42's were
    average there — a symptom, not a forecast). None: not reached, or no length logged."""
    ret = _at_first(curve, target, "episodic_return")
    length = _at_first(curve, target, "episodic_length")
    return ret / length if ret is not None and length else None  # length 0: none logged


def bootstrap_ratio_ci(num: list[float], den: list[float], level: float = 0.95,
                       resamples: int = 10_000, seed: int = 0) -> tuple[float, float] | None:
    """Percentile bootstrap interval of ``mean(num) / mean(den)``, resampling each system's
    seeds independently (their runs share a seed number, not an outcome). A fixed generator
    keeps a regenerated report identical."""
    import numpy as np

    if len(num) < 2 or len(den) < 2:
        return None
    rng = np.random.default_rng(seed)
    a, b = np.asarray(num, dtype=float), np.asarray(den, dtype=float)
    ma = a[rng.integers(0, len(a), (resamples, len(a)))].mean(axis=1)
    mb = b[rng.integers(0, len(b), (resamples, len(b)))].mean(axis=1)
    ratios = ma / np.maximum(mb, 1e-9)
    tail = (1.0 - level) / 2.0
    return float(np.quantile(ratios, tail)), float(np.quantile(ratios, 1.0 - tail))


def _md_table(head: list[str], rows: list[list[str]]) -> list[str]:
    """A Markdown table's lines, then a blank one."""
    return ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head),
            *("| " + " | ".join(r) + " |" for r in rows), ""]


def _at_target_table(caption: str, name: str, key: str, st: dict[str, Any], order: list[str],
                     targets: list[float]) -> list[str]:
    """A caption and a table of one per-target statistic (``st[v]["to"][t][key]``, mean ± sd
    over the runs) for each system."""
    return [caption, ""] + _md_table(
        ["system"] + [f"{name} at {t:g}" for t in targets],
        [[LABELS.get(v, v)] + [_ms(st[v]["to"][t][key], "{:.2f}") for t in targets]
         for v in order])


def _ms(xs: list[float], fmt: str = "{:.0f}") -> str:
    if not xs:
        return "-"
    m = sum(xs) / len(xs)
    if len(xs) == 1:
        return fmt.format(m)
    sd = math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - 1))
    return f"{fmt.format(m)} ± {fmt.format(sd)}"


def budget_points(minutes: float, longest: float) -> list[float]:
    """The fixed budgets (2, 5, 10 min) a report can read off runs as long as ``longest``."""
    points = [p for p in (1, 2, 5, 10) if p <= longest + 1e-9 and (p >= 2 or minutes < 5)]
    return sorted(set(points) | {minutes})


def run_minutes(run: dict[str, Any], default: float) -> float:
    return float(run["bench"].get("minutes") or default)


def stats(runs: list[dict[str, Any]], minutes: float, targets: list[float],
          points: list[float] | None = None) -> dict[str, Any]:
    points = points or budget_points(minutes, minutes)
    out: dict[str, Any] = {"n": len(runs), "points": points}
    out["ret_at"] = {p: [r for r in (return_at(x["curve"], p * 60) for x in runs) if r is not None]
                     for p in points}
    out["final"] = [x["summary"].get("mean_return") for x in runs
                    if x["summary"].get("mean_return") is not None]
    out["best"] = [max(x["curve"]["episodic_return"]) for x in runs if x["curve"]["episodic_return"]]
    out["sps"] = [float(x["summary"].get("sps") or 0) for x in runs]
    out["usd"] = [float((x["summary"].get("cost") or {}).get("total_usd") or 0) for x in runs]
    out["wall"] = [float(x["summary"].get("wall_s") or 0) for x in runs]
    out["load"] = [x["bench"].get("load_before") for x in runs if x["bench"].get("load_before")
                   is not None]
    out["wait_frac"] = [f for f in (cpu_wait_fraction(x["summary"]) for x in runs) if f is not None]
    out["footprint"] = [x["summary"]["footprint"] for x in runs if x["summary"].get("footprint")]
    out["to"] = {}
    for tgt in targets:
        hits = [time_to(x["curve"], tgt) for x in runs]
        dedicated = [time_to(x["curve"], tgt, "cost_usd_dedicated_vcpu") for x in runs]
        unsized = [time_to(x["curve"], tgt, "cost_usd_unsized") for x in runs]
        redis_node = [time_to(x["curve"], tgt, "cost_usd_redis_node") for x in runs]
        steps = [steps_to(x["curve"], tgt) for x in runs]
        out["to"][tgt] = {"reached": sum(h is not None for h in hits), "n": len(runs),
                          "t": [h[0] for h in hits if h], "usd": [h[1] for h in hits if h],
                          "usd_dedicated": [h[1] for h in dedicated if h],
                          "usd_unsized": [h[1] for h in unsized if h],
                          "usd_redis_node": [h[1] for h in redis_node if h],
                          "steps": [n for n in steps if n is not None],
                          "entropy": [h for h in (entropy_at(x["curve"], tgt) for x in runs)
                                      if h is not None],
                          "per_step": [r for r in (reward_per_step_at(x["curve"], tgt)
                                                   for x in runs) if r is not None]}
    return out


def cpu_wait_fraction(summary: dict[str, Any]) -> float | None:
    """Of a run's billed function time, the share its functions spent waiting for a core of
    the shared host (the local runtime measures it); ``None`` when nothing measured it."""
    comps = ((summary.get("cost") or {}).get("functions") or {}).values()
    billed = sum(float(c.get("billed_ms") or 0) for c in comps if "cpu_wait_ms" in c)
    wait = sum(float(c.get("cpu_wait_ms") or 0) for c in comps)
    return wait / billed if billed > 0 and wait > 0 else None


def speedup(a: dict[str, Any], b: dict[str, Any], targets: list[float]) -> tuple[
        float | None, float | None, float | None]:
    """(target, time ratio b/a, $ ratio a/b) on the highest target both reached in all seeds."""
    for tgt in sorted(targets, reverse=True):
        ta, tb = a["to"][tgt], b["to"][tgt]
        if ta["n"] and tb["n"] and ta["reached"] == ta["n"] and tb["reached"] == tb["n"]:
            ma, mb = sum(ta["t"]) / len(ta["t"]), sum(tb["t"]) / len(tb["t"])
            ua, ub = sum(ta["usd"]) / len(ta["usd"]), sum(tb["usd"]) / len(tb["usd"])
            return tgt, mb / max(ma, 1e-9), ua / max(ub, 1e-12)
    return None, None, None


def speedup_ci(a: dict[str, Any], b: dict[str, Any], tgt: float) -> dict[str, Any]:
    """Bootstrap intervals (over seeds) of :func:`speedup`'s time and $ ratios on ``tgt``, and
    the ratio of mean env steps to it (``b`` over ``a``; above 1: ``a`` needs fewer)."""
    ta, tb = a["to"][tgt], b["to"][tgt]
    out: dict[str, Any] = {"time": bootstrap_ratio_ci(tb["t"], ta["t"]),
                           "usd": bootstrap_ratio_ci(ta["usd"], tb["usd"])}
    if ta["steps"] and tb["steps"]:
        out["steps"] = (sum(tb["steps"]) / len(tb["steps"])) / max(
            sum(ta["steps"]) / len(ta["steps"]), 1e-9)
    return out


def censored_speedup(a: dict[str, Any], b: dict[str, Any], targets: list[float],
                     runs_b: list[dict[str, Any]], minutes: float, usd: str = "usd",
                     ) -> tuple[float, float, float, float] | None:
    """Bounds on the highest target ``a`` reached in every seed and ``b`` did not (in some or
    all seeds): a seed of ``b`` that never got there counts its whole run (time and $), so
    ``b``'s mean is at least that. Returns (target, time ratio >=, $ ratio <=, ``b``'s
    shortest run in minutes). ``usd``: which bill, ``usd`` or ``usd_unsized`` (a run's
    last logged row then stands for its whole bill)."""
    for tgt in sorted(targets, reverse=True):
        ta, tb = a["to"][tgt], b["to"][tgt]
        if not (ta["n"] and ta["reached"] == ta["n"]):
            continue
        if not runs_b or tb["reached"] == tb["n"]:
            return None  # b got there in every seed: the uncensored ratio above covers it
        column = "cost_usd" if usd == "usd" else "cost_usd_unsized"
        times, costs = [], []
        for r in runs_b:
            hit = time_to(r["curve"], tgt, column)
            if hit is None:
                whole = float((r["summary"].get("cost") or {}).get("total_usd") or 0)
                if usd != "usd" and r["curve"].get(column):
                    whole = r["curve"][column][-1]
                hit = (float(r["summary"].get("wall_s") or 0), whole)
            times.append(hit[0])
            costs.append(hit[1])
        mb, ub = sum(times) / len(times), sum(costs) / len(costs)
        ma, ua = sum(ta["t"]) / len(ta["t"]), sum(ta[usd]) / len(ta[usd])
        return tgt, mb / max(ma, 1e-9), ua / max(ub, 1e-12), min(
            run_minutes(r, minutes) for r in runs_b)
    return None


def seed_outcome(run: dict[str, Any], tgt: float) -> tuple[float, float, float | None, bool]:
    """(wall s, $, env steps, reached) of one run to ``tgt``; a run that never got there gives
    its whole length and bill (a bound: it would have needed more) and its last env steps."""
    hit, steps = time_to(run["curve"], tgt), steps_to(run["curve"], tgt)
    if hit is not None:
        return hit[0], hit[1], steps, True
    curve, summary = run["curve"], run["summary"]
    whole = float((summary.get("cost") or {}).get("total_usd") or 0)
    last_steps = curve["env_steps"][-1] if curve["env_steps"] else None
    return float(summary.get("wall_s") or 0), whole, last_steps, False


def per_seed_table(data: dict[str, list[dict[str, Any]]], order: list[str],
                   tgt: float) -> list[str]:
    """One row per seed: every system's time, $ and env steps to ``tgt`` on it, and each of
    our systems' (Stellaris variants, sync PPO) speed and $ ratios against RLlib and the lean
    PPO on that seed, then the median seed. Pooled folders can hold a seed twice: the i-th run
    of a seed pairs with the i-th of each other system. A miss counts its whole run, so its
    ratios are bounds (<=, >=) and the median takes them at their bound."""
    by_seed: dict[str, dict[int, list[dict[str, Any]]]] = {}
    for v in order:
        for r in data[v]:
            by_seed.setdefault(v, {}).setdefault(r["seed"], []).append(r)
    baselines = [o for o in ("rllib", "lean") if o in data]
    ours = [v for v in order if v not in baselines]
    if not baselines or not ours:
        return []

    def nth(variant: str, seed: int, i: int) -> dict[str, Any] | None:
        runs = by_seed.get(variant, {}).get(seed) or []
        return runs[i] if i < len(runs) else None

    def cell(run: dict[str, Any] | None) -> str:
        if run is None:
            return "-"
        t, usd, steps, ok = seed_outcome(run, tgt)
        k = f"{steps / 1000:,.0f}k" if steps is not None else "?"
        if ok:
            return f"{t:.0f} s, ${usd:.5f} ({k})"
        best = max(run["curve"]["episodic_return"], default=float("nan"))
        return f"missed (best {best:,.0f}; {k}): {t:.0f} s, ${usd:.5f}"

    def ratio(mine: dict[str, Any] | None, theirs: dict[str, Any] | None,
              column: tuple[list[float], list[float]]) -> str:
        if mine is None or theirs is None:
            return "-"
        tm, um, _, ok_m = seed_outcome(mine, tgt)
        tt, ut, _, ok_t = seed_outcome(theirs, tgt)
        if not (ok_m or ok_t):
            return "n/a"
        speed, usd = tt / max(tm, 1e-9), um / max(ut, 1e-12)
        column[0].append(speed)
        column[1].append(usd)
        if ok_m and ok_t:
            return f"{speed:.2f}x / {usd:.2f}x"
        return f"<= {speed:.2f}x / >= {usd:.2f}x" if not ok_m else f">= {speed:.2f}x / <= {usd:.2f}x"

    pairs = [(m, o) for m in ours for o in baselines]
    head = ["seed"] + [LABELS.get(v, v) for v in order] + [
        f"{LABELS.get(m, m)} vs {LABELS[o]}: time / $" for m, o in pairs]
    columns: dict[tuple[str, str], tuple[list[float], list[float]]] = {pr: ([], []) for pr in pairs}
    rows = []
    for seed in sorted({s for v in order for s in by_seed.get(v, {})}):
        repeats = max(len(by_seed.get(v, {}).get(seed) or []) for v in order)
        for i in range(repeats):
            runs = {v: nth(v, seed, i) for v in order}
            rows.append([f"{seed}" + (f" ({i + 1})" if repeats > 1 else "")]
                        + [cell(runs[v]) for v in order]
                        + [ratio(runs[m], runs[o], columns[(m, o)]) for m, o in pairs])
    median_row = ["median seed"] + [""] * len(order) + [
        f"{statistics.median(t):.2f}x / {statistics.median(u):.2f}x" if t else "-"
        for t, u in columns.values()]
    return [f"Per seed, to {tgt:g} (time, $ and k env steps; then our systems' speed and $ "
            "against each baseline on that seed; a run that missed counts its whole run, so its "
            "ratios are bounds and the median takes them at their bound):", "",
            *_md_table(head, [*rows, median_row])]


# -- figures -----------------------------------------------------------------------------------
def figures(env: str, data: dict[str, list[dict[str, Any]]], fig_dir: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    fig_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for x, xlabel in (("wall_s", "wall-clock (s)"), ("env_steps", "environment steps"),
                      ("cost_usd", "cost (USD)")):
        fig, ax = plt.subplots(figsize=(7.5, 4.5))
        for variant, runs in data.items():
            curves = [r["curve"] for r in runs if r["curve"][x]]
            if not curves:
                continue
            hi = min(max(c[x]) for c in curves)
            grid = np.linspace(0, hi, 200)
            ys = np.array([np.interp(grid, c[x], c["episodic_return"], left=np.nan)
                           for c in curves])
            with warnings.catch_warnings():  # all-NaN columns before a run's first row
                warnings.simplefilter("ignore", RuntimeWarning)
                mean = np.nanmean(ys, axis=0)
                lo, hi_ = np.nanmin(ys, axis=0), np.nanmax(ys, axis=0)
            line = ax.plot(grid, mean, label=f"{LABELS.get(variant, variant)} (n={len(curves)})")
            if len(curves) > 1:
                ax.fill_between(grid, lo, hi_, color=line[0].get_color(), alpha=0.15)
        ax.set_xlabel(xlabel)
        ax.set_ylabel("episodic return (mean of last 100)")
        ax.set_title(f"{env}: return vs {xlabel.split(' (')[0]}")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
        fig.tight_layout()
        path = fig_dir / f"{env}_return_vs_{x.split('_')[0]}.png"
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(path)

    fig, ax = plt.subplots(figsize=(7.5, 4.5))
    names = list(data)
    means = [float(np.mean([r["summary"]["cost"]["total_usd"] for r in data[v]])) for v in names]
    errs = [float(np.std([r["summary"]["cost"]["total_usd"] for r in data[v]])) for v in names]
    ax.bar(range(len(names)), means, yerr=errs, capsize=3)
    ax.set_xticks(range(len(names)), [LABELS.get(v, v) for v in names], rotation=20, ha="right",
                  fontsize=7)
    ax.set_ylabel("cost per run (USD)")
    ax.set_title(f"{env}: final cost per run (same budget)")
    fig.tight_layout()
    path = fig_dir / f"{env}_cost.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    written.append(path)

    stell = {v: runs for v, runs in data.items() if v.startswith("stellaris")}
    if stell:
        fig, axes = plt.subplots(1, 2, figsize=(10, 4))
        for ax, kind in zip(axes, ("traj", "grad"), strict=True):
            for i, (v, runs) in enumerate(stell.items()):
                hist: dict[int, int] = {}
                for r in runs:
                    for k, n in (r["summary"].get("staleness_hist") or {}).get(kind, {}).items():
                        hist[int(k)] = hist.get(int(k), 0) + int(n)
                if not hist:
                    continue
                ks = sorted(hist)
                tot = sum(hist.values())
                w = 0.8 / len(stell)
                ax.bar([k + i * w for k in ks], [hist[k] / tot for k in ks], width=w,
                       label=LABELS.get(v, v))
            ax.set_xlabel(f"staleness of {'trajectories' if kind == 'traj' else 'gradients'} "
                          "(versions)")
            ax.set_ylabel("fraction")
            if ax.get_legend_handles_labels()[0]:
                ax.legend(fontsize=7)
            else:  # e.g. gradients: a publishing learner sends none
                ax.text(0.5, 0.5, "none recorded", ha="center", va="center",
                        transform=ax.transAxes)
        fig.suptitle(f"{env}: staleness (all seeds)")
        fig.tight_layout()
        path = fig_dir / f"{env}_staleness.png"
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(path)
    return written


# -- RESULTS.md ----------------------------------------------------------------------------------
def _stale_summary(runs: list[dict[str, Any]]) -> str:
    tot: dict[str, dict[int, int]] = {"traj": {}, "grad": {}}
    for r in runs:
        for kind in tot:
            for k, n in (r["summary"].get("staleness_hist") or {}).get(kind, {}).items():
                tot[kind][int(k)] = tot[kind].get(int(k), 0) + int(n)
    # Exact means where the runs report them (a refreshed rollout is a fraction of a
    # version old; the histograms count whole versions), weighted by each run's count.
    exact = [(r["summary"].get("staleness_mean") or {}, r["summary"].get("staleness_hist") or {})
             for r in runs]
    parts = []
    for kind, h in tot.items():
        n = sum(h.values())
        if n:
            mean = sum(k * c for k, c in h.items()) / n
            if all(kind in m for m, _ in exact):
                counts = [sum((hist.get(kind) or {}).values()) for _, hist in exact]
                mean = sum(m[kind] * c for (m, _), c in zip(exact, counts, strict=True)) / n
            parts.append(f"{kind} mean {mean:.2f}, max {max(h)}")
    return "; ".join(parts) or "-"


def ratio_lines(st: dict[str, Any], data: dict[str, list[dict[str, Any]]], base: str,
                prefix: str, who: str, others: tuple[str, ...], targets: list[float],
                minutes: float) -> list[str]:
    """The ``speedup vs X`` lines of system ``base`` (``prefix`` before each, ``who`` in the
    prose) against each of ``others`` that ran: the highest target both reached in every
    seed, its bootstrap interval, and the censored bounds where one side missed."""
    names = {"rllib": "RLlib", "lean": "lean PPO", "sync": "sync PPO"}
    lines: list[str] = []
    for other in others:
        name = names[other]
        if other not in st:
            continue
        tgt, ratio, usd = speedup(st[base], st[other], targets)
        if tgt is None:
            lines.append(f"{prefix}speedup vs {name}: n/a (no target reached by both in every seed)")
            continue
        top = max(targets)
        note = "" if tgt == top else (
            f" — on return {tgt:g}, the highest target both reached in every seed "
            f"({top:g} was not)")
        ci = speedup_ci(st[base], st[other], tgt)
        spread = ""
        if ci["time"] is not None:
            spread = (f" (95% bootstrap interval over seeds: time {ci['time'][0]:.2f}–"
                      f"{ci['time'][1]:.2f}x, $ {ci['usd'][0]:.2f}–{ci['usd'][1]:.2f}x)")
        if "steps" in ci:
            spread += (f"; env steps to {tgt:g}: {name} needs {ci['steps']:.2f}x "
                       f"{who}'s (above 1: {who} learns more per env step)")
        # Means over each side's own seeds: say so when those differ (a pooled report's
        # ablation ran on some of the baseline's seeds), as the per-seed table pairs them.
        mine, theirs = sorted(r["seed"] for r in data[base]), sorted(r["seed"] for r in data[other])
        if mine != theirs:
            spread += (f"; over different seeds ({who} {len(mine)} runs, {name} {len(theirs)}: "
                       "the per-seed table pairs them)")
        lines.append(f"{prefix}speedup vs {name}: {ratio:.1f}x{note}; $ vs {name}: {usd:.2f}x"
                     + spread)
        lines.append("")
        lines += dedicated_line(st[base], st[other], tgt, prefix, who, name)
        lines += redis_node_line(st[base], st[other], tgt, prefix, name)
        lines += unsized_line(st[base], st[other], tgt, prefix, name)
        upper = censored_speedup(st[other], st[base], targets, data[base], minutes)
        if upper is not None and upper[0] > tgt:
            utgt, uratio, uusd, umin = upper
            got = st[base]["to"][utgt]
            unsized = censored_speedup(st[other], st[base], targets, data[base], minutes,
                                       "usd_unsized")
            at_unsized = "" if unsized is None or math.isclose(unsized[2], uusd, rel_tol=1e-9) else (
                f" (at the unsized always-on prices: >= {1 / unsized[2]:.2f}x)")
            lines.append(
                f"{prefix}speedup vs {name} on return {utgt:g}: <= {1 / uratio:.2f}x (censored: "
                f"{who} reached {utgt:g} in {got['reached']} of {got['n']} {umin:g}-minute "
                f"runs, {name} in every one; a {who} run that never got there counts its "
                f"whole length and cost, which is less than it would have needed); $ vs "
                f"{name}: >= {1 / uusd:.2f}x{at_unsized}")
            lines.append("")
        bound = censored_speedup(st[base], st[other], targets, data[other], minutes)
        if bound is not None:
            btgt, bratio, busd, bmin = bound
            reached = st[other]["to"][btgt]
            lines.append(
                f"{prefix}speedup vs {name} on return {btgt:g}: >= {bratio:.1f}x (censored: "
                f"{name} reached {btgt:g} in {reached['reached']} of {reached['n']} "
                f"{bmin:g}-minute runs; a run that never got there counts its whole length "
                f"and cost); $ vs {name}: <= {busd:.2f}x")
            lines.append("")
    return lines


def dedicated_line(a: dict[str, Any], b: dict[str, Any], tgt: float, prefix: str, who: str,
                   name: str) -> list[str]:
    """``$ vs X at dedicated vCPUs``: ``a``'s functions billed without their wait for the
    shared cores (same runs, same wall clock, same fixed costs); nothing when none was measured."""
    if not a["wait_frac"]:
        return []
    ua, ub = a["to"][tgt]["usd_dedicated"], b["to"][tgt]["usd_dedicated"]
    ratio = (sum(ua) / len(ua)) / max(sum(ub) / len(ub), 1e-12)
    ci = bootstrap_ratio_ci(ua, ub)
    spread = f" (95% bootstrap interval {ci[0]:.2f}–{ci[1]:.2f}x)" if ci is not None else ""
    frac = sum(a["wait_frac"]) / len(a["wait_frac"])
    return [f"{prefix}$ vs {name} at dedicated vCPUs: {ratio:.2f}x{spread} — {who}'s functions "
            f"billed without the {100 * frac:.0f}% of their billed time they spent waiting for a "
            f"core of the shared host, which on Lambda each would have had to itself", ""]


def _repriced_line(a: dict[str, Any], b: dict[str, Any], tgt: float, key: str,
                   head: str) -> list[str]:
    """``<head>: N.NNx (interval)`` from the ``key`` bills of the same runs; nothing when
    those bills are the runs' own."""
    ua, ub = a["to"][tgt].get(key) or [], b["to"][tgt].get(key) or []
    if not ua or not ub or all(math.isclose(x, y, rel_tol=1e-9) for x, y in zip(
            ua, a["to"][tgt]["usd"], strict=True)):
        return []
    ratio = (sum(ua) / len(ua)) / max(sum(ub) / len(ub), 1e-12)
    ci = bootstrap_ratio_ci(ua, ub)
    spread = f" (95% bootstrap interval {ci[0]:.2f}–{ci[1]:.2f}x)" if ci is not None else ""
    return [f"{head}: {ratio:.2f}x{spread}", ""]


def redis_node_line(a: dict[str, Any], b: dict[str, Any], tgt: float, prefix: str,
                    name: str) -> list[str]:
    """``$ vs X with Redis on its own node``: runs that put Redis on the orchestrator's
    instance (the default since session 28) priced as sessions 22-27 priced every run."""
    return _repriced_line(a, b, tgt, "usd_redis_node",
                          f"{prefix}$ vs {name} with Redis on a cache.t4g.micro of its own "
                          "(`--set redis_host=elasticache`, as sessions 22–27 priced it)")


def unsized_line(a: dict[str, Any], b: dict[str, Any], tgt: float, prefix: str,
                 name: str) -> list[str]:
    """``$ vs X at the unsized always-on prices``: the same runs with the orchestrator and Redis
    priced as sessions 1-21 priced them (t3.medium, cache.t4g.small), so a ratio is never
    reported only at the newer, smaller prices; nothing when the two bills are the same."""
    return _repriced_line(a, b, tgt, "usd_unsized",
                          f"{prefix}$ vs {name} at the unsized always-on prices (a t3.medium "
                          "orchestrator and a cache.t4g.small Redis, as sessions 1–21)")


def footprint_line(label: str, footprints: list[dict[str, Any]]) -> list[str]:
    """What the always-on parts of a system's runs used, against their priced instances."""
    if not footprints:
        return []
    orch = [f["orchestrator"] for f in footprints if f.get("orchestrator")]
    redis = [f["redis"] for f in footprints if f.get("redis")]
    vcpu = [o["vcpu_mean"] for o in orch if o.get("vcpu_mean") is not None]
    parts = []
    if orch:
        parts.append(f"orchestrator (priced as a {orch[0]['instance']}, baseline "
                     f"{orch[0]['baseline_vcpu']:g} vCPU, {orch[0]['memory_mib']:.0f} MiB): "
                     + (f"{_range(vcpu, '{:.3f}')} vCPU mean, " if vcpu else "")
                     + f"peak RSS {_range([o['peak_rss_mib'] for o in orch])} MiB")
    if redis:
        parts.append(f"Redis (a {redis[0]['instance']}, baseline {redis[0]['baseline_vcpu']:g} "
                     f"vCPU, {redis[0]['memory_mib']:.0f} MiB, {redis[0]['baseline_mbps']:g} "
                     f"Mbit/s): {_range([r['vcpu_mean'] for r in redis], '{:.3f}')} vCPU mean, "
                     f"peak {_range([r['peak_memory_mib'] for r in redis], '{:.1f}')} MiB, "
                     f"{_range([r['net_mbps_mean'] for r in redis], '{:.1f}')} Mbit/s mean")
    fits = sum(bool(f.get("fits")) for f in footprints)
    return [f"Always-on parts of the {label} runs (`footprint` in summary.json): "
            + "; ".join(parts) + f". Fit their priced instances in {fits} of {len(footprints)} runs.",
            ""]


def _range(xs: list[float], fmt: str = "{:.0f}") -> str:
    lo, hi = min(xs), max(xs)
    return fmt.format(lo) if fmt.format(lo) == fmt.format(hi) else f"{fmt.format(lo)}–{fmt.format(hi)}"


def env_report(env: str, minutes: float, data: dict[str, list[dict[str, Any]]],
               targets: list[float], fig_dir: Path) -> list[str]:
    longest = max((run_minutes(r, minutes) for runs in data.values() for r in runs),
                  default=minutes)
    points = budget_points(minutes, longest)
    st = {v: stats(runs, minutes, targets, points) for v, runs in data.items()}
    order = [s for s in SYSTEMS if s in st] + sorted(v for v in st if v not in SYSTEMS)
    if not order:
        return [f"### {env}, {minutes:g}-minute budget", "", "No runs found.", ""]
    loads = [x for v in order for x in st[v]["load"]]
    lines = [f"### {env}, {minutes:g}-minute budget", ""]
    seeds = ", ".join(f"{LABELS.get(v, v)} {st[v]['n']}" for v in order)
    lines.append(f"Seeds per system: {seeds}." + (
        f" Load average (1 min) before each run: {min(loads):.2f}–{max(loads):.2f} (median "
        f"{sorted(loads)[len(loads) // 2]:.2f})." if loads else ""))
    longer = {LABELS.get(v, v): sorted({run_minutes(r, minutes) for r in data[v]})
              for v in order if any(run_minutes(r, minutes) != minutes for r in data[v])}
    if longer:
        lines.append("")
        lines.append("Runs longer than the budget (`--system-minutes`), so that their time to the "
                     "targets is measured rather than cut off: " + "; ".join(
                         f"{k} ran {', '.join(f'{m:g}' for m in ms)} min" for k, ms in longer.items())
                     + ". Returns at a budget are read off each run's curve at that time; "
                     "\"-\" = the run was shorter; \"$ per run\" is for the run's own length.")
    stopped = sum(bool(r["summary"].get("target_reached")) for v in order for r in data[v])
    if stopped:
        stops = sorted({r["bench"].get("stop_at_return") for v in order for r in data[v]
                        if r["bench"].get("stop_at_return") is not None})
        lines.append("")
        lines.append(f"{stopped} runs stopped on reaching return "
                     f"{', '.join(f'{x:g}' for x in stops) or '(see config.json)'} "
                     "(`--stop-at-return`): the returns at a budget count only the runs still "
                     "going then; the time and $ to a target up to that return are unaffected.")
    lines.append("")
    lines += _md_table(
        ["system"] + [f"return @ {p:g} min" for p in points]
        + ["best return", "env steps/s", "$ per run"],
        [[LABELS.get(v, v)] + [_ms(st[v]["ret_at"][p]) for p in points]
         + [_ms(st[v]["best"]), _ms(st[v]["sps"]), _ms(st[v]["usd"], "{:.5f}")] for v in order])

    def time_cell(h: dict[str, Any]) -> str:
        if not h["reached"]:
            return f"not reached (0/{h['n']})"
        note = "" if h["reached"] == h["n"] else f" ({h['reached']}/{h['n']} seeds)"
        return f"{_ms(h['t'])} s / ${_ms(h['usd'], '{:.5f}')}{note}"

    def steps_cell(h: dict[str, Any]) -> str:
        note = "" if h["reached"] == h["n"] else f" ({h['reached']}/{h['n']})"
        return _ms([n / 1000 for n in h["steps"]]) + note

    lines.append("Time (s) and $ to reach a return (first logged row whose mean of the last 100 "
                 "episodes reaches it; mean ± sd over the seeds that reached it):")
    lines.append("")
    lines += _md_table(["system"] + [f"{t:g}: time / $" for t in targets],
                       [[LABELS.get(v, v)] + [time_cell(st[v]["to"][t]) for t in targets]
                        for v in order])
    lines.append("Env steps (thousands) to reach a return, over the same seeds: how much each "
                 "system learns per env step, whatever its throughput:")
    lines.append("")
    lines += _md_table(["system"] + [f"k steps to {t:g}" for t in targets],
                       [[LABELS.get(v, v)] + [steps_cell(st[v]["to"][t]) for t in targets]
                        for v in order])
    lines += _at_target_table(
        "Policy entropy (nats, `losses/entropy`) when each return was first reached: how narrow "
        "each system's policy had become for the same progress (RLlib's is its learner's own "
        "figure, not on the same footing):", "entropy", "entropy", st, order, targets)
    lines += _at_target_table(
        "Reward per env step (mean return / mean episode length) when each return was first "
        "reached: in locomotion, how fast the gait is — the same return from shorter, faster "
        "episodes is a gait that falls:", "reward/step", "per_step", st, order, targets)
    # The Stellaris defaults (or the defaults on another backend) against each baseline; then
    # Stellaris's sync mode against the two baselines outside Stellaris.
    base = next((v for v in order if v == "stellaris" or re.fullmatch(
        r"stellaris\[backend=[a-z]+\]", v)), None)
    lines += per_seed_table(data, order, max(targets))
    if base is not None:
        lines += ratio_lines(st, data, base, "", "Stellaris", ("rllib", "lean", "sync"),
                             targets, minutes)
    if "sync" in st:
        lines += ratio_lines(st, data, "sync", "sync PPO ", "sync PPO", ("rllib", "lean"),
                             targets, minutes)
    # Each ablation of Stellaris (e.g. ``stellaris[hyper.target_kl=0.02]``) against the
    # baselines too, so a variant is judged on the same lines as the default.
    for v in (x for x in order if x.startswith("stellaris") and x != base):
        lines += ratio_lines(st, data, v, f"{v} ", v, ("rllib", "lean"), targets, minutes)
    stell = [v for v in order if v.startswith("stellaris")]
    for v in [*stell, *(["sync"] if "sync" in st else [])]:
        lines += footprint_line(LABELS.get(v, v), st[v]["footprint"])
    if stell:
        lines.append("Staleness (Stellaris runs, versions; with a publishing learner a version "
                     "is one update): " + "; ".join(
            f"{LABELS.get(v, v)}: {_stale_summary(data[v])}" for v in stell) + ".")
        lines.append("")
    rel = os.path.relpath(fig_dir, REPO / "benchmarks")
    lines.append(f"Figures (not committed; regenerate with `--report-only`): `benchmarks/{rel}/"
                 f"{env}_return_vs_{{wall,env,cost}}.png`, `{env}_cost.png`, "
                 f"`{env}_staleness.png`.")
    lines.append("")
    return lines


def write_section(results: Path, body: list[str], preface: list[str]) -> None:
    """Replace our section of RESULTS.md; the hand-written part below :data:`KEEP_MARKER`
    survives regeneration."""
    rewrite_section(results, SECTION, [*preface, *body], KEEP_MARKER)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true",
                   help="Hopper-v5, 2-minute budget, 2 seeds (plus reachable targets 250/500)")
    p.add_argument("--envs", nargs="+")
    p.add_argument("--seeds", type=int, nargs="+", help="seed values (default 1 2 3; quick 1 2)")
    p.add_argument("--minutes", type=float, help="wall-clock budget per run (default 10; quick 2)")
    p.add_argument("--systems", nargs="+", choices=SYSTEMS, default=list(SYSTEMS))
    p.add_argument("--targets", type=float, nargs="+", help="target returns (default per env)")
    p.add_argument("--system-minutes", nargs="+", default=[], metavar="SYSTEM=MIN",
                   help="run a system longer than the budget (e.g. rllib=10: RLlib needs ~10 "
                   "minutes to reach Hopper 2,000 here, so its time to that target is measured, "
                   "not cut off); reported under the budget's section")
    p.add_argument("--backend", default="local", choices=["inline", "local", "lambda", "ray"],
                   help="Stellaris/sync backend")
    p.add_argument("--is-correction", choices=["none", "truncate", "vtrace", "decoupled"])
    p.add_argument("--no-staleness-weights", action="store_true")
    p.add_argument("--no-bound-decay", action="store_true")
    p.add_argument("--actors", type=int)
    p.add_argument("--learners", type=int)
    p.add_argument("--no-compile", action="store_true",
                   help="eager learner loss in Stellaris, sync PPO and the lean PPO (default: "
                   "torch.compile in all three; RLlib runs its own default, eager)")
    p.add_argument("--buffer-max", type=int, help="H_max: gradients per aggregation")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="any other Stellaris config field (an ablation), e.g. "
                   "--set actor_refresh_steps=32 or --set publish_interval_ms=0")
    p.add_argument("--hyper", action="append", default=[], metavar="KEY=VALUE",
                   help="a PPOHyper field changed for every system alike (Stellaris, sync PPO, "
                   "the lean PPO and RLlib), e.g. --hyper ent_coef=0.005. Runs go to "
                   "<out>-KEY=VALUE")
    p.add_argument("--anneal-lr", action="store_true",
                   help="learning rate decayed linearly over the budget (CleanRL's anneal_lr); "
                   "RLlib's schedules count env steps, so it anneals over --rllib-sps x the "
                   "budget. Runs go to <out>-anneal")
    p.add_argument("--rllib-sps", type=float, default=1270.0,
                   help="with --anneal-lr: RLlib's env steps/s, which turns the budget into "
                   "its schedule's steps (default: measured here, session 38's 3 ten-minute "
                   "seeds; session 9's 1,705 had become 1.3x too many steps)")
    p.add_argument("--stop-at-return", type=float, metavar="RETURN",
                   help="stop each run once its logged mean return reaches this (e.g. 2000): "
                   "the time and $ to it are measured at a fraction of the budget's machine "
                   "time, the returns at a budget only over the runs still going. Runs go to "
                   "<out>-stopRETURN")
    p.add_argument("--init-from", metavar="CKPT",
                   help="every run (Stellaris, sync PPO, lean PPO) starts from this "
                   "checkpoint file, e.g. a plateaued run's last state, its counters at zero "
                   "(not RLlib: its state is not ours)")
    p.add_argument("--out", default=str(REPO / "benchmarks" / "out" / "compare"))
    p.add_argument("--pool", nargs="+", default=[], metavar="OUT",
                   help="also report the runs under these --out folders (same envs and "
                   "budget), e.g. earlier sessions' seeds, pooled with --out's; figures go "
                   "under --out")
    p.add_argument("--label-by-hyper", action="store_true",
                   help="report each run under its system and the hyper-parameters it recorded "
                   "that differ from today's defaults (e.g. stellaris[hyper.target_kl=null]), "
                   "so runs of the same settings pool across sessions whatever named them then")
    p.add_argument("--redis-host", choices=["orchestrator", "elasticache"],
                   help="report every serverless run's bill with Redis on the orchestrator's "
                   "instance (the default since session 28) or on a node of its own (sessions "
                   "22-27), whatever each run billed: pools of both price alike (default: as "
                   "each run billed it)")
    p.add_argument("--results", default=str(REPO / "benchmarks" / "RESULTS.md"))
    p.add_argument("--no-results", action="store_true", help="do not touch RESULTS.md")
    p.add_argument("--report-only", action="store_true", help="no runs: redraw and rewrite")
    p.add_argument("--max-load", type=float,
                   help="before each run wait (up to --max-load-wait-s) for a 1-min load below this")
    p.add_argument("--max-load-wait-s", type=float, default=120.0)
    a = p.parse_args(argv)
    envs = a.envs or (["Hopper-v5"] if a.quick else FULL_ENVS)
    seeds = a.seeds or ([1, 2] if a.quick else [1, 2, 3])
    minutes = a.minutes or (2.0 if a.quick else 10.0)
    out = Path(a.out)
    if a.anneal_lr:
        out = out.with_name(out.name + "-anneal")
    if a.hyper:
        out = out.with_name(out.name + hyper_suffix(a.hyper))
    if a.stop_at_return is not None:  # shortened runs: not to be pooled with whole ones
        out = out.with_name(out.name + f"-stop{a.stop_at_return:g}")
    tag = variant_tag(a)
    if a.init_from and "rllib" in a.systems:
        p.error("--init-from: RLlib cannot start from a Stellaris checkpoint")
    per_system = {k: float(v) for k, v in (kv.split("=", 1) for kv in a.system_minutes)}
    unknown = set(per_system) - set(SYSTEMS)
    if unknown:
        p.error(f"--system-minutes: unknown systems {sorted(unknown)}")

    if not a.report_only:
        for env in envs:
            print(f"{env}: {minutes:g} min x seeds {seeds} x {a.systems}", flush=True)
            if not a.no_compile and set(a.systems) & {"stellaris", "sync", "lean"}:
                warm_compile_cache(env)
            for seed in seeds:  # seeds outermost: machine noise spreads over the systems
                for system in a.systems:
                    variant = variant_name(system, tag)
                    run_dir = budget_dir(out, env, minutes) / _dirname(variant) / f"seed{seed}"
                    info = run_one(system, env, seed, per_system.get(system, minutes), run_dir, a)
                    info["variant"] = variant
                    (run_dir / "bench.json").write_text(json.dumps(info, indent=2))

    body: list[str] = []
    for env in envs:
        root = budget_dir(out, env, minutes)
        data = collect_pooled([root] + [budget_dir(Path(o), env, minutes) for o in a.pool],
                              by_hyper=a.label_by_hyper, redis_host=a.redis_host)
        targets = a.targets or sorted(set(TARGETS.get(env, [1000, 2000]) + (
            QUICK_TARGETS.get(env, []) if minutes < 5 else [])))
        if data:
            figures(env, data, root / "figures")
        body += env_report(env, minutes, data, targets, root / "figures")
    report = "\n".join(body)
    print(report)
    if not a.no_results:
        cmd = "python benchmarks/compare.py " + " ".join(argv if argv is not None else sys.argv[1:])
        preface = [
            f"Generated by `{cmd.strip()}` on {time.strftime('%Y-%m-%d %H:%M')}"
            + (" from the run folders already under `--out` (each run's command, exit status "
               "and load are in its `bench.json`)" if a.report_only else "")
            + (", pooled with those under `--pool`" if a.pool else "")
            + (", each run named for its recorded hyper-parameters that differ from today's "
               "defaults (`--label-by-hyper`)" if a.label_by_hyper else "") + " (2-core shared "
            "machine; runs are sequential, one system at a time). Same wall-clock budget, seeds, "
            "price table and clock for every system: Stellaris and our sync PPO are billed per "
            "function invocation (Lambda GB-s + requests) plus the orchestrator VM and Redis for "
            "the wall time, each at the run's price table (since session 22 sized to what they use: "
            "a t3.micro and a cache.t4g.micro, measured against them in each run's `footprint`); "
            "RLlib and the lean PPO pay one 2-vCPU instance (c6i.large) for the wall "
            "time. Returns are the mean of the last 100 training episodes. Clocks start after "
            "start-up (the local runtime's, Ray's and the algorithm's construction).",
            "",
        ]
        write_section(Path(a.results), body, preface)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
