"""The paper's ablation at the paper's shape: what each staleness mechanism buys.

Every run is ``stellaris train --preset paper`` (16 actors x 1 env x 256 steps, 4 learners
whose per-minibatch gradients the orchestrator aggregates) for the same env-step budget, one
at a time (never two runs at once: they share the cores), in these variants:

- ``full``: IS truncation (``decoupled``), staleness weights ``1/sqrt(delta)``, decaying bound;
- ``no-is``: ``--is-correction none`` (PPO on the behaviour ratio, no truncation);
- ``no-weights``: ``--no-staleness-weights`` (every gradient weight 1);
- ``no-bound``: ``--no-bound-decay`` (beta stays delta_max);
- ``naive``: none of the three (plain asynchronous gradients);
- ``sync``: our sync PPO at the same batch (16 actors x 1 env x 256 steps = 4,096 a round, 64
  minibatches of 64);
- diagnostics, run only when named: ``full-h1`` (full with ``--buffer-max 1``) and
  ``whole-batch`` (each learner a whole 2,048-step batch instead of a quarter of the round's).

On a small machine wall-clock is not the paper's, but staleness in versions is set by how many
learners and actors are in flight, so the measure is the return per env step: the mean return
of the last 100 training episodes when each run passes fixed env-step points. Each run writes
a record (kind ``ablation``); ``--report`` (or the end of a run) writes one ``ablation-verdict``
record per env: per variant the mean over seeds with a bootstrap interval, its ratio to
``full``, and a verdict — *helps* when full's lead over the variant has an interval above 0,
*hurts* when below, else *no effect* — plus the line a script reads::

    paper shape vs sync at 1M env steps, Hopper-v5: 0.95x (truncated 62%)

    python benchmarks/ablation.py --envs Hopper-v5 --seeds 101 102 --steps 300000
    python benchmarks/ablation.py --quick                   # Hopper-v5, 1 seed, 60k steps
    python benchmarks/ablation.py --report --envs Hopper-v5 --steps 300000   # no runs
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.compare_analysis import (  # noqa: E402
    bootstrap_diff_ci,
    bootstrap_mean_ci,
    bootstrap_ratio_ci,
)
from benchmarks.records import command_line, records_dir, write_record  # noqa: E402
from functions.hyper import env_hyper  # noqa: E402

VARIANTS: dict[str, list[str]] = {
    "full": [],
    "no-is": ["--is-correction", "none"],
    "no-weights": ["--no-staleness-weights"],
    "no-bound": ["--no-bound-decay"],
    "naive": ["--is-correction", "none", "--no-staleness-weights", "--no-bound-decay"],
    "sync": ["--mode", "sync"],
}
PAPER_VARIANTS = list(VARIANTS)
# Diagnostics, run only when named: full with every gradient its own Adam step (H_max = 1), to
# see what averaging the buffered gradients into one step costs per env step.
VARIANTS["full-h1"] = ["--buffer-max", "1"]
# ... and each learner a whole batch of its own (2,048 steps, 32 minibatches), the shape before
# the learners shared a round's batch (docs/decisions.md#share-batch).
VARIANTS["whole-batch"] = ["--set", "aggregation.share_batch=false", "--learner-batch-steps",
                           "2048", "--set", "hyper.num_minibatches=32"]
# ... and full and sync without the entropy bonus: every asynchronous variant's entropy rises on
# Humanoid-v5 while sync PPO's stays level; is the bonus, applied at every Adam step but not held
# back by the trust region, what opens the gap?
VARIANTS["full-ent0"] = ["--set", "hyper.ent_coef=0"]
VARIANTS["sync-ent0"] = ["--mode", "sync", "--set", "hyper.ent_coef=0"]
ENVS = ["Hopper-v5", "Walker2d-v5", "Humanoid-v5"]  # the demo's three
KIND = "ablation"
OLD_ENT_COEF = 0.003  # every env's bonus before records said theirs


def run_command(env: str, variant: str, seed: int, steps: int, run_dir: Path,
                backend: str) -> list[str]:
    return [sys.executable, "-c", "import sys; from orchestrator.cli import main; "
            "sys.exit(main())", "train", "--preset", "paper", "--env", env, "--seed", str(seed),
            "--total-steps", str(steps), "--backend", backend, "--run-dir", str(run_dir),
            "--restart", "--progress", "plain", "--eval-interval-s", "0", *VARIANTS[variant]]


def points(steps: int) -> list[int]:
    """The env-step points a curve is read at: quarters of the budget."""
    return [steps * q // 4 for q in (1, 2, 3, 4)]


def return_at(rows: list[dict[str, str]], env_steps: int) -> float | None:
    """The mean return of the last 100 episodes at the first row at or past ``env_steps``
    (the last row if the run stopped a little short of its budget)."""
    for row in rows:
        if int(float(row["env_steps"])) >= env_steps and row.get("episodic_return"):
            return float(row["episodic_return"])
    last = [r for r in rows if r.get("episodic_return")]
    if last and int(float(last[-1]["env_steps"])) >= 0.95 * env_steps:
        return float(last[-1]["episodic_return"])
    return None


def summarise(run_dir: Path, steps: int) -> tuple[dict[str, Any], dict[str, Any],
                                                dict[str, Any]]:
    """(summary fields, curve points, details) of one finished run folder; the details
    (staleness percentiles, the bound's trajectory) stay in the record, off the page."""
    summary = json.loads((run_dir / "summary.json").read_text())
    config = json.loads((run_dir / "config.json").read_text())
    with open(run_dir / "metrics.csv") as fh:
        rows = list(csv.DictReader(fh))
    staleness = summary.get("staleness_mean") or {}
    hist = summary.get("staleness_hist") or {}
    percentiles = {k: _percentiles(v) for k, v in hist.items() if v}
    out = {
        "env_steps": summary["env_steps"], "versions": summary["version"],
        "sps": round(summary["sps"], 1),
        "truncated_frac": summary.get("is_truncated_frac_mean"),
        "is_others_mean": summary.get("is_others_mean"),
        "is_weight_mean": summary.get("is_weight_mean"),
        "update_epochs_mean": summary.get("update_epochs_mean"),
        # one per aggregation on the paper's path, one per minibatch in sync PPO's rounds
        "optimizer_steps": summary.get("aggregations") or summary.get("grads_applied"),
        "traj_staleness_mean": staleness.get("traj"),
        "traj_staleness_p99": percentiles.get("traj", {}).get("p99"),
        "grad_staleness_mean": staleness.get("grad"),
        "grad_staleness_p99": percentiles.get("grad", {}).get("p99"),
        "is_versions_missing": summary.get("is_versions_missing"),
        "failures": sum((summary.get("failures") or {}).values()),
        # the bonus the run trained with: a default's change must not pool runs across it
        "ent_coef": config["hyper"]["ent_coef"],
    }
    curve = {"return_at_env_steps": {str(p): return_at(rows, p) for p in points(steps)}}
    trajectory = summary.get("bound_trajectory") or []
    details = {
        "staleness_percentiles": percentiles,
        "staleness_hist": hist,
        "bound_trajectory": trajectory[:: max(1, len(trajectory) // 20)],
        "delta_max": summary.get("delta_max"), "rounds": summary.get("rounds"),
        "aggregations": summary.get("aggregations"), "wall_s": round(summary["wall_s"], 1),
        "final_return": summary.get("mean_return"),
    }
    return out, curve, details


def _percentiles(hist: dict[str, int]) -> dict[str, int]:
    values = sorted((int(k), n) for k, n in hist.items())
    total = sum(n for _, n in values)
    out, seen = {}, 0
    marks = iter((50, 90, 99, 100))
    mark = next(marks)
    for v, n in values:
        seen += n
        while mark is not None and seen >= total * mark / 100:
            out[f"p{mark}"] = v
            mark = next(marks, None)
    return out


def bootstrap(values: list[float]) -> tuple[float, float]:
    """95% interval of the mean (a single value: itself)."""
    ci = bootstrap_mean_ci(values)
    if ci is None:
        return (values[0], values[0]) if values else (float("nan"), float("nan"))
    return ci


def verdict(full: list[float], other: list[float]) -> str:
    """How removing a mechanism changes the return: by the interval of full's lead."""
    if len(full) < 3 or len(other) < 3:
        # an interval from two seeds says little: give the direction, not a verdict
        if min(full) > max(other):
            return "too few seeds (full ahead on every seed)"
        if max(full) < min(other):
            return "too few seeds (full behind on every seed)"
        return "too few seeds (mixed)"
    lo, hi = bootstrap_diff_ci(full, other)
    if lo > 0:
        return "helps"
    if hi < 0:
        return "hurts"
    return "no effect"


def variant_label(rec: dict[str, Any], env: str) -> str:
    """A record's variant, marked with its entropy bonus where that is not the env's default
    now: runs from before a default changed are reported apart, never pooled with it. Records
    older than the field trained with the then-global 0.003 (0 for the ``-ent0`` diagnostics,
    whose names say so)."""
    variant = rec["summary"]["variant"]
    if variant.endswith("-ent0"):
        return variant
    ent_coef = rec["summary"].get("ent_coef", OLD_ENT_COEF)
    return variant if ent_coef == env_hyper(env).ent_coef else f"{variant}{at_ent_coef(ent_coef)}"


def at_ent_coef(ent_coef: float) -> str:
    """The mark of a bonus that is not the default (as the compare tables mark theirs)."""
    return f"[hyper.ent_coef={ent_coef:g}]"


def load_runs(records: Path, env: str, steps: int) -> dict[str, list[dict[str, Any]]]:
    """The env's records at ``steps``, by :func:`variant_label`."""
    by_variant: dict[str, list[dict[str, Any]]] = {}
    for path in sorted((records / KIND / env).glob(f"*-{steps}.json")):
        rec = json.loads(path.read_text())
        by_variant.setdefault(variant_label(rec, env), []).append(rec)
    return by_variant


def labels_in_order(runs: dict[str, list[dict[str, Any]]]) -> list[tuple[str, str, str]]:
    """(label, variant, its ``full``) for each label in ``runs``: the env's defaults now first,
    then each earlier bonus, every group in :data:`VARIANTS` order."""
    suffixes = sorted({label[len(base):] for label in runs for base in VARIANTS
                       if label.startswith(base + "[") or label == base},
                      key=lambda sfx: (bool(sfx), sfx))
    return [(v + sfx, v, "full" + sfx) for sfx in suffixes for v in VARIANTS
            if v + sfx in runs and not (sfx and v.endswith("-ent0"))]


def report(records: Path, env: str, steps: int, argv: list[str]) -> list[str]:
    """Write the env's verdict record; returns the lines it printed."""
    runs = load_runs(records, env, steps)
    at = str(points(steps)[-1])

    def finals(variant: str) -> list[float]:
        return [r["curve_points"]["return_at_env_steps"].get(at) for r in runs.get(variant, [])
                if r["curve_points"]["return_at_env_steps"].get(at) is not None]

    rows, lines, earlier = [], [], []
    for label, variant, reference in labels_in_order(runs):
        vals, full = finals(label), finals(reference)
        if not vals:
            continue
        lo, hi = bootstrap(vals)
        trunc = [r["summary"]["truncated_frac"] for r in runs[label]
                 if r["summary"].get("truncated_frac") is not None]
        rows.append({
            "variant": label, "seeds": len(vals),
            f"return at {int(at):,} env steps": {"mean": statistics.fmean(vals), "lo": lo,
                                                 "hi": hi, "n": len(vals)},
            "vs full": statistics.fmean(vals) / statistics.fmean(full) if full else None,
            "verdict (removing it)": ("reference" if variant == "full" else
                                      "baseline" if variant == "sync" else
                                      "diagnostic" if variant not in PAPER_VARIANTS else
                                      verdict(full, vals) if full else "no full to compare"),
            "truncated %": 100 * statistics.fmean(trunc) if trunc else None,
            "mean IS weight": _mean(runs[label], "is_weight_mean"),
            "epochs run": _mean(runs[label], "update_epochs_mean"),
            "Adam steps / 1k env steps": _adam_steps(runs[label]),
            "grad staleness": _mean(runs[label], "grad_staleness_mean"),
            "traj staleness": _mean(runs[label], "traj_staleness_mean"),
            "missing versions": sum(r["summary"].get("is_versions_missing") or 0
                                    for r in runs[label]),
        })
        if variant == "sync" and full and vals:
            # the line a script reads is at the env's defaults now; earlier ones say theirs
            budget = "1M" if int(at) == 1_000_000 else f"{int(at):,}"
            ftrunc = [r["summary"]["truncated_frac"] for r in runs[reference]
                      if r["summary"].get("truncated_frac") is not None]
            suffix = label[len("sync"):]
            line = (f"paper shape vs sync at {budget} env steps, {env}"
                    f"{' ' + suffix[:-1] + ', an earlier default]' if suffix else ''}"
                    f": {statistics.fmean(full) / statistics.fmean(vals):.2f}x (truncated "
                    f"{100 * statistics.fmean(ftrunc) if ftrunc else float('nan'):.0f}%)")
            (earlier if suffix else lines).append(line)
    lines += earlier
    for line in lines:
        print(line)
    if rows:
        legend = "\n\n".join([*lines, *versus_sync(runs, steps),
                               "Verdicts say what *removing* a mechanism does to the return "
                               "(from the 95% interval of the difference of the means; under "
                               "three seeds a side, only a direction); the interval of each "
                               "mean is in brackets.", *machine_share(runs, at)])
        write_record("ablation-verdict", command_line("benchmarks/ablation.py", argv),
                     {"env": env, "env_steps": steps}, None,
                     benchmark="ablation-verdict", name=f"{env}-{steps}", rows=rows,
                     path="aggregation (4 learners) vs sync", records=records,
                     extra={"title": f"{env} at {steps:,} env steps: the paper's shape, its "
                            "ablations and sync PPO", "legend": legend})
    return lines


def versus_sync(runs: dict[str, list[dict[str, Any]]], steps: int) -> list[str]:
    """How sure the paper-vs-sync ratio is (its bootstrap interval, per-seed ratios) and how it
    moved over the run (at each quarter of the budget): one point estimate hides both."""
    def at(variant: str, point: int) -> dict[int, float]:
        return {r["summary"].get("seed", i): v for i, r in enumerate(runs.get(variant, []))
                if (v := r["curve_points"]["return_at_env_steps"].get(str(point))) is not None}

    end = points(steps)[-1]
    full, sync = at("full", end), at("sync", end)
    if not full or not sync:
        return []
    parts = []
    ci = bootstrap_ratio_ci(list(full.values()), list(sync.values()))
    if ci is not None:
        parts.append(f"95% bootstrap interval of the ratio {ci[0]:.2f}–{ci[1]:.2f}x")
    paired = sorted(set(full) & set(sync))
    if paired:
        parts.append("per seed " + ", ".join(f"{s}: {full[s] / sync[s]:.2f}x" for s in paired
                                             if sync[s] > 0))
    along = []
    for point in points(steps)[:-1]:
        f, s = at("full", point).values(), at("sync", point).values()
        if f and s and statistics.fmean(s) > 0:
            along.append(f"{point:,}: {statistics.fmean(f) / statistics.fmean(s):.2f}x")
    if along:
        parts.append("earlier in the run " + ", ".join(along))
    return ["Paper shape vs sync: " + "; ".join(parts) + "."]


def machine_share(runs: dict[str, list[dict[str, Any]]], at: str) -> list[str]:
    """How much of the spread the machine explains: the rank correlation, over every run of the
    paper's path, of the return with env steps/s (on shared cores, fast actors mean starved
    learners)."""
    pairs = [(r["curve_points"]["return_at_env_steps"].get(at), r["summary"].get("sps"))
             for variant, rs in runs.items() if variant != "sync" for r in rs]
    pairs = [(ret, sps) for ret, sps in pairs if ret is not None and sps is not None]
    if len(pairs) < 5:
        return []
    rho = statistics.correlation(_ranks([p[0] for p in pairs]), _ranks([p[1] for p in pairs]))
    return [f"Across the {len(pairs)} runs of the paper's path, the rank correlation of the "
            f"return with env steps/s: {rho:+.2f}."]


def _ranks(values: list[float]) -> list[float]:
    order = sorted(range(len(values)), key=values.__getitem__)
    ranks = [0.0] * len(values)
    for rank, i in enumerate(order):
        ranks[i] = float(rank)
    return ranks


def _adam_steps(runs: list[dict[str, Any]]) -> float | None:
    """Optimizer (Adam) steps per 1,000 env steps; records older than the field give it only
    on the paper's path (its aggregations)."""
    vals = []
    for r in runs:
        steps = r["summary"].get("optimizer_steps") or r.get("details", {}).get("aggregations")
        if steps and r["summary"].get("env_steps"):
            vals.append(1000 * steps / r["summary"]["env_steps"])
    return statistics.fmean(vals) if vals else None


def _mean(runs: list[dict[str, Any]], key: str) -> float | None:
    vals = [r["summary"][key] for r in runs if r["summary"].get(key) is not None]
    return statistics.fmean(vals) if vals else None


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--envs", nargs="+", help=f"gymnasium ids (default: {' '.join(ENVS)})")
    p.add_argument("--seeds", type=int, nargs="+", help="seeds (default 101 102 103)")
    p.add_argument("--steps", type=int, help="env steps per run (default 1,000,000)")
    p.add_argument("--variants", nargs="+", choices=list(VARIANTS), default=PAPER_VARIANTS,
                   help="which variants to run (default: the paper's six; full-h1 is a "
                   "diagnostic: every gradient its own Adam step)")
    p.add_argument("--backend", default="local", choices=["inline", "local", "ray"],
                   help="where the functions run (default: the local Lambda runtime)")
    p.add_argument("--quick", action="store_true",
                   help="Hopper-v5, one seed, 60k env steps: a few minutes a variant")
    p.add_argument("--report", action="store_true", help="no runs: the verdicts from records")
    p.add_argument("--out", default=str(REPO / "benchmarks" / "out" / "ablation"),
                   help="run folders (git-ignored)")
    p.add_argument("--records", help="records dir (default: $STELLARIS_RECORDS_DIR or "
                   "benchmarks/records)")
    args = p.parse_args(argv)
    envs = args.envs or (["Hopper-v5"] if args.quick else ENVS)
    seeds = args.seeds or ([101] if args.quick else [101, 102, 103])
    steps = args.steps or (60_000 if args.quick else 1_000_000)
    records = records_dir(args.records)
    for env in envs:
        if not args.report:
            for seed in seeds:
                for variant in args.variants:
                    run_one(env, variant, seed, steps, args, argv, records)
        report(records, env, steps, argv)
    return 0


def run_one(env: str, variant: str, seed: int, steps: int, args: argparse.Namespace,
            argv: list[str], records: Path) -> None:
    run_dir = Path(args.out) / env / f"{variant}-seed{seed}-{steps}"
    cmd = run_command(env, variant, seed, steps, run_dir, args.backend)
    t0 = time.monotonic()
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True)
    took = time.monotonic() - t0
    if proc.returncode != 0 or not (run_dir / "summary.json").exists():
        print(f"{env} {variant} seed {seed}: failed (exit {proc.returncode})\n"
              f"{proc.stderr[-2000:]}", file=sys.stderr)
        return
    facts, curve, details = summarise(run_dir, steps)
    summary = {"env": env, "variant": variant, "seed": seed, **facts}
    details["process_s"] = round(took, 1)
    write_record(KIND, " ".join(["python", "-m", "orchestrator.cli", *cmd[3:]]), summary, curve,
                 benchmark=KIND, name=f"{env}/{variant}-seed{seed}-{steps}",
                 run_dir=run_dir, records=records, extra={"details": details})
    at = str(points(steps)[-1])
    print(f"{env} {variant} seed {seed}: return {curve['return_at_env_steps'].get(at)} at "
          f"{int(at):,} env steps, {summary['versions']} versions, truncated "
          f"{summary['truncated_frac']}, {took:.0f}s", flush=True)


if __name__ == "__main__":
    raise SystemExit(main())
