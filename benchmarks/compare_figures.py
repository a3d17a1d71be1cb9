"""compare.py's figures: per env, return vs wall clock, env steps and $ (mean over seeds,
min-max band), the cost per run, and the staleness histograms of the Stellaris runs. They are
drawn from run folders (the curves), under ``benchmarks/out`` — never committed."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

from benchmarks.compare_analysis import display


def save_figure(fig: Any, path: Path, **savefig: Any) -> Path:
    """Lay out, write (``dpi`` 110 unless given) and close a figure; returns ``path``."""
    import matplotlib.pyplot as plt  # loaded by the caller already, with its backend set

    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, **{"dpi": 110, **savefig})
    plt.close(fig)
    return path


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
            line = ax.plot(grid, mean, label=f"{display(variant)} (n={len(curves)})")
            if len(curves) > 1:
                ax.fill_between(grid, lo, hi_, color=line[0].get_color(), alpha=0.15)
        ax.set_xlabel(xlabel)
        ax.set_ylabel("episodic return (mean of last 100)")
        ax.set_title(f"{env}: return vs {xlabel.split(' (')[0]}")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
        written.append(save_figure(fig, fig_dir / f"{env}_return_vs_{x.split('_')[0]}.png"))

    fig, ax = plt.subplots(figsize=(7.5, 4.5))
    names = list(data)
    means = [float(np.mean([r["facts"]["usd"] for r in data[v]])) for v in names]
    errs = [float(np.std([r["facts"]["usd"] for r in data[v]])) for v in names]
    ax.bar(range(len(names)), means, yerr=errs, capsize=3)
    ax.set_xticks(range(len(names)), [display(v) for v in names], rotation=20, ha="right",
                  fontsize=7)
    ax.set_ylabel("cost per run (USD)")
    ax.set_title(f"{env}: final cost per run (same budget)")
    written.append(save_figure(fig, fig_dir / f"{env}_cost.png"))

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
                       label=display(v))
            ax.set_xlabel(f"staleness of {'trajectories' if kind == 'traj' else 'gradients'} "
                          "(versions)")
            ax.set_ylabel("fraction")
            if ax.get_legend_handles_labels()[0]:
                ax.legend(fontsize=7)
            else:  # e.g. gradients: a publishing learner sends none
                ax.text(0.5, 0.5, "none recorded", ha="center", va="center",
                        transform=ax.transAxes)
        fig.suptitle(f"{env}: staleness (all seeds)")
        written.append(save_figure(fig, fig_dir / f"{env}_staleness.png"))
    return written
