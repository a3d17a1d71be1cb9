"""What the benchmark systems share: one run-folder layout, one CSV schema, one cost clock.

Every system (Stellaris async, our sync PPO, RLlib PPO, the lean PPO) leaves a run folder with
``config.json``, ``metrics.csv`` (the columns of :data:`orchestrator.metrics.CSV_COLUMNS`;
a system fills the ones it has) and ``summary.json`` (``wall_s``, ``env_steps``, ``sps``,
``mean_return``, ``cost.total_usd``), so reading and plotting treat them alike.

``episodic_return`` is always the mean of the last 100 finished training episodes (the
trainer's definition), computed here from each episode's return for every system — RLlib's
too (its own ``episode_return_mean`` averages one iteration's episodes: rllib_ppo.py).

A :class:`RunLog`'s clock starts when its *process* started, not when the log is made: the
imports, compilation and a framework's start-up (Ray's, a vector env's workers) count against
the budget and the time to a target, as they do for a user (``clock_origin`` in the summary).
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import time
from collections import deque
from pathlib import Path
from typing import Any

from orchestrator.cost import CostMeter, PriceTable
from orchestrator.metrics import CSV_COLUMNS, reached_return

RETURN_WINDOW = 100
CLOCK_ORIGIN = "process start"


def since_process_start() -> float:
    """Seconds since this process was created (the kernel's start time, so the interpreter's
    own start and every import before the caller count).

    On Linux, read against the boot clock the kernel stamps it with: psutil's ``create_time``
    adds /proc/stat's boot time, whole seconds, so it can be up to a second early; this is
    early by at most the kernel's one tick (10 ms)."""
    try:
        with open("/proc/self/stat") as fh:
            start_ticks = int(fh.read().rsplit(")", 1)[1].split()[19])  # field 22, starttime
        boot_now = time.clock_gettime(time.CLOCK_BOOTTIME)
        return max(0.0, boot_now - start_ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError, AttributeError):  # not Linux
        import psutil

        return max(0.0, time.time() - psutil.Process().create_time())


def serverful_meter(prices: dict[str, float] | None = None) -> CostMeter:
    """A serverful baseline's meter: the whole wall time at ``serverful_hour_usd``."""
    return CostMeter(PriceTable.from_overrides(prices), serverless=False)


class RunLog:
    """metrics.csv + config.json + summary.json of a non-Stellaris system's run."""

    def __init__(self, run_dir: str | os.PathLike[str], config: dict[str, Any],
                 log_interval_s: float = 2.0, prices: dict[str, float] | None = None,
                 stop_at_return: float | None = None) -> None:
        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        (self.run_dir / "config.json").write_text(json.dumps(config, indent=2, default=str))
        self._fh = open(self.run_dir / "metrics.csv", "w", newline="")  # noqa: SIM115
        self._csv = csv.DictWriter(self._fh, fieldnames=CSV_COLUMNS, extrasaction="ignore")
        self._csv.writeheader()
        self.meter = serverful_meter(prices)
        self.log_interval_s = log_interval_s
        self.returns: deque[float] = deque(maxlen=RETURN_WINDOW)
        self.lengths: deque[int] = deque(maxlen=RETURN_WINDOW)
        self.episodes = 0
        self.env_steps = 0
        self.version = 0
        self.t0 = time.monotonic() - since_process_start()  # the clock from process start
        self._last_t = 0.0
        self._last_steps = 0
        self.last_row: dict[str, Any] = {}
        self.stop_at_return = stop_at_return
        self.target_reached = False  # a written row reached stop_at_return

    def running(self, budget_s: float, total_steps: int | None) -> bool:
        """Whether the run goes on: within its wall-clock and step budgets, short of its
        stop return (checked on written rows, so the curve shows the target reached)."""
        return (self.wall() < budget_s and not self.target_reached
                and (total_steps is None or self.env_steps < total_steps))

    def wall(self) -> float:
        return time.monotonic() - self.t0

    def episodes_done(self, returns: list[float], lengths: list[int] | None = None) -> None:
        self.returns.extend(float(r) for r in returns)
        self.lengths.extend(int(n) for n in (lengths or []))
        self.episodes += len(returns)

    def mean_return(self) -> float | None:
        return sum(self.returns) / len(self.returns) if self.returns else None

    def row(self, extra: dict[str, Any] | None = None, force: bool = False,
            episodic_return: float | None = None) -> dict[str, Any] | None:
        """Write a row if the log interval passed (or ``force``)."""
        now = self.wall()
        if not force and now - self._last_t < self.log_interval_s:
            return None
        dt = max(1e-9, now - self._last_t)
        usd = self.meter.total(now)
        row = {
            "wall_s": now, "env_steps": self.env_steps, "version": self.version,
            "sps": (self.env_steps - self._last_steps) / dt,
            "episodic_return": episodic_return if episodic_return is not None
            else self.mean_return(),
            "episodic_length": (sum(self.lengths) / len(self.lengths)) if self.lengths else None,
            # one machine for the wall time: nothing in the bill waits on another's core
            "episodes": self.episodes, "cost_usd": usd, "cost_usd_dedicated_vcpu": usd,
            "actors_in_flight": 0, "learners_in_flight": 0,
            **(extra or {}),
        }
        self._csv.writerow({k: _fmt(row.get(k)) for k in CSV_COLUMNS})
        self._fh.flush()
        self._last_t, self._last_steps = now, self.env_steps
        self.last_row = row
        self.target_reached = self.target_reached or reached_return(row, self.stop_at_return)
        return row

    def close(self, extra: dict[str, Any] | None = None) -> dict[str, Any]:
        wall = self.wall()
        final = self.row(force=True)
        summary = {
            "run_id": self.run_dir.name, "env_steps": self.env_steps, "episodes": self.episodes,
            "version": self.version, "wall_s": wall, "sps": self.env_steps / max(wall, 1e-9),
            "mean_return": (final or {}).get("episodic_return"),
            "cost": self.meter.report(wall), "final_row": final,
            "target_reached": self.target_reached, "clock_origin": CLOCK_ORIGIN,
            **(extra or {}),
        }
        (self.run_dir / "summary.json").write_text(json.dumps(summary, indent=2, default=str))
        self._fh.close()
        return summary


def _fmt(v: Any) -> Any:
    if isinstance(v, float):
        return f"{v:.6g}"
    return "" if v is None else v


def read_curve(run_dir: str | os.PathLike[str]) -> dict[str, list[float]]:
    """Rows of a run's metrics.csv that have a return: wall_s, env_steps, cost_usd (and the
    same at dedicated vCPUs: cost_usd where a run predates that column), return, the
    orchestrator's and Redis's CPU seconds so far (0 where a run predates that column or has
    none), the mean episode length (0 where none is logged) and the policy's entropy at the
    last update (NaN before the first one)."""
    cols: dict[str, list[float]] = {"wall_s": [], "env_steps": [], "cost_usd": [],
                                    "cost_usd_dedicated_vcpu": [], "episodic_return": [],
                                    "episodic_length": [],
                                    "orchestrator_cpu_s": [], "redis_cpu_s": [], "entropy": []}
    path = Path(run_dir) / "metrics.csv"
    if not path.exists():
        return cols
    with open(path) as fh:
        for row in csv.DictReader(fh):
            if not row.get("episodic_return"):
                continue
            row["cost_usd_dedicated_vcpu"] = row.get("cost_usd_dedicated_vcpu") or row.get("cost_usd")
            row["entropy"] = row.get("losses/entropy") or "nan"
            for k in cols:
                cols[k].append(float(row.get(k) or 0.0))
    return cols


def read_summary(run_dir: str | os.PathLike[str]) -> dict[str, Any]:
    path = Path(run_dir) / "summary.json"
    return json.loads(path.read_text()) if path.exists() else {}


def runner_parser(doc: str | None, seed_help: str) -> argparse.ArgumentParser:
    """The flags every baseline runner shares: env, seed, budget, early stop, run folder
    (``parse_budgeted`` checks that a budget was given)."""
    p = argparse.ArgumentParser(description=(doc or "").split("\n")[0])
    p.add_argument("--env", default="Hopper-v5", help="gymnasium env id")
    p.add_argument("--seed", type=int, default=1, help=seed_help)
    p.add_argument("--minutes", type=float, help="wall-clock budget from process start")
    p.add_argument("--total-steps", type=int, help="env-step budget")
    p.add_argument("--stop-at-return", type=float,
                   help="also stop once the mean return of the last 100 episodes reaches this")
    p.add_argument("--out", required=True, help="run folder")
    return p


def parse_budgeted(p: argparse.ArgumentParser, argv: list[str] | None) -> argparse.Namespace:
    a = p.parse_args(argv)
    if a.minutes is None and a.total_steps is None:
        p.error("give --minutes or --total-steps")
    return a
