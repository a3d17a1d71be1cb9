"""The results page's figures, drawn from the committed records alone (the run folders' full
curves are not kept): per group of compare.py runs of the headline and the paper's demo, return
vs wall clock, env steps and $; per ablation, return vs env steps and vs versions.

A record keeps, per run, when its return first reached each of the env's targets (wall clock,
env steps, $), its return at each whole minute and at fixed env steps, and where it ended; a
figure joins those points per run, so each line is the run's progress measured at those
points, not its every logged row. ``python benchmarks/report.py`` writes them under
``docs/figures/`` beside the page; ``--check`` fails if one the page links is missing.
"""

from __future__ import annotations

import re
import statistics
from pathlib import Path
from typing import Any

from benchmarks.compare_analysis import display
from benchmarks.compare_figures import save_figure

# compare.py series that get a figure: the headline's and the paper's demo (the selections and
# diagnoses keep to their tables, so the committed figures stay few)
FIGURE_SERIES = ("equal-cores", "paper-demo", "paper-demo-quick")
AXES = (("wall_s", "wall clock from process start (s)"), ("env_steps", "environment steps"),
        ("usd", "cost (USD, log scale)"))
# small and byte-stable: no version stamp in the file
SAVEFIG = {"dpi": 80, "metadata": {"Software": None}, "pil_kwargs": {"optimize": True}}


def _file_name(stem: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]", "_", stem) + ".png"


def figure_name(key: tuple[str, float, str]) -> str:
    """The file a compare group's figure is written to (under docs/figures/)."""
    env, budget, series = key
    return _file_name(f"compare-{env}-{budget:g}min" + (f"-{series}" if series else ""))


def run_points(points: dict[str, Any]) -> dict[str, list[tuple[float, float]]]:
    """One run's (x, return) points per axis, in order of x, from its record's curve points."""
    out: dict[str, list[tuple[float, float]]] = {x: [] for x, _ in AXES}
    for target, at in (points.get("to_target") or {}).items():
        for x, _ in AXES:
            if at and at.get(x) is not None:  # None: never reached
                out[x].append((float(at[x]), float(target)))
    for minute, ret in (points.get("return_at_min") or {}).items():
        if ret is not None:
            out["wall_s"].append((60.0 * float(minute), float(ret)))
    for steps, ret in (points.get("return_at_steps") or {}).items():
        if ret is not None:
            out["env_steps"].append((float(steps), float(ret)))
    last = points.get("last") or {}
    if last.get("return") is not None:
        for x, _ in AXES:
            if last.get(x) is not None:
                out[x].append((float(last[x]), float(last["return"])))
    return {x: sorted(set(pts)) for x, pts in out.items()}


def draw(key: tuple[str, float, str], runs: dict[str, list[dict[str, Any]]],
         path: Path) -> Path:
    """One figure, three panels; ``runs`` as :func:`benchmarks.report_render.runs_of` gives
    them (per variant, each run with its record's ``points``)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import NullFormatter

    env, budget, series = key
    fig, axes = plt.subplots(1, len(AXES), figsize=(13, 3.8))
    for i, (variant, vruns) in enumerate(runs.items()):
        color = f"C{i % 10}"
        for j, run in enumerate(vruns):
            pts = run_points(run["points"])
            for ax, (x, _) in zip(axes, AXES, strict=True):
                xs = [p[0] for p in pts[x] if x != "usd" or p[0] > 0]
                ys = [p[1] for p in pts[x] if x != "usd" or p[0] > 0]
                ax.plot(xs, ys, marker=".", color=color, alpha=0.8, linewidth=1,
                        label=f"{display(variant)} ({len(vruns)} seeds)" if j == 0 else None)
    for ax, (x, label) in zip(axes, AXES, strict=True):
        ax.set_xlabel(label)
        ax.grid(alpha=0.3)
        if x == "usd":
            ax.set_xscale("log")
            ax.xaxis.set_minor_formatter(NullFormatter())  # labels of the decades only
    axes[0].set_ylabel("return (mean of last 100 episodes)")
    axes[0].legend(fontsize=7)
    fig.suptitle(f"{env}, {budget:g}-minute budget" + (f" ({series})" if series else "")
                 + ": each line one run, at the points its record keeps", fontsize=9)
    return save_figure(fig, path, **SAVEFIG)


def ablation_name(env: str, steps: int) -> str:
    """The file an ablation's figure (one env, one budget of env steps) is written to."""
    return _file_name(f"ablation-{env}-{int(steps)}")


def ablation_budget(record: dict[str, Any]) -> int:
    """An ablation run's budget: the last of the quarter points its curve is read at."""
    return max(int(k) for k in record["curve_points"]["return_at_env_steps"])


def draw_ablation(env: str, steps: int, records: list[dict[str, Any]], path: Path) -> Path:
    """Return vs env steps (each seed thin, the mean over seeds thick) and the return at the
    budget vs the versions the run published, per variant of ``benchmarks/ablation.py``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from benchmarks.ablation import variant_label

    by_variant: dict[str, list[dict[str, Any]]] = {}
    for r in sorted(records, key=lambda r: (variant_label(r, env), r["summary"]["seed"])):
        by_variant.setdefault(variant_label(r, env), []).append(r)
    fig, (ax, ax_v) = plt.subplots(1, 2, figsize=(12, 4.2))
    for i, (variant, runs) in enumerate(by_variant.items()):
        color = f"C{i % 10}"
        curves = [sorted((int(k), v) for k, v in r["curve_points"]["return_at_env_steps"].items()
                         if v is not None) for r in runs]
        for c in curves:
            ax.plot([x for x, _ in c], [y for _, y in c], color=color, alpha=0.35, linewidth=0.8)
        xs = sorted({x for c in curves for x, _ in c})
        mean = [statistics.fmean(dict(c)[x] for c in curves if x in dict(c)) for x in xs]
        ax.plot(xs, mean, color=color, marker="o", linewidth=2,
                label=f"{variant} ({len(runs)} seeds)")
        finals = [(r["summary"]["versions"], dict(c).get(steps)) for r, c in zip(runs, curves,
                                                                                 strict=True)]
        finals = [(v, y) for v, y in finals if v and y is not None]
        ax_v.scatter([v for v, _ in finals], [y for _, y in finals], color=color, label=variant)
    ax.set_xlabel("environment steps")
    ax.set_ylabel("return (mean of last 100 episodes)")
    ax.legend(fontsize=7)
    ax_v.set_xlabel("versions published (log scale; sync PPO: one per round)")
    ax_v.set_xscale("log")
    ax_v.set_ylabel(f"return at {steps:,} env steps")
    for a in (ax, ax_v):
        a.grid(alpha=0.3)
    fig.suptitle(f"{env}: the paper's shape, its ablations and sync PPO, {steps:,} env steps",
                 fontsize=9)
    return save_figure(fig, path, **SAVEFIG)
