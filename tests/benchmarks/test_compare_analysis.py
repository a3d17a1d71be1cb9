"""compare.py's statistics and report text on hand-made curves: key points, times and bounds to
a target, bootstrap intervals, the per-seed table, the ratio lines and the footprint line."""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from benchmarks import compare  # noqa: E402
from benchmarks import compare_analysis as analysis  # noqa: E402
from benchmarks import compare_report as text_of  # noqa: E402
from orchestrator.metrics import CSV_COLUMNS  # noqa: E402

TARGETS = [1000.0, 1500.0, 2000.0]


def run(seed: int, wall: list[float], rets: list[float], cost: float, minutes: float = 3.0,
        steps: list[float] | None = None, curve: dict[str, Any] | None = None,
        summary: dict[str, Any] | None = None) -> dict[str, Any]:
    """A run as compare_analysis describes it, from a curve whose $ grows with wall time."""
    c = {"wall_s": wall, "env_steps": steps or [1.0] * len(wall),
         "cost_usd": [cost * w / wall[-1] for w in wall], "episodic_return": rets, **(curve or {})}
    s = {"wall_s": wall[-1], "sps": 1.0, "cost": {"total_usd": cost}, **(summary or {})}
    return {"seed": seed, **analysis.outcome(c, s, {"minutes": minutes}, TARGETS, minutes)}


def test_entropy_at_a_target_is_the_policys_when_the_return_first_reached_it() -> None:
    curve = {"wall_s": [10.0, 20.0, 30.0], "env_steps": [1e3, 2e3, 3e3],
             "cost_usd": [0.1, 0.2, 0.3], "episodic_return": [50.0, 120.0, 150.0],
             "entropy": [float("nan"), 2.5, 2.0]}
    assert analysis.entropy_at(curve, 100) == 2.5
    assert analysis.entropy_at(curve, 40) is None  # reached before the first update: no entropy
    assert analysis.entropy_at(curve, 200) is None  # never reached
    assert analysis.entropy_at({**curve, "entropy": []}, 100) is None  # a run without the column


def test_reward_per_step_at_a_target_is_return_over_episode_length_when_first_reached() -> None:
    curve = {"wall_s": [10.0, 20.0, 30.0], "env_steps": [1e3, 2e3, 3e3],
             "cost_usd": [0.1, 0.2, 0.3], "episodic_return": [50.0, 120.0, 150.0],
             "episodic_length": [25.0, 40.0, 60.0]}
    assert analysis.reward_per_step_at(curve, 100) == 3.0  # 120 / 40, the first row past 100
    assert analysis.reward_per_step_at(curve, 200) is None  # never reached
    assert analysis.reward_per_step_at({**curve, "episodic_length": [0.0] * 3}, 100) is None
    assert analysis.reward_per_step_at({k: v for k, v in curve.items()
                                        if k != "episodic_length"}, 100) is None


def test_time_to_target_return_at_a_budget_and_the_key_points_of_a_curve() -> None:
    curve = {"wall_s": [10.0, 20.0, 30.0], "env_steps": [100_000.0, 200_000.0, 300_000.0],
             "cost_usd": [0.1, 0.2, 0.3], "episodic_return": [50.0, 150.0, 120.0]}
    assert analysis.time_to(curve, 100) == (20.0, 0.2)
    assert analysis.time_to(curve, 200) is None
    assert analysis.return_at(curve, 12) == 50.0
    assert analysis.return_at(curve, 33) == 120.0  # the last row lands a little after a budget
    assert analysis.return_at(curve, 60) is None  # the run had ended: no value, not its last one
    assert analysis.return_at_steps(curve, 250_000) == 150.0
    assert analysis.return_at_steps(curve, 500_000) is None  # the run stopped short of them
    assert analysis.budget_points(3, 10) == [1, 2, 3, 5, 10]
    assert analysis.budget_points(2, 2) == [1, 2]
    points = analysis.key_points(curve, [100, 200], 0.5)
    assert points["to_target"] == {"100": {
        "wall_s": 20.0, "env_steps": 200_000.0, "usd": 0.2, "usd_dedicated": 0.2,
        "entropy": None, "reward_per_step": None}, "200": None}
    assert points["return_at_min"] == {"0.5": 120.0}
    assert points["return_at_steps"] == {"100000": 50.0, "200000": 150.0}
    assert points["best_return"] == 150.0 and points["last"]["env_steps"] == 300_000.0


def test_censored_speedup_bounds_a_baseline_that_never_reached_the_target() -> None:
    runs_a = [run(1, [30.0, 60.0], [900.0, 2100.0], 0.002)]
    runs_b = [run(1, [300.0, 600.0], [1100.0, 1200.0], 0.014, minutes=10)]
    a, b = analysis.stats(runs_a, 3, [1000, 2000]), analysis.stats(runs_b, 3, [1000, 2000])
    assert analysis.speedup(a, b, [1000, 2000])[:2] == (1000, 300.0 / 60.0)
    tgt, ratio, usd, minutes = analysis.censored_speedup(a, b, [1000, 2000], runs_b, 3)
    assert (tgt, ratio, minutes) == (2000, 10.0, 10) and abs(usd - 0.002 / 0.014) < 1e-12
    # nothing to bound when the baseline got there in every seed
    assert analysis.censored_speedup(b, b, [1000], runs_b, 3) is None
    # one baseline seed reached 2000 at 400 s, one never did (its 600 s count): mean >= 500 s
    runs_b2 = runs_b + [run(2, [300.0, 400.0], [1100.0, 2000.0], 0.014, minutes=10)]
    b2 = analysis.stats(runs_b2, 3, [1000, 2000])
    tgt, ratio, _, _ = analysis.censored_speedup(a, b2, [1000, 2000], runs_b2, 3)
    assert (tgt, ratio) == (2000, 500.0 / 60.0)


def test_a_missed_target_is_censored_at_the_budgets_end_not_at_a_slow_shutdown() -> None:
    # 3-minute budget; the process lingered to 210 s (a sampler that was slow to stop)
    slow = run(1, [60.0, 180.0, 210.0], [900.0, 1100.0, 1100.0], 0.021, minutes=3)
    assert analysis.censored_at(slow) == (180.0, pytest.approx(0.018))
    wall, usd, _, reached = analysis.seed_outcome(slow, 2000)
    assert (wall, reached) == (180.0, False) and usd == pytest.approx(0.018)
    # a clock that started 7 s after the process: its budget ends at 187 s
    late = {"facts": {"wall_s": 195.0, "usd": 0.0195, "minutes": 3, "clock_offset_s": 7.0}}
    assert analysis.censored_at(late)[0] == 187.0
    # a run that ended inside its budget counts all of it
    short = run(3, [60.0, 150.0], [900.0, 1100.0], 0.01, minutes=3)
    assert analysis.censored_at(short) == (150.0, 0.01)


def test_bootstrap_intervals_bracket_the_estimate_and_are_reproducible() -> None:
    lo, hi = analysis.bootstrap_ratio_ci([100.0, 120.0, 80.0], [50.0, 60.0, 40.0])
    assert lo <= 2.0 <= hi
    assert analysis.bootstrap_ratio_ci([1.0], [1.0]) is None  # one seed: no interval
    # seeds with no spread: the interval is the ratio itself, and it is reproducible
    assert analysis.bootstrap_ratio_ci([6.0, 6.0], [3.0, 3.0]) == (2.0, 2.0)
    assert analysis.bootstrap_ratio_ci([1.0, 3.0], [2.0, 1.0]) == analysis.bootstrap_ratio_ci(
        [1.0, 3.0], [2.0, 1.0])
    lo, hi = analysis.bootstrap_mean_ci([30.0, 40.0, 50.0, 60.0])
    assert 30.0 < lo < 45.0 < hi < 60.0
    assert analysis.bootstrap_mean_ci([1.0]) is None


def test_report_bounds_the_speedup_from_above_when_stellaris_missed_the_target() -> None:
    """Stellaris reached 2000 in one of two runs, the baseline in both: the report gives an
    upper bound (the miss counts its whole run), not the ratio on a lower target alone."""
    data = {"stellaris": [run(1, [30.0, 60.0, 180.0], [1000.0, 2000.0, 2100.0], 0.018),
                          run(1, [30.0, 180.0], [1000.0, 1500.0], 0.018)],
            "lean": [run(1, [60.0, 100.0, 180.0], [1000.0, 2000.0, 2000.0], 0.006)] * 2}
    text = "\n".join(text_of.env_report("Hopper-v5", 3, data, [1000, 2000]))
    assert "speedup vs lean PPO: 2.0x — on return 1000" in text
    # Stellaris' mean time to 2000 is at least (60 + 180) / 2 = 120 s: speedup <= 100 / 120
    assert "speedup vs lean PPO on return 2000: <= 0.83x" in text
    # Stellaris's sync mode gets its own lines against the baselines outside Stellaris
    data["sync"] = [run(1, [20.0, 50.0, 180.0], [1000.0, 2000.0, 2000.0], 0.012)] * 2
    text = "\n".join(text_of.env_report("Hopper-v5", 3, data, [1000, 2000]))
    assert "sync PPO speedup vs lean PPO: 2.0x;" in text  # 100 s / 50 s on 2000
    assert "sync PPO speedup vs sync PPO" not in text
    assert "speedup vs sync PPO: 0.7x — on return 1000" in text  # Stellaris vs sync: 20 / 30


def test_report_gives_the_dedicated_vcpu_bill_where_the_runtime_measured_the_cpu_wait() -> None:
    """The $ line at dedicated vCPUs reads the dedicated cost column at the target and the wait
    share from the summary; a run without that measurement gets no such line."""
    def one(cost: float, dedicated: float | None, wait_ms: float | None) -> dict[str, Any]:
        functions: dict[str, Any] = {"actor": {"billed_ms": 1000, "usd": cost}}
        curve = {}
        if dedicated is not None:
            curve["cost_usd_dedicated_vcpu"] = [dedicated / 2, dedicated]
            functions["actor"]["cpu_wait_ms"] = wait_ms
        return run(1, [30.0, 60.0], [1000.0, 2000.0], cost, minutes=1, curve=curve,
                   summary={"cost": {"total_usd": cost, "functions": functions}})
    data = {"stellaris": [one(0.010, 0.006, 400.0)] * 2, "lean": [one(0.004, None, None)] * 2}
    text = "\n".join(text_of.env_report("Hopper-v5", 1, data, [1000, 2000]))
    assert "$ vs lean PPO: 2.50x" in text
    assert ("$ vs lean PPO at dedicated vCPUs: 1.50x (95% bootstrap interval 1.50–1.50x) — "
            "Stellaris's functions billed without the 40% of their billed time") in text
    assert data["lean"][0]["facts"]["cpu_wait_frac"] is None
    data["stellaris"] = [one(0.010, None, None)] * 2
    assert "dedicated vCPUs" not in "\n".join(
        text_of.env_report("Hopper-v5", 1, data, [1000, 2000]))


def _run_folder(run_dir: Path, rows: tuple[tuple[float, float], ...],
                summary: dict[str, Any]) -> None:
    """A run folder as the trainer writes it: metrics.csv rows of (wall s, return), $ growing
    with wall time, and summary.json."""
    run_dir.mkdir(parents=True)
    with open(run_dir / "metrics.csv", "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=CSV_COLUMNS)
        w.writeheader()
        for wall, ret in rows:
            w.writerow({"wall_s": wall, "env_steps": 1000, "episodic_return": ret,
                        "cost_usd": wall / 1e4})
    (run_dir / "summary.json").write_text(json.dumps(summary))


def test_report_says_what_the_always_on_parts_used_against_their_instances(
        tmp_path: Path) -> None:
    """A run folder with a footprint, as the trainer writes it: the report's footprint line."""
    footprint = {"orchestrator": {"instance": "t3.micro", "baseline_vcpu": 0.2, "memory_mib": 824,
                                  "vcpu_mean": 0.02, "peak_rss_mib": 380.0, "fits": True},
                 "redis": {"instance": "cache.t4g.micro", "baseline_vcpu": 0.2, "memory_mib": 384,
                           "baseline_mbps": 64, "vcpu_mean": 0.011, "peak_memory_mib": 2.6,
                           "net_mbps_mean": 28.8, "fits": True}, "fits": True}
    root = compare.budget_dir(tmp_path / "out", "Hopper-v5", 5)
    _run_folder(root / "stellaris" / "seed1", ((50.0, 1000.0), (100.0, 2000.0)),
                {"wall_s": 100.0, "sps": 100.0, "mean_return": 2000.0, "footprint": footprint,
                 "cost": {"total_usd": 0.01}})
    data = analysis.collect(root, [2000], 5)
    text = "\n".join(text_of.env_report("Hopper-v5", 5, data, [2000]))
    assert ("orchestrator (priced as a t3.micro, baseline 0.2 vCPU, 824 MiB): 0.020 vCPU mean, "
            "peak RSS 380 MiB") in text
    assert "28.8 Mbit/s mean. Fit their priced instances in 1 of 1 runs." in text


def test_a_run_folder_is_moved_to_its_process_start_once(tmp_path: Path) -> None:
    """compare.py's own report (run folders) and the results page (records) agree: a clock
    that started 7 s after its process moves every time by 7 s, not twice."""
    root = compare.budget_dir(tmp_path / "out", "Hopper-v5", 3)
    run_dir = root / "stellaris" / "seed1"
    _run_folder(run_dir, ((50.0, 1000.0), (100.0, 2000.0), (180.0, 2100.0)),
                {"wall_s": 180.0, "sps": 100.0, "mean_return": 2100.0,
                 "cost": {"total_usd": 0.018}})
    (run_dir / "bench.json").write_text(json.dumps(
        {"variant": "stellaris", "system": "stellaris", "minutes": 3, "clock_offset_s": 7.0}))
    (found,) = analysis.collect(root, [2000], 3)["stellaris"]
    assert found["points"]["to_target"]["2000"]["wall_s"] == 107.0
    assert found["facts"]["wall_s"] == 187.0 and found["curve"]["wall_s"][0] == 57.0


def test_per_seed_table_pairs_runs_by_seed_and_bounds_the_ratios_of_a_miss() -> None:
    """The per-seed table: each system's time, $ and env steps to the top target on each seed,
    Stellaris's ratios against each baseline, a miss's ratios as bounds, and the median seed."""
    def one(seed: int, wall: list[float], rets: list[float], cost: float) -> dict[str, Any]:
        return run(seed, wall, rets, cost, minutes=5,
                   steps=[100_000.0 * (i + 1) for i in range(len(wall))])
    data = {"stellaris": [one(1, [30.0, 60.0], [1000.0, 2000.0], 0.002),
                          one(2, [150.0, 300.0], [1000.0, 1500.0], 0.018)],
            "rllib": [one(1, [120.0, 240.0], [1000.0, 2000.0], 0.005),
                      one(2, [100.0, 200.0], [1000.0, 2000.0], 0.004)],
            "lean": [one(1, [45.0, 90.0], [1000.0, 2000.0], 0.001)]}
    lines = text_of.per_seed_table(data, ["stellaris", "rllib", "lean"], 2000)
    rows = {line.split(" | ")[0].strip("| "): line for line in lines if line.startswith("| ")}
    assert "60 s, $0.00200 (200k)" in rows["1"] and rows["1"].endswith("| 4.00x / 0.40x | 1.50x / 2.00x |")
    # seed 2: Stellaris missed (its whole 300 s and $0.018 count); the lean PPO did not run it
    assert "missed (best 1,500; 200k): 300 s, $0.01800" in rows["2"]
    assert rows["2"].endswith("| <= 0.67x / >= 4.50x | - |")
    assert rows["median seed"].endswith("| 2.33x / 2.45x | 1.50x / 2.00x |")
    # an ablation of Stellaris gets its own ratio columns and its own summary lines
    data["stellaris[hyper.target_kl=0.02]"] = [one(1, [20.0, 40.0], [1000.0, 2000.0], 0.001)]
    order = ["stellaris", "rllib", "lean", "stellaris[hyper.target_kl=0.02]"]
    rows = {line.split(" | ")[0].strip("| "): line
            for line in text_of.per_seed_table(data, order, 2000) if line.startswith("| ")}
    assert rows["1"].endswith("| 4.00x / 0.40x | 1.50x / 2.00x | 6.00x / 0.20x | 2.25x / 1.00x |")
    assert rows["2"].endswith("| <= 0.67x / >= 4.50x | - | - | - |")
    text = "\n".join(text_of.env_report("Hopper-v5", 5, data, [1000, 2000]))
    assert "Per seed, to 2000" in text
    # (its mean over its one seed against RLlib's over both: 220 s / 40 s)
    assert "stellaris[hyper.target_kl=0.02] speedup vs RLlib: 5.5x; $ vs RLlib: 0.22x" in text


def test_headline_rows_give_each_systems_values_to_the_target_and_its_path() -> None:
    data = {"stellaris": [run(s, [30.0 + s, 60.0], [2000.0, 2100.0], 0.002) for s in (1, 2)],
            "lean": [run(1, [50.0, 60.0], [1000.0, 1200.0], 0.001)]}
    for r in data["stellaris"]:
        r.update(path="one publishing learner (pipelined PPO)", cores=2)
    rows = {r["system"]: r for r in text_of.headline_rows(data, 3, 2000)}
    assert rows["Stellaris (async)"]["time_s"] == {"values": [31.0, 32.0], "reached": 2, "n": 2}
    assert rows["Stellaris (async)"]["path"] == "one publishing learner (pipelined PPO)"
    assert rows["lean PPO"]["time_s"]["reached"] == 0 and rows["lean PPO"]["path"] is None
    assert rows["lean PPO"]["return_at_min"]["1"] == {"values": [1200.0]}


def test_a_shared_hyper_change_names_every_systems_variant_so_records_never_pool() -> None:
    assert compare.variant_name("stellaris", "") == "stellaris"
    assert compare.variant_name("lean2", "is=none") == "lean2"  # --set tags are Stellaris'
    assert (compare.variant_name("stellaris", "is=none", ["ent_coef=0.01"])
            == "stellaris[is=none,hyper.ent_coef=0.01]")
    assert compare.variant_name("lean2", "", ["ent_coef=0.01"]) == "lean2[hyper.ent_coef=0.01]"
