"""Stellaris async vs our sync PPO vs RLlib 2.60 PPO vs a lean single-process PPO, side by side.

One command runs every system for the same wall-clock budget and the same seeds,
*sequentially* (never two systems at once: they would fight for the same two cores), each in
its own process, and writes:

- a run folder per (env, system, seed) under ``--out`` (default ``benchmarks/out/compare``)
  with ``metrics.csv`` (same columns for every system), ``summary.json`` and ``bench.json``
  (command, exit status, load average before and after, commit);
- one record per run under ``benchmarks/records/compare/`` (:mod:`benchmarks.records`: the
  curve's key points and the summary), from which ``python benchmarks/report.py`` renders
  ``docs/results.md``;
- per env, under ``--out``: PNG figures (return vs wall clock, env steps and $; cost bars;
  staleness histograms) and ``report.md``, the report of *every* run folder found for the env
  and budget (also printed), so ablation runs made with the same budget add rows to it.

    python benchmarks/compare.py --quick                      # Hopper-v5, 2 min, 2 seeds
    python benchmarks/compare.py                              # 3 envs, 10 min, 3 seeds
    python benchmarks/compare.py --quick --systems stellaris --is-correction none   # ablation
    python benchmarks/compare.py --quick --report-only        # redraw and report again
    python benchmarks/compare.py --envs Hopper-v5 --minutes 5 --report-only \
        --out benchmarks/out/compare-b --pool benchmarks/out/compare-a   # report both together
    python benchmarks/compare.py ... --report-only --pool <older out> --label-by-hyper
        # pool by the hyper-parameters each run recorded, not by the flags that named it

System names: ``stellaris`` (async, ``--backend``, default local runtime), ``sync`` (our
synchronous PPO on the same functions: 2 actors x 4 envs x 256 steps = a 2048-step round, the
lean PPO's 8 trajectories of 256 steps split over the two cores),
``rllib`` (:mod:`benchmarks.rllib_ppo`, matched to ours), ``lean`` (:mod:`benchmarks.lean_ppo`,
one core); the equal-core baselines ``lean2`` (the lean PPO sampling in a second process),
``rllib-norm`` (RLlib PPO with reward normalisation and a KL target), ``rllib-appo``
(:mod:`benchmarks.rllib_appo`), ``sb3`` / ``sb3-ours`` (:mod:`benchmarks.sb3_ppo`, zoo's or our
settings) and ``sf2`` (:mod:`benchmarks.sf2_appo`, Sample Factory 2 in its own venv, made by
``scripts/make_sf2_venv.sh`` before the timed runs). Each run's record names the cores its
system uses (:data:`benchmarks.compare_analysis.CORES`). Ablation flags
change the Stellaris system only and tag its variant name, e.g. ``stellaris[is=none]``.

Every system's clock starts at its process's start (imports, compilation and start-up on it):
the baselines' own clocks do (:mod:`benchmarks._common`); Stellaris' starts once its runtime is
up, so compare.py measures how long after its process that was, from the progress lines it
prints with its own wall time (``clock_offset_s`` in ``bench.json``), and the report moves its
curve and bill by that (:func:`benchmarks.compare_analysis.from_process_start`).
The statistics are :mod:`benchmarks.compare_analysis`'s, the text
:mod:`benchmarks.compare_report`'s, the figures :mod:`benchmarks.compare_figures`'.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks._common import read_curve, read_summary  # noqa: E402
from benchmarks.compare_analysis import (  # noqa: E402
    CORES,
    LABELS,
    SYSTEMS,
    TARGETS,
    collect_pooled,
    default_targets,
    outcome,
)
from benchmarks.compare_clock import run_clocked  # noqa: E402
from benchmarks.compare_report import env_report  # noqa: E402
from benchmarks.records import command_line, git_state, write_record  # noqa: E402

FULL_ENVS = ["Hopper-v5", "HalfCheetah-v5", "Walker2d-v5"]
DEFAULT_SYSTEMS = ["stellaris", "sync", "rllib", "lean"]
# baseline -> its script and fixed arguments (stellaris and sync run the orchestrator's CLI)
SCRIPTS = {"lean": ("lean_ppo.py", []), "lean2": ("lean_ppo.py", ["--two-core"]),
           "rllib": ("rllib_ppo.py", []), "rllib-norm": ("rllib_ppo.py", ["--norm"]),
           "rllib-appo": ("rllib_appo.py", []), "sb3": ("sb3_ppo.py", []),
           "sb3-ours": ("sb3_ppo.py", ["--settings", "ours"]), "sf2": ("sf2_appo.py", [])}
TAKES_HYPER = {"lean", "lean2", "rllib", "rllib-norm"}  # PPOHyper fields via --hyper
TAKES_INIT = {"stellaris", "sync", "lean", "lean2"}  # a Stellaris checkpoint via --init-from
__all__ = ["CORES", "LABELS", "SYSTEMS", "TARGETS", "command", "main", "run_one",
           "warm_compile_cache"]


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


def variant_name(system: str, tag: str, hyper: Sequence[str] = ()) -> str:
    """A run's variant: the system, Stellaris' own tags, and a ``--hyper`` change (every
    system's), so records of a changed run never pool with the defaults' in one series."""
    tags = ([tag] if tag and system == "stellaris" else []) + [f"hyper.{kv}" for kv in hyper]
    return f"{system}[{','.join(tags)}]" if tags else system


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
            cmd += ["--set", "experimental.learner_compile=false"]
        if args.anneal_lr:
            cmd += ["--set", "hyper.anneal_lr=true"]
        for kv in shared_hyper(args):
            cmd += ["--set", f"hyper.{kv}"]
        cmd += stop_flag(args) + init_flag(args)
        if system == "sync":
            # the lean PPO's batch exactly (8 envs x 256 steps), its sampling on both cores;
            # 2 actors x 8 envs x 128 steps bootstrapped GAE twice as often and learned less
            # per env step
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
            cmd += ["--buffer-max", str(args.buffer_max)]
        for kv in args.set:
            cmd += ["--set", kv]
        return cmd
    script, fixed = SCRIPTS[system]
    cmd = [py, str(REPO / "benchmarks" / script), *fixed, "--env", env, "--seed", str(seed),
           "--minutes", f"{minutes:g}", "--out", str(run_dir)]
    lean = system in ("lean", "lean2")
    if lean and args.is_correction:
        cmd += ["--is-correction", args.is_correction]
    if lean and args.no_compile:
        cmd.append("--no-compile")
    if lean and args.anneal_lr:
        cmd += ["--hyper", "anneal_lr=true"]
    if system in ("rllib", "rllib-norm") and args.anneal_lr:
        # RLlib's schedules count env steps: the steps it gets through in this budget here
        cmd += ["--anneal-lr-steps", str(int(minutes * 60 * args.rllib_sps))]
    if system in TAKES_HYPER:  # lean_ppo.py and rllib_ppo.py both take PPOHyper fields
        for kv in shared_hyper(args):
            cmd += ["--hyper", kv]
    return cmd + stop_flag(args) + (init_flag(args) if system in TAKES_INIT else [])


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
    code = ("import sys\n"
            "from functions.step import warm_cache\n"
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
    commit, dirty = git_state()  # kept with the run, so a record written later names it
    started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    t0 = time.monotonic()
    # the repo first, then whatever the caller's PYTHONPATH holds (packages installed there)
    pythonpath = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)
    env_vars = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": pythonpath}
    rc, offset = run_clocked(cmd, run_dir / "stdout.log", env_vars, minutes * 60 + 300)
    if read_summary(run_dir).get("clock_origin") == "process start":
        offset = 0.0  # its own clock already starts there
    info = {"system": system, "env": env, "seed": seed, "minutes": minutes, "cmd": cmd, "rc": rc,
            "cores": CORES.get(system), "clock_offset_s": offset,
            "elapsed_s": time.monotonic() - t0, "load_before": load0,
            "stop_at_return": getattr(args, "stop_at_return", None),
            "load_after": os.getloadavg()[0], "started_utc": started, "commit": commit,
            "dirty": dirty}
    (run_dir / "bench.json").write_text(json.dumps(info, indent=2))
    s = read_summary(run_dir)
    ret = s.get("mean_return")
    print(f"  {system:10s} seed {seed}: rc {rc} | {s.get('env_steps', 0):>8,} steps | "
          f"{s.get('sps', 0):6.0f} steps/s | return {'-' if ret is None else f'{ret:7.1f}'} | "
          f"${(s.get('cost') or {}).get('total_usd', 0):.5f} | load {load0:.2f}->"
          f"{info['load_after']:.2f} | clock "
          + ("from process start" if offset == 0.0 else
             "start unknown (no progress line)" if offset is None else f"+{offset:.1f} s"),
          flush=True)
    return info



def ensure_sf2_venv() -> None:
    """Sample Factory 2's venv (scripts/make_sf2_venv.sh; idempotent), made before the timed
    runs: installing is no system's start-up."""
    subprocess.run(["bash", str(REPO / "scripts" / "make_sf2_venv.sh")], cwd=REPO, check=True)


def record_targets(env: str, minutes: float, extra: Sequence[float] | None) -> list[float]:
    """The targets a run's record keeps the first row reaching: the env's (and the lower ones
    a short budget reaches) and any asked for."""
    return sorted(set(default_targets(env, min(minutes, 4.99))) | set(extra or []))


def record_run(run_dir: Path, env: str, budget: float, series: str, cmd: str,
               targets: list[float], records: str | None) -> Path | None:
    """One run folder's record (kind ``compare``): its key points and summary, the commit
    and start it was run at (from ``bench.json``) and its training path (``config.json``)."""
    summary = read_summary(run_dir)
    if not summary:
        return None
    bench_file = run_dir / "bench.json"
    bench = json.loads(bench_file.read_text()) if bench_file.exists() else {}
    variant = bench.get("variant") or run_dir.parent.name
    seed = int(run_dir.name[4:])
    res = outcome(read_curve(run_dir), summary, bench, targets, budget)
    provenance = {k: bench[k] for k in ("commit", "dirty") if bench.get(k) is not None}
    if bench.get("started_utc"):
        provenance["date"] = bench["started_utc"]
    stamp = re.sub(r"[^0-9T]", "", bench.get("started_utc") or "")
    return write_record(
        "compare", cmd, {"env": env, "budget_min": budget, "series": series,
                         "system": bench.get("system") or variant.partition("[")[0],
                         "variant": variant, "seed": seed, **res["facts"]},
        res["points"], run_dir=run_dir, records=records, provenance=provenance,
        name=f"{env}-{budget:g}min/{series}/{_dirname(variant)}-seed{seed}"
             + (f"-{stamp}" if stamp else ""))


def preface(cmd: str, a: argparse.Namespace) -> list[str]:
    return [
        f"`{cmd}`" + (" (the run folders already under `--out`; each run's command, exit "
                      "status and load are in its `bench.json`)" if a.report_only else "")
        + (", pooled with those under `--pool`" if a.pool else "")
        + (", each run named for its recorded hyper-parameters that differ from today's "
           "defaults (`--label-by-hyper`)" if a.label_by_hyper else "") + ". Runs are "
        "sequential, one system at a time. Same wall-clock budget, seeds, price table and clock "
        "for every system: Stellaris and our sync PPO are billed per function invocation "
        "(Lambda GB-s + requests) plus the orchestrator VM and Redis for the wall time, at the "
        "run's price table; the baselines pay one 2-vCPU instance (c6i.large) for the "
        "wall time. Returns are the mean of the last 100 training episodes. Clocks start at "
        "each run's process start (imports, compilation, the local runtime's, Ray's and the "
        "algorithm's start-up on the clock), for runs recorded from commit e4a1644 on; "
        "earlier runs' clocks started after start-up.", ""]


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true",
                   help="Hopper-v5, 2-minute budget, 2 seeds (plus reachable targets 250/500)")
    p.add_argument("--envs", nargs="+")
    p.add_argument("--seeds", type=int, nargs="+", help="seed values (default 1 2 3; quick 1 2)")
    p.add_argument("--minutes", type=float, help="wall-clock budget per run (default 10; quick 2)")
    p.add_argument("--systems", nargs="+", choices=SYSTEMS, default=DEFAULT_SYSTEMS,
                   help=f"systems to run (default {' '.join(DEFAULT_SYSTEMS)}); the equal-core "
                   "baselines: lean2 rllib-norm rllib-appo sb3 sb3-ours sf2")
    p.add_argument("--targets", type=float, nargs="+", help="target returns (default per env)")
    p.add_argument("--system-minutes", nargs="+", default=[], metavar="SYSTEM=MIN",
                   help="run a system longer than the budget (e.g. rllib=20: RLlib needs "
                   "several minutes to reach Hopper 2,000 here, so its time to that target is "
                   "measured, not cut off); reported under the budget's section")
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
                   "its schedule's steps (default: its rate over three ten-minute Hopper runs "
                   "on the 2-core machine)")
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
                   "budget), e.g. the seeds of an earlier invocation, pooled with --out's; "
                   "figures go under --out")
    p.add_argument("--label-by-hyper", action="store_true",
                   help="report each run under its system and the hyper-parameters it recorded "
                   "that differ from today's defaults (e.g. stellaris[hyper.target_kl=null]), "
                   "so runs of the same settings pool whatever flags named them")
    p.add_argument("--records", help="records dir (default: $STELLARIS_RECORDS_DIR or "
                   "benchmarks/records)")
    p.add_argument("--series", help="the name the results page groups these runs' records by "
                   "(default: the --out folder's name)")
    p.add_argument("--no-record", "--no-results", dest="no_record", action="store_true",
                   help="write no records")
    p.add_argument("--record", action="store_true",
                   help="with --report-only: (re)write the records of the runs under --out")
    p.add_argument("--report-only", action="store_true", help="no runs: redraw and report")
    p.add_argument("--max-load", type=float,
                   help="before each run wait (up to --max-load-wait-s) for a 1-min load below this")
    p.add_argument("--max-load-wait-s", type=float, default=120.0)
    return p


def main(argv: list[str] | None = None) -> int:
    p = parser()
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
    series = a.series or out.name
    tag = variant_tag(a)
    if a.init_from and set(a.systems) - TAKES_INIT:
        p.error(f"--init-from: {sorted(set(a.systems) - TAKES_INIT)} cannot start from a "
                "Stellaris checkpoint")
    fixed_settings = set(a.systems) - TAKES_HYPER - {"stellaris", "sync"}
    if (a.hyper or a.anneal_lr) and fixed_settings:
        p.error(f"--hyper/--anneal-lr: {sorted(fixed_settings)} run their own settings")
    per_system = {k: float(v) for k, v in (kv.split("=", 1) for kv in a.system_minutes)}
    unknown = set(per_system) - set(SYSTEMS)
    if unknown:
        p.error(f"--system-minutes: unknown systems {sorted(unknown)}")
    cmd = command_line("benchmarks/compare.py", argv)

    rc = 0
    for env in envs:
        targets = a.targets or default_targets(env, minutes)
        kept = record_targets(env, minutes, a.targets)
        root = budget_dir(out, env, minutes)
        if not a.report_only:
            print(f"{env}: {minutes:g} min x seeds {seeds} x {a.systems}", flush=True)
            if not a.no_compile and set(a.systems) & {"stellaris", "sync", "lean", "lean2"}:
                warm_compile_cache(env)
            if "sf2" in a.systems:
                ensure_sf2_venv()
            for seed in seeds:  # seeds outermost: machine noise spreads over the systems
                for system in a.systems:
                    variant = variant_name(system, tag, shared_hyper(a))
                    run_dir = root / _dirname(variant) / f"seed{seed}"
                    info = run_one(system, env, seed, per_system.get(system, minutes), run_dir, a)
                    info["variant"] = variant
                    (run_dir / "bench.json").write_text(json.dumps(info, indent=2))
                    rc = rc or int(info["rc"] != 0)
                    if not a.no_record:
                        record_run(run_dir, env, minutes, series, cmd, kept, a.records)
        elif a.record and not a.no_record:
            for run_dir in sorted(root.glob("*/seed*")):
                record_run(run_dir, env, minutes, series, cmd, kept, a.records)
        data = collect_pooled([root] + [budget_dir(Path(o), env, minutes) for o in a.pool],
                              targets, minutes, by_hyper=a.label_by_hyper)
        fig_dir = root / "figures"
        if data:
            from benchmarks.compare_figures import figures  # matplotlib: only when drawing

            figures(env, data, fig_dir)
        shown = os.path.relpath(fig_dir, REPO) if fig_dir.is_relative_to(REPO) else fig_dir
        text = "\n".join(preface(cmd, a) + env_report(env, minutes, data, targets, shown))
        print(text, flush=True)
        if data:
            (root / "report.md").write_text(text + "\n")
    return rc


if __name__ == "__main__":
    raise SystemExit(main())
