"""Figures of one or more runs side by side: return vs wall-clock, vs env steps, vs $, and cost.
Each run is a run folder or an ``s3://bucket/prefix`` one (orchestrator/run_reader.py)."""

from __future__ import annotations

import csv
import json
from contextlib import ExitStack
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only: no display on servers
import matplotlib.pyplot as plt  # noqa: E402

from orchestrator.run_reader import readable_run  # noqa: E402


def read_metrics(run_dir: Path) -> dict[str, list[float]]:
    cols: dict[str, list[float]] = {"wall_s": [], "env_steps": [], "cost_usd": [], "episodic_return": []}
    path = Path(run_dir) / "metrics.csv"
    if not path.exists():
        raise FileNotFoundError(f"no metrics.csv in {run_dir}")
    with open(path) as fh:
        for row in csv.DictReader(fh):
            if not row.get("episodic_return"):
                continue
            for k in cols:
                cols[k].append(float(row[k] or 0))
    return cols


def _label(run_dir: Path) -> str:
    cfg = Path(run_dir) / "config.json"
    if cfg.exists():
        doc = json.loads(cfg.read_text())
        return f"{Path(run_dir).name} ({doc.get('mode')}, {doc.get('backend')})"
    return Path(run_dir).name


def plot_runs(run_dirs: list[str | Path], out_dir: Path) -> list[Path]:
    with ExitStack() as stack:
        # every run is read (and an S3 one copied) before anything is drawn or written
        local = []
        for run in run_dirs:
            path = stack.enter_context(readable_run(run))
            if not (path / "metrics.csv").exists():  # named as given, not as copied
                raise FileNotFoundError(f"no metrics.csv in {run}")
            local.append(path)
        return _plot(local, Path(out_dir))


def _plot(run_dirs: list[Path], out_dir: Path) -> list[Path]:
    data = {Path(r): read_metrics(Path(r)) for r in run_dirs}
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for x, xlabel in (("wall_s", "wall-clock (s)"), ("env_steps", "environment steps"),
                      ("cost_usd", "cost (USD)")):
        fig, ax = plt.subplots(figsize=(7, 4.5))
        for run, cols in data.items():
            ax.plot(cols[x], cols["episodic_return"], label=_label(run))
        ax.set_xlabel(xlabel)
        ax.set_ylabel("episodic return (mean of last 100)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
        path = out_dir / f"return_vs_{x.split('_')[0]}.png"
        fig.tight_layout()
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(path)
    fig, ax = plt.subplots(figsize=(7, 4.5))
    names, costs = [], []
    for run in data:
        summary = run / "summary.json"
        total = json.loads(summary.read_text())["cost"]["total_usd"] if summary.exists() else (
            data[run]["cost_usd"][-1] if data[run]["cost_usd"] else 0.0)
        names.append(run.name)
        costs.append(total)
    ax.bar(range(len(names)), costs)
    ax.set_xticks(range(len(names)), names, rotation=20, ha="right", fontsize=7)
    ax.set_ylabel("total cost (USD)")
    fig.tight_layout()
    path = out_dir / "cost.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    written.append(path)
    return written
