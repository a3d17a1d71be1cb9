"""Learning benchmark: Stellaris async vs the sync baseline on the same wall-clock budget.

Runs are sequential (never two at once on a 2-core machine), several seeds, same functions,
same PPO hyper-parameters, same backend and same price table; only the mode differs.

    .venv/bin/python benchmarks/learning_bench.py --env Hopper-v5 --minutes 3 --seeds 1 2 \
        [--backend local] [--out benchmarks/out/learning]

Writes per-run folders, ``learning.json`` and ``return_vs_{wall,steps,cost}.png`` under
``--out``, and one record (kind ``learning``: the table below, each mode's training path) that
``benchmarks/report.py`` renders.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.records import command_line, run_training_path, write_record  # noqa: E402
from benchmarks.report_render import cell, md_table  # noqa: E402


def run_one(mode: str, env: str, minutes: float, seed: int, backend: str, out: Path) -> Path:
    run_dir = out / f"{env}-{mode}-s{seed}"
    cmd = [sys.executable, "-m", "orchestrator.cli", "train", "--env", env, "--mode", mode,
           "--backend", backend, "--minutes", str(minutes), "--seed", str(seed),
           "--run-dir", str(run_dir), "--restart", "--progress", "none",
           "--eval-interval-s", "0"]
    subprocess.run(cmd, check=True, cwd=ROOT, env={**os.environ, "OMP_NUM_THREADS": "1"})
    return run_dir


def curve(run_dir: Path) -> dict[str, np.ndarray]:
    with open(run_dir / "metrics.csv") as fh:
        rows = list(csv.DictReader(fh))
    rows = [r for r in rows if r["episodic_return"]]
    return {k: np.array([float(r[k] or 0) for r in rows])
            for k in ("wall_s", "env_steps", "cost_usd", "episodic_return")}


def at(c: dict[str, np.ndarray], t: float) -> float | None:
    idx = np.searchsorted(c["wall_s"], t, side="right") - 1
    return None if idx < 0 else float(c["episodic_return"][idx])


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--env", default="Hopper-v5")
    ap.add_argument("--minutes", type=float, default=3.0)
    ap.add_argument("--seeds", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--backend", default="local")
    ap.add_argument("--out", default="benchmarks/out/learning")
    ap.add_argument("--records", help="records dir (default: $STELLARIS_RECORDS_DIR or "
                    "benchmarks/records)")
    ap.add_argument("--no-record", action="store_true", help="write no record")
    args = ap.parse_args(argv)
    out = ROOT / args.out
    out.mkdir(parents=True, exist_ok=True)
    load = os.getloadavg()[0]
    runs: dict[str, list[Path]] = {"async": [], "sync": []}
    for seed in args.seeds:
        for mode in ("async", "sync"):
            runs[mode].append(run_one(mode, args.env, args.minutes, seed, args.backend, out))

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    report: dict[str, dict] = {}
    for x in ("wall_s", "env_steps", "cost_usd"):
        fig, ax = plt.subplots(figsize=(7, 4.5))
        for mode, dirs in runs.items():
            for i, d in enumerate(dirs):
                c = curve(d)
                ax.plot(c[x], c["episodic_return"], color="C0" if mode == "async" else "C1",
                        alpha=0.8, label=mode if i == 0 else None)
        ax.set_xlabel(x)
        ax.set_ylabel("episodic return")
        ax.legend()
        ax.grid(alpha=0.3)
        fig.tight_layout()
        fig.savefig(out / f"return_vs_{x.split('_')[0]}.png", dpi=110)
        plt.close(fig)
    budget_s = args.minutes * 60
    points = [p for p in (60, 120, 180, 300, 600) if p <= budget_s] or [budget_s]
    for mode, dirs in runs.items():
        sums = [json.loads((d / "summary.json").read_text()) for d in dirs]
        curves = [curve(d) for d in dirs]
        report[mode] = {
            "final_return": [s["mean_return"] for s in sums],
            "sps": [s["sps"] for s in sums],
            "cost_usd": [s["cost"]["total_usd"] for s in sums],
            "env_steps": [s["env_steps"] for s in sums],
            "return_at": {str(p): [at(c, p) for c in curves] for p in points},
        }
    (out / "learning.json").write_text(json.dumps(report, indent=2))

    def ms(xs: list[float | None]) -> dict[str, float | None]:
        v = [x for x in xs if x is not None]
        return {"mean": float(np.mean(v)) if v else None, "sd": float(np.std(v)) if v else None}

    rows = [{"mode": mode, **{f"return @ {p / 60:g} min": ms(r["return_at"][str(p)])
                              for p in points},
             "env steps/s": ms(r["sps"]), "env steps": ms(r["env_steps"]),
             "$ per run": ms(r["cost_usd"])} for mode, r in report.items()]
    print("\n".join(md_table(list(rows[0]), [[cell(v) for v in r.values()] for r in rows])))
    if not args.no_record:
        print(write_record(
            "learning", command_line("benchmarks/learning_bench.py", argv),
            {"env": args.env, "minutes": args.minutes, "seeds": args.seeds,
             "backend": args.backend, "load_before": load}, rows=rows, records=args.records,
            path="; ".join(f"{m}: {run_training_path(d[0])}" for m, d in runs.items()),
            extra={"title": f"{args.env}, {args.minutes:g} min, seeds "
                            f"{' '.join(map(str, args.seeds))}, backend {args.backend}",
                   "paths": {m: run_training_path(d[0]) for m, d in runs.items()}}))


if __name__ == "__main__":
    main()
