"""Metrics of a run: ``metrics.csv`` (one row per log interval), TensorBoard scalars with
CleanRL's names plus ``version_diff_*`` and cost, and a live progress display."""

from __future__ import annotations

import csv
import sys
import time
from pathlib import Path
from typing import Any

CSV_COLUMNS = [
    "wall_s", "env_steps", "version", "sps", "episodic_return", "episodic_length", "episodes",
    "eval_return", "cost_usd", "cost_usd_dedicated_vcpu", "version_diff_traj_mean", "version_diff_traj_max",
    "version_diff_grad_mean", "version_diff_grad_max", "aggregations", "beta", "buffer_size",
    "actors_in_flight", "learners_in_flight", "failures_actor", "failures_learner",
    "failures_evaluator", "grads_applied", "grads_dropped", "grads_duplicate",
    "losses/policy_loss", "losses/value_loss", "losses/entropy", "losses/approx_kl",
    "losses/clipfrac", "losses/explained_variance", "losses/is_truncated_frac",
    "charts/learning_rate", "orchestrator_cpu_s", "losses/update_epochs", "redis_cpu_s",
]

# CSV column -> TensorBoard tag (CleanRL naming where one exists)
TB_TAGS = {
    "episodic_return": "charts/episodic_return",
    "episodic_length": "charts/episodic_length",
    "eval_return": "charts/eval_return",
    "sps": "charts/SPS",
    "cost_usd": "cost/total_usd",
    "cost_usd_dedicated_vcpu": "cost/total_usd_dedicated_vcpu",
    "version_diff_traj_mean": "staleness/version_diff_traj_mean",
    "version_diff_traj_max": "staleness/version_diff_traj_max",
    "version_diff_grad_mean": "staleness/version_diff_grad_mean",
    "version_diff_grad_max": "staleness/version_diff_grad_max",
    "beta": "staleness/beta",
    "version": "charts/version",
}


def existing_columns(path: Path) -> list[str] | None:
    """The header of an existing, non-empty ``metrics.csv``; None when there is none."""
    try:
        with open(path, newline="") as fh:
            header = next(csv.reader(fh), None)
    except FileNotFoundError:
        return None
    return header or None


class MetricsLog:
    def __init__(self, run_dir: Path, tensorboard: bool = True) -> None:
        self.path = Path(run_dir) / "metrics.csv"
        # A resumed run appends under the header its file has: a run begun by an older
        # version (fewer columns) keeps its rows aligned and loses only the new columns.
        self.columns = existing_columns(self.path) or CSV_COLUMNS
        self._fh = open(self.path, "a", newline="")  # noqa: SIM115 - closed in close()
        self._csv = csv.DictWriter(self._fh, fieldnames=self.columns, extrasaction="ignore")
        if self.columns is CSV_COLUMNS:
            self._csv.writeheader()
        self.tb = None
        if tensorboard:
            from torch.utils.tensorboard import SummaryWriter

            self.tb = SummaryWriter(log_dir=str(Path(run_dir) / "tb"))

    def row(self, values: dict[str, Any]) -> None:
        self._csv.writerow({k: _fmt(values.get(k)) for k in self.columns})
        self._fh.flush()
        if self.tb is not None:
            step = int(values.get("env_steps") or 0)
            for key, val in values.items():
                if val is None or not isinstance(val, int | float):
                    continue
                tag = TB_TAGS.get(key, key if "/" in key else f"system/{key}")
                self.tb.add_scalar(tag, float(val), step)

    def scalar(self, tag: str, value: float, step: int) -> None:
        if self.tb is not None:
            self.tb.add_scalar(tag, float(value), step)

    def histogram(self, tag: str, values: list[float], step: int) -> None:
        if self.tb is not None and values:
            import numpy as np

            self.tb.add_histogram(tag, np.asarray(values), step)

    def close(self) -> None:
        self._fh.close()
        if self.tb is not None:
            self.tb.close()


def reached_return(row: dict[str, Any], target: float | None) -> bool:
    """Whether a logged row's mean return reaches ``target`` (``stop_at_return``): every system
    stops on its written rows, so its curve shows the target reached."""
    ret = row.get("episodic_return")
    return target is not None and ret is not None and ret >= target


def _fmt(v: Any) -> Any:
    if isinstance(v, float):
        return f"{v:.6g}"
    return "" if v is None else v


class Progress:
    """A live rich display in a terminal; plain log lines elsewhere (CI, files)."""

    def __init__(self, mode: str, total_steps: int | None, total_s: float | None) -> None:
        if mode == "auto":
            mode = "rich" if sys.stdout.isatty() else "plain"
        self.mode = mode
        self._progress = None
        self._task = None
        self._last_plain = 0.0
        if mode == "rich":
            from rich.progress import BarColumn, TextColumn, TimeElapsedColumn
            from rich.progress import Progress as RichProgress

            self._progress = RichProgress(
                TextColumn("[bold]stellaris"), BarColumn(), TextColumn("{task.percentage:>3.0f}%"),
                TimeElapsedColumn(), TextColumn("{task.description}"),
            )
            total = float(total_steps) if total_steps else float(total_s or 1.0)
            self._by_steps = bool(total_steps)
            self._task = self._progress.add_task("", total=total)
            self._progress.start()

    def update(self, row: dict[str, Any]) -> None:
        ret = row.get("episodic_return")
        line = (
            f"steps {row['env_steps']:>9,} | SPS {row.get('sps') or 0:7.0f} | "
            f"return {'-' if ret is None else f'{ret:8.1f}'} | v{row['version']} | "
            f"stale traj {row.get('version_diff_traj_mean') or 0:.1f} grad "
            f"{row.get('version_diff_grad_mean') or 0:.1f} | in flight "
            f"{row.get('actors_in_flight', 0)}a/{row.get('learners_in_flight', 0)}l | "
            f"${row.get('cost_usd') or 0:.5f}"
        )
        if self._progress is not None and self._task is not None:
            done = row["env_steps"] if self._by_steps else row["wall_s"]
            self._progress.update(self._task, completed=done, description=line)
        elif self.mode == "plain" and time.monotonic() - self._last_plain >= 5.0:
            self._last_plain = time.monotonic()
            print(f"[{row['wall_s']:7.1f}s] {line}", flush=True)

    def close(self) -> None:
        if self._progress is not None:
            self._progress.stop()
