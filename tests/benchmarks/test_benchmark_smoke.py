"""compare.py's machinery end to end on CartPole-v1 with a ~8 s budget: lean PPO + Stellaris
(inline backend). Checks run folders, CSV columns, figures, and that only our RESULTS.md
section is rewritten."""

from __future__ import annotations

import argparse
import csv
import json
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from benchmarks import compare  # noqa: E402
from orchestrator.metrics import CSV_COLUMNS  # noqa: E402

OTHER = "# Benchmark results\n\n## Someone else's section\n\nkeep me\n"


@pytest.mark.timeout(120)
def test_compare_runs_two_systems_and_rewrites_only_its_section(tmp_path: Path) -> None:
    results = tmp_path / "RESULTS.md"
    results.write_text(OTHER + f"\n{compare.SECTION}\n\nold text\n\n## Later section\n\nkeep too\n")
    out = tmp_path / "out"
    rc = compare.main(["--envs", "CartPole-v1", "--minutes", "0.13", "--seeds", "1",
                       "--systems", "lean", "stellaris", "--backend", "inline",
                       "--out", str(out), "--results", str(results)])
    assert rc == 0
    root = out / "CartPole-v1-0.13min"
    for variant in ("lean", "stellaris_backend=inline_"):
        run = root / variant / "seed1"
        bench = json.loads((run / "bench.json").read_text())
        assert bench["rc"] == 0, (run / "stdout.log").read_text()[-2000:]
        with open(run / "metrics.csv") as fh:
            rows = list(csv.DictReader(fh))
        assert list(rows[0]) == CSV_COLUMNS
        assert int(rows[-1]["env_steps"]) > 0
        summary = json.loads((run / "summary.json").read_text())
        assert summary["cost"]["total_usd"] > 0
    stell = json.loads((root / "stellaris_backend=inline_" / "seed1" / "summary.json").read_text())
    # one learner publishes its updates (the default): data staleness, no gradients
    assert stell["staleness_hist"]["traj"] and "traj" in stell["staleness_mean"]
    figs = {p.name for p in (root / "figures").glob("*.png")}
    assert {"CartPole-v1_return_vs_wall.png", "CartPole-v1_return_vs_env.png",
            "CartPole-v1_return_vs_cost.png", "CartPole-v1_cost.png",
            "CartPole-v1_staleness.png"} <= figs
    text = results.read_text()
    assert text.startswith(OTHER)
    assert "keep too" in text and "old text" not in text
    assert text.count(compare.SECTION) == 1
    assert "| lean PPO |" in text
    assert "speedup vs lean PPO:" in text
    assert "| system | entropy at" in text
    assert "| system | reward/step at" in text


def test_entropy_at_a_target_is_the_policys_when_the_return_first_reached_it() -> None:
    curve = {"wall_s": [10.0, 20.0, 30.0], "env_steps": [1e3, 2e3, 3e3],
             "cost_usd": [0.1, 0.2, 0.3], "episodic_return": [50.0, 120.0, 150.0],
             "entropy": [float("nan"), 2.5, 2.0]}
    assert compare.entropy_at(curve, 100) == 2.5
    assert compare.entropy_at(curve, 40) is None  # reached before the first update: no entropy
    assert compare.entropy_at(curve, 200) is None  # never reached
    assert compare.entropy_at({**curve, "entropy": []}, 100) is None  # a run without the column


def test_reward_per_step_at_a_target_is_return_over_episode_length_when_first_reached() -> None:
    curve = {"wall_s": [10.0, 20.0, 30.0], "env_steps": [1e3, 2e3, 3e3],
             "cost_usd": [0.1, 0.2, 0.3], "episodic_return": [50.0, 120.0, 150.0],
             "episodic_length": [25.0, 40.0, 60.0]}
    assert compare.reward_per_step_at(curve, 100) == 3.0  # 120 / 40, the first row past 100
    assert compare.reward_per_step_at(curve, 200) is None  # never reached
    assert compare.reward_per_step_at({**curve, "episodic_length": [0.0] * 3}, 100) is None
    assert compare.reward_per_step_at({k: v for k, v in curve.items()
                                       if k != "episodic_length"}, 100) is None


def test_hand_written_notes_survive_regeneration(tmp_path: Path) -> None:
    results = tmp_path / "RESULTS.md"
    results.write_text(OTHER + f"\n{compare.SECTION}\n\nold\n\n{compare.KEEP_MARKER}\n\nnotes\n"
                       "\n## Later\n\nlater\n")
    compare.write_section(results, ["new body"], [])
    text = results.read_text()
    assert "old" not in text.replace("older", "")
    assert text.index("new body") < text.index("notes") < text.index("## Later")


def test_section_is_appended_when_missing(tmp_path: Path) -> None:
    results = tmp_path / "RESULTS.md"
    results.write_text(OTHER)
    compare.write_section(results, ["body"], [])
    text = results.read_text()
    assert text.startswith(OTHER) and text.rstrip().endswith("body")


def test_time_to_target_and_return_at() -> None:
    curve = {"wall_s": [10.0, 20.0, 30.0], "env_steps": [1.0, 2.0, 3.0],
             "cost_usd": [0.1, 0.2, 0.3], "episodic_return": [50.0, 150.0, 120.0]}
    assert compare.time_to(curve, 100) == (20.0, 0.2)
    assert compare.time_to(curve, 200) is None
    assert compare.return_at(curve, 12) == 50.0
    assert compare.return_at(curve, 33) == 120.0  # the last row lands a little after a budget
    assert compare.return_at(curve, 60) is None  # the run had ended: no value, not its last one
    assert compare.budget_points(3, 10) == [1, 2, 3, 5, 10] and compare.budget_points(2, 2) == [1, 2]


def test_censored_speedup_bounds_a_baseline_that_never_reached_the_target() -> None:
    fast = {"wall_s": [30.0, 60.0], "env_steps": [1.0, 2.0], "cost_usd": [0.001, 0.002],
            "episodic_return": [900.0, 2100.0]}
    slow = {"wall_s": [300.0, 600.0], "env_steps": [1.0, 2.0], "cost_usd": [0.007, 0.014],
            "episodic_return": [1100.0, 1200.0]}
    runs_a = [{"curve": fast, "summary": {"wall_s": 60.0}, "bench": {}}]
    runs_b = [{"curve": slow, "summary": {"wall_s": 600.0, "cost": {"total_usd": 0.014}},
               "bench": {"minutes": 10}}]
    a, b = compare.stats(runs_a, 3, [1000, 2000]), compare.stats(runs_b, 3, [1000, 2000])
    assert compare.speedup(a, b, [1000, 2000])[:2] == (1000, 300.0 / 60.0)
    tgt, ratio, usd, minutes = compare.censored_speedup(a, b, [1000, 2000], runs_b, 3)
    assert (tgt, ratio, minutes) == (2000, 10.0, 10) and abs(usd - 0.002 / 0.014) < 1e-12
    # nothing to bound when the baseline got there in every seed
    assert compare.censored_speedup(b, b, [1000], runs_b, 3) is None
    # one baseline seed reached 2000 at 400 s, one never did (its 600 s count): mean >= 500 s
    reached = {**slow, "episodic_return": [1100.0, 2000.0], "wall_s": [300.0, 400.0]}
    runs_b2 = runs_b + [{"curve": reached, "summary": {"wall_s": 600.0}, "bench": {"minutes": 10}}]
    b2 = compare.stats(runs_b2, 3, [1000, 2000])
    tgt, ratio, _, _ = compare.censored_speedup(a, b2, [1000, 2000], runs_b2, 3)
    assert (tgt, ratio) == (2000, 500.0 / 60.0)


def test_speedup_interval_brackets_the_ratio_and_steps_to_target_reads_env_steps() -> None:
    curve = {"wall_s": [10.0, 20.0], "env_steps": [1000.0, 5000.0], "cost_usd": [0.1, 0.2],
             "episodic_return": [50.0, 120.0]}
    assert compare.steps_to(curve, 100) == 5000.0 and compare.steps_to(curve, 200) is None
    lo, hi = compare.bootstrap_ratio_ci([100.0, 120.0, 80.0], [50.0, 60.0, 40.0])
    assert lo <= 2.0 <= hi
    assert compare.bootstrap_ratio_ci([1.0], [1.0]) is None  # one seed: no interval
    # seeds with no spread: the interval is the ratio itself, and it is reproducible
    assert compare.bootstrap_ratio_ci([6.0, 6.0], [3.0, 3.0]) == (2.0, 2.0)
    assert compare.bootstrap_ratio_ci([1.0, 3.0], [2.0, 1.0]) == compare.bootstrap_ratio_ci(
        [1.0, 3.0], [2.0, 1.0])


def test_report_bounds_the_speedup_from_above_when_stellaris_missed_the_target(tmp_path: Path) -> None:
    """Stellaris reached 2000 in one of two runs, the baseline in both: the report gives an
    upper bound (the miss counts its whole run), not the ratio on a lower target alone."""
    def run(wall: list[float], rets: list[float], cost: float, minutes: float) -> dict:
        curve = {"wall_s": wall, "env_steps": [1.0] * len(wall),
                 "cost_usd": [cost * w / wall[-1] for w in wall], "episodic_return": rets}
        return {"seed": 1, "curve": curve, "bench": {"minutes": minutes},
                "summary": {"wall_s": wall[-1], "cost": {"total_usd": cost}, "sps": 1.0}}
    data = {"stellaris": [run([30.0, 60.0, 180.0], [1000.0, 2000.0, 2100.0], 0.018, 3),
                          run([30.0, 180.0], [1000.0, 1500.0], 0.018, 3)],
            "lean": [run([60.0, 100.0, 180.0], [1000.0, 2000.0, 2000.0], 0.006, 3)] * 2}
    text = "\n".join(compare.env_report("Hopper-v5", 3, data, [1000, 2000], tmp_path))
    assert "speedup vs lean PPO: 2.0x — on return 1000" in text
    # Stellaris' mean time to 2000 is at least (60 + 180) / 2 = 120 s: speedup <= 100 / 120
    assert "speedup vs lean PPO on return 2000: <= 0.83x" in text
    # Stellaris's sync mode gets its own lines against the baselines outside Stellaris
    data["sync"] = [run([20.0, 50.0, 180.0], [1000.0, 2000.0, 2000.0], 0.012, 3)] * 2
    text = "\n".join(compare.env_report("Hopper-v5", 3, data, [1000, 2000], tmp_path))
    assert "sync PPO speedup vs lean PPO: 2.0x;" in text  # 100 s / 50 s on 2000
    assert "sync PPO speedup vs sync PPO" not in text
    assert "speedup vs sync PPO: 0.7x — on return 1000" in text  # Stellaris vs sync: 20 / 30


def test_anneal_lr_reaches_every_system_each_with_its_own_schedule(tmp_path: Path) -> None:
    from benchmarks import rllib_ppo
    from functions.messages import PPOHyper

    args = argparse.Namespace(no_compile=False, anneal_lr=True, rllib_sps=1705.0, backend="local",
                              actors=None, learners=None, is_correction=None,
                              no_staleness_weights=False, no_bound_decay=False,
                              buffer_max=None, set=[])
    cmds = {s: compare.command(s, "Hopper-v5", 1, 10.0, tmp_path / s, args)
            for s in ("stellaris", "sync", "lean", "rllib")}
    for s in ("stellaris", "sync"):
        assert "hyper.anneal_lr=true" in cmds[s], cmds[s]
    assert "anneal_lr=true" in cmds["lean"]
    i = cmds["rllib"].index("--anneal-lr-steps")  # RLlib's schedule counts env steps
    assert cmds["rllib"][i + 1] == str(10 * 60 * 1705)
    cfg = rllib_ppo.build_config("Hopper-v5", 1, PPOHyper(), anneal_lr_steps=1000)
    assert cfg.lr == [[0, 3e-4], [1000, pytest.approx(3e-7)]]
    assert rllib_ppo.build_config("Hopper-v5", 1, PPOHyper()).lr == 3e-4


def test_report_gives_the_dedicated_vcpu_bill_where_the_runtime_measured_the_cpu_wait(
        tmp_path: Path) -> None:
    """The $ line at dedicated vCPUs reads the dedicated cost column at the target and the wait
    share from the summary; a run without that measurement gets no such line."""
    def run(cost: float, dedicated: float | None, wait_ms: float | None) -> dict:
        curve = {"wall_s": [30.0, 60.0], "env_steps": [1.0, 2.0], "cost_usd": [cost / 2, cost],
                 "episodic_return": [1000.0, 2000.0]}
        functions = {"actor": {"billed_ms": 1000, "usd": cost}}
        if dedicated is not None:
            curve["cost_usd_dedicated_vcpu"] = [dedicated / 2, dedicated]
            functions["actor"]["cpu_wait_ms"] = wait_ms
        return {"seed": 1, "curve": curve, "bench": {"minutes": 1}, "summary": {
            "wall_s": 60.0, "sps": 1.0, "cost": {"total_usd": cost, "functions": functions}}}
    data = {"stellaris": [run(0.010, 0.006, 400.0)] * 2, "lean": [run(0.004, None, None)] * 2}
    text = "\n".join(compare.env_report("Hopper-v5", 1, data, [1000, 2000], tmp_path))
    assert "$ vs lean PPO: 2.50x" in text
    assert ("$ vs lean PPO at dedicated vCPUs: 1.50x (95% bootstrap interval 1.50–1.50x) — "
            "Stellaris's functions billed without the 40% of their billed time") in text
    assert compare.cpu_wait_fraction(data["lean"][0]["summary"]) is None
    data["stellaris"] = [run(0.010, None, None)] * 2
    assert "dedicated vCPUs" not in "\n".join(
        compare.env_report("Hopper-v5", 1, data, [1000, 2000], tmp_path))


def _write_run(run_dir: Path, walls: list[float], rets: list[float], usd: float) -> None:
    """A finished run's folder as a system writes it: metrics.csv rows, summary.json."""
    run_dir.mkdir(parents=True)
    with open(run_dir / "metrics.csv", "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=CSV_COLUMNS)
        w.writeheader()
        for i, (wall, ret) in enumerate(zip(walls, rets, strict=True)):
            w.writerow({"wall_s": wall, "env_steps": 1000 * (i + 1), "episodic_return": ret,
                        "cost_usd": usd * wall / walls[-1]})
    (run_dir / "summary.json").write_text(json.dumps(
        {"wall_s": walls[-1], "sps": 100.0, "mean_return": rets[-1],
         "cost": {"total_usd": usd}}))


def test_pool_reports_the_runs_of_several_out_folders_together(tmp_path: Path) -> None:
    """--pool adds earlier sessions' run folders to the report, one list per system; the same
    seed in two folders is two runs (an async run is not reproducible from its seed)."""
    old, new = tmp_path / "s16", tmp_path / "s17"
    for out, seed, t_stell in ((old, 1, 50.0), (new, 1, 150.0), (new, 2, 100.0)):
        root = compare.budget_dir(out, "Hopper-v5", 5)
        _write_run(root / "stellaris" / f"seed{seed}", [t_stell, 300.0], [2000.0, 2100.0], 0.02)
        _write_run(root / "lean" / f"seed{seed}", [200.0, 300.0], [2000.0, 2000.0], 0.007)
    results = tmp_path / "RESULTS.md"
    rc = compare.main(["--envs", "Hopper-v5", "--minutes", "5", "--report-only",
                       "--out", str(new), "--pool", str(old), "--results", str(results)])
    assert rc == 0
    text = results.read_text()
    assert "Seeds per system: Stellaris (async) 3, lean PPO 3." in text
    assert "speedup vs lean PPO: 2.0x;" in text  # 200 s / mean(50, 150, 100) s
    assert "pooled with those under `--pool`" in text
    assert (compare.budget_dir(new, "Hopper-v5", 5) / "figures" / "Hopper-v5_return_vs_wall.png"
            ).exists()
    alone = compare.collect_pooled([compare.budget_dir(new, "Hopper-v5", 5)])
    assert sorted(r["seed"] for r in alone["stellaris"]) == [1, 2]


def test_shared_hyper_reaches_every_system_and_gets_its_own_out_folder(tmp_path: Path) -> None:
    from benchmarks import rllib_ppo

    args = argparse.Namespace(no_compile=False, anneal_lr=False, rllib_sps=1705.0, backend="local",
                              actors=None, learners=None, is_correction=None,
                              no_staleness_weights=False, no_bound_decay=False,
                              buffer_max=None, set=[], hyper=["ent_coef=0.005"])
    cmds = {s: compare.command(s, "Hopper-v5", 1, 5.0, tmp_path / s, args)
            for s in ("stellaris", "sync", "lean", "rllib")}
    for s in ("stellaris", "sync"):
        i = cmds[s].index("hyper.ent_coef=0.005")
        assert cmds[s][i - 1] == "--set", cmds[s]
    for s in ("lean", "rllib"):
        i = cmds[s].index("ent_coef=0.005")
        assert cmds[s][i - 1] == "--hyper", cmds[s]
    assert compare.hyper_suffix(["ent_coef=0.005"]) == "-ent_coef=0.005"
    # RLlib takes the value it is given, and refuses a field it has no counterpart for
    parser = argparse.ArgumentParser()
    assert rllib_ppo._hyper(parser, ["ent_coef=0.005"]).ent_coef == 0.005
    cfg = rllib_ppo.build_config("Hopper-v5", 1, rllib_ppo._hyper(parser, ["ent_coef=0.005"]))
    assert cfg.entropy_coeff == 0.005
    with pytest.raises(SystemExit):
        rllib_ppo._hyper(parser, ["clip_vloss=false"])
    # RLlib's PPO runs every epoch: its recorded hyper-parameters say so
    assert rllib_ppo._hyper(parser, []).target_kl is None
    with pytest.raises(SystemExit):
        rllib_ppo._hyper(parser, ["target_kl=0.01"])


def test_stop_at_return_reaches_every_system_and_ends_the_lean_run(tmp_path: Path) -> None:
    from benchmarks import lean_ppo

    args = argparse.Namespace(no_compile=False, anneal_lr=False, rllib_sps=1705.0, backend="local",
                              actors=None, learners=None, is_correction=None,
                              no_staleness_weights=False, no_bound_decay=False,
                              buffer_max=None, set=[], hyper=[], stop_at_return=2000.0)
    for s in ("stellaris", "sync", "lean", "rllib"):
        cmd = compare.command(s, "Hopper-v5", 1, 5.0, tmp_path / s, args)
        assert cmd[cmd.index("--stop-at-return") + 1] == "2000", cmd
    # CartPole's first episodes return ~20: a stop at 10 ends the run on its first logged row,
    # long before its step budget, and that row shows the target reached
    s = lean_ppo.train("CartPole-v1", 1, tmp_path / "lean", total_steps=1_000_000, n_envs=2,
                       rollout_steps=64, log_interval_s=0.0, compile=False, stop_at_return=10.0)
    assert s["target_reached"] and s["env_steps"] <= 4 * 128
    with open(tmp_path / "lean" / "metrics.csv") as fh:
        rows = list(csv.DictReader(fh))
    assert float(rows[0]["episodic_return"]) >= 10.0


def test_report_gives_the_bill_at_the_unsized_always_on_prices_and_the_footprint(
        tmp_path: Path) -> None:
    """Run folders as the trainer writes them at the sized prices: the report reprices their
    always-on parts as sessions 1-21 did (t3.medium + cache.t4g.small) from each row's wall
    time and orchestrator CPU, and says what those parts used against their instances."""
    from orchestrator.cost import UNSIZED_FIXED_PRICES, CostMeter, PriceTable

    prices = PriceTable()
    root = compare.budget_dir(tmp_path / "out", "Hopper-v5", 5)
    footprint = {"orchestrator": {"instance": "t3.micro", "baseline_vcpu": 0.2, "memory_mib": 824,
                                  "vcpu_mean": 0.02, "peak_rss_mib": 380.0, "fits": True},
                 "redis": {"instance": "cache.t4g.micro", "baseline_vcpu": 0.2, "memory_mib": 384,
                           "baseline_mbps": 64, "vcpu_mean": 0.011, "peak_memory_mib": 2.6,
                           "net_mbps_mean": 28.8, "fits": True}, "fits": True}
    walls = [50.0, 100.0]
    meter = CostMeter(prices)
    meter.invocation("actor", 150_000.0, 1769)  # 1.5 functions busy for 100 s
    run_dir = root / "stellaris" / "seed1"
    run_dir.mkdir(parents=True)
    with open(run_dir / "metrics.csv", "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=CSV_COLUMNS)
        w.writeheader()
        for wall, ret in zip(walls, [1000.0, 2000.0], strict=True):
            w.writerow({"wall_s": wall, "env_steps": 1000, "episodic_return": ret,
                        "orchestrator_cpu_s": wall * 0.02,
                        "cost_usd": meter.total(wall, orchestrator_cpu_s=wall * 0.02)})
    (run_dir / "summary.json").write_text(json.dumps(
        {"wall_s": 100.0, "sps": 100.0, "mean_return": 2000.0, "footprint": footprint,
         "cost": meter.report(100.0, 2.0)}))
    _write_run(root / "rllib" / "seed1", [400.0, 500.0], [2000.0, 2000.0], 0.012)
    results = tmp_path / "RESULTS.md"
    assert compare.main(["--envs", "Hopper-v5", "--minutes", "5", "--report-only",
                         "--out", str(tmp_path / "out"), "--results", str(results)]) == 0
    text = results.read_text()
    sized = meter.total(100.0, orchestrator_cpu_s=2.0)
    unsized = CostMeter(PriceTable.from_overrides(UNSIZED_FIXED_PRICES),
                        components=meter.components).total(100.0, orchestrator_cpu_s=2.0)
    rllib = 0.012 * 400 / 500
    assert f"$ vs RLlib: {sized / rllib:.2f}x" in text
    assert (f"$ vs RLlib at the unsized always-on prices (a t3.medium orchestrator and a "
            f"cache.t4g.small Redis, as sessions 1–21): {unsized / rllib:.2f}x") in text
    assert unsized > sized
    assert ("orchestrator (priced as a t3.micro, baseline 0.2 vCPU, 824 MiB): 0.020 vCPU mean, "
            "peak RSS 380 MiB") in text
    assert "28.8 Mbit/s mean. Fit their priced instances in 1 of 1 runs." in text


def test_per_seed_table_pairs_runs_by_seed_and_bounds_the_ratios_of_a_miss(tmp_path: Path) -> None:
    """The generated per-seed table: each system's time, $ and env steps to the top target on
    each seed, Stellaris's ratios against each baseline, a miss's ratios as bounds, and the
    median seed."""
    def run(seed: int, wall: list[float], rets: list[float], cost: float) -> dict:
        curve = {"wall_s": wall, "env_steps": [100_000.0 * (i + 1) for i in range(len(wall))],
                 "cost_usd": [cost * w / wall[-1] for w in wall], "episodic_return": rets}
        return {"seed": seed, "curve": curve, "bench": {"minutes": 5},
                "summary": {"wall_s": wall[-1], "cost": {"total_usd": cost}, "sps": 1.0}}
    data = {"stellaris": [run(1, [30.0, 60.0], [1000.0, 2000.0], 0.002),
                          run(2, [150.0, 300.0], [1000.0, 1500.0], 0.018)],
            "rllib": [run(1, [120.0, 240.0], [1000.0, 2000.0], 0.005),
                      run(2, [100.0, 200.0], [1000.0, 2000.0], 0.004)],
            "lean": [run(1, [45.0, 90.0], [1000.0, 2000.0], 0.001)]}
    lines = compare.per_seed_table(data, ["stellaris", "rllib", "lean"], 2000)
    rows = {line.split(" | ")[0].strip("| "): line for line in lines if line.startswith("| ")}
    assert "60 s, $0.00200 (200k)" in rows["1"] and rows["1"].endswith("| 4.00x / 0.40x | 1.50x / 2.00x |")
    # seed 2: Stellaris missed (its whole 300 s and $0.018 count); the lean PPO did not run it
    assert "missed (best 1,500; 200k): 300 s, $0.01800" in rows["2"]
    assert rows["2"].endswith("| <= 0.67x / >= 4.50x | - |")
    assert rows["median seed"].endswith("| 2.33x / 2.45x | 1.50x / 2.00x |")
    # an ablation of Stellaris gets its own ratio columns and its own summary lines
    data["stellaris[hyper.target_kl=0.02]"] = [run(1, [20.0, 40.0], [1000.0, 2000.0], 0.001)]
    order = ["stellaris", "rllib", "lean", "stellaris[hyper.target_kl=0.02]"]
    rows = {line.split(" | ")[0].strip("| "): line
            for line in compare.per_seed_table(data, order, 2000) if line.startswith("| ")}
    assert rows["1"].endswith("| 4.00x / 0.40x | 1.50x / 2.00x | 6.00x / 0.20x | 2.25x / 1.00x |")
    assert rows["2"].endswith("| <= 0.67x / >= 4.50x | - | - | - |")
    text = "\n".join(compare.env_report("Hopper-v5", 5, data, [1000, 2000], tmp_path))
    assert "Per seed, to 2000" in text
    # (its mean over its one seed against RLlib's over both: 220 s / 40 s)
    assert "stellaris[hyper.target_kl=0.02] speedup vs RLlib: 5.5x; $ vs RLlib: 0.22x" in text


def test_label_by_hyper_pools_runs_by_what_they_ran_with_not_what_named_them(tmp_path: Path) -> None:
    """A run made with ``--set hyper.target_kl=0.02`` when that was not the default pools with
    today's default runs; one made under an older default gets named for its difference
    (``hyper.target_kl=null``); RLlib is judged against its own matched baseline; a field a run
    did not record never passes for today's default — unless every run before the field did
    what its default does (``norm_adv_scope``: per minibatch)."""
    from benchmarks import rllib_ppo
    from functions.messages import PPOHyper

    def before_scope(hyper: PPOHyper) -> dict:  # recorded before norm_adv_scope existed
        return {k: v for k, v in hyper.model_dump().items() if k != "norm_adv_scope"}

    old, new = tmp_path / "s24", tmp_path / "s25"
    runs = [  # (out, folder, system, variant of then, seed, hyper it recorded)
        (old, "stellaris", "stellaris", "stellaris", 1, before_scope(PPOHyper(target_kl=None))),
        (old, "stellaris_kl", "stellaris", "stellaris[hyper.target_kl=0.02]", 1,
         before_scope(PPOHyper(target_kl=0.02))),
        (old, "rllib", "rllib", "rllib", 1, before_scope(rllib_ppo.baseline_hyper())),
        (new, "stellaris", "stellaris", "stellaris", 2, PPOHyper().model_dump()),
        (new, "rllib", "rllib", "rllib", 2, rllib_ppo.baseline_hyper().model_dump()),
        (new, "lean", "lean", "lean", 2,
         {k: v for k, v in PPOHyper().model_dump().items() if k != "target_kl"}),
    ]
    for out, folder, system, variant, seed, hyper in runs:
        run_dir = compare.budget_dir(out, "Hopper-v5", 5) / folder / f"seed{seed}"
        _write_run(run_dir, [50.0, 100.0], [1000.0, 2000.0], 0.01)
        (run_dir / "bench.json").write_text(json.dumps({"system": system, "variant": variant}))
        (run_dir / "config.json").write_text(json.dumps({"hyper": hyper}))
    roots = [compare.budget_dir(o, "Hopper-v5", 5) for o in (new, old)]
    as_named = compare.collect_pooled(roots)
    assert sorted(as_named) == ["lean", "rllib", "stellaris", "stellaris[hyper.target_kl=0.02]"]
    data = compare.collect_pooled(roots, by_hyper=True)
    assert PPOHyper().target_kl == 0.02  # the premise: today's default
    assert sorted(data) == ["lean[hyper.target_kl=unrecorded]", "rllib", "stellaris",
                            "stellaris[hyper.target_kl=null]"]
    assert sorted(r["seed"] for r in data["stellaris"]) == [1, 2]
    assert sorted(r["seed"] for r in data["rllib"]) == [1, 2]
    results = tmp_path / "RESULTS.md"
    assert compare.main(["--envs", "Hopper-v5", "--minutes", "5", "--report-only", "--out",
                         str(new), "--pool", str(old), "--label-by-hyper", "--results",
                         str(results)]) == 0
    text = results.read_text()
    assert "(`--label-by-hyper`)" in text
    assert "Stellaris (async) 2, RLlib 2.60 PPO 2" in text
    # an ablation that ran on some of the pooled baseline's seeds says its means are unpaired
    assert "over different seeds (stellaris[hyper.target_kl=null] 1 runs, RLlib 2:" in text


def test_report_gives_a_co_located_redis_runs_bill_also_with_redis_on_its_own_node(
        tmp_path: Path) -> None:
    """A run billed with Redis on the orchestrator's instance (the default since session 28):
    the report also prices it with Redis on a cache.t4g.micro of its own, as before."""
    from orchestrator.cost import CostMeter, PriceTable

    prices = PriceTable()
    root = compare.budget_dir(tmp_path / "out", "Hopper-v5", 5)
    meter = CostMeter(prices, redis_on_orchestrator=True)
    meter.invocation("actor", 150_000.0, 1769)
    run_dir = root / "stellaris" / "seed1"
    run_dir.mkdir(parents=True)
    with open(run_dir / "metrics.csv", "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=CSV_COLUMNS)
        w.writeheader()
        for wall, ret in zip([50.0, 100.0], [1000.0, 2000.0], strict=True):
            w.writerow({"wall_s": wall, "env_steps": 1000, "episodic_return": ret,
                        "orchestrator_cpu_s": wall * 0.02, "redis_cpu_s": wall * 0.01,
                        "cost_usd": meter.total(wall, False, wall * 0.02, wall * 0.01)})
    (run_dir / "summary.json").write_text(json.dumps(
        {"wall_s": 100.0, "sps": 100.0, "mean_return": 2000.0,
         "cost": meter.report(100.0, 2.0, 1.0)}))
    _write_run(root / "rllib" / "seed1", [400.0, 500.0], [2000.0, 2000.0], 0.012)
    results = tmp_path / "RESULTS.md"
    assert compare.main(["--envs", "Hopper-v5", "--minutes", "5", "--report-only",
                         "--out", str(tmp_path / "out"), "--results", str(results)]) == 0
    text = results.read_text()
    colocated = meter.total(100.0, False, 2.0, 1.0)
    own_node = CostMeter(prices, components=meter.components).total(100.0, False, 2.0, 1.0)
    rllib = 0.012 * 400 / 500
    assert own_node - colocated == pytest.approx(100.0 / 3600 * prices.redis_hour_usd)
    assert f"$ vs RLlib: {colocated / rllib:.2f}x" in text
    assert (f"$ vs RLlib with Redis on a cache.t4g.micro of its own (`--set "
            f"redis_host=elasticache`, as sessions 22–27 priced it): {own_node / rllib:.2f}x") in text


def test_report_prices_every_run_with_redis_placed_alike_when_asked(tmp_path: Path) -> None:
    """``--redis-host orchestrator``: a run from before session 28 (Redis on its own node) is
    reported as if Redis had run on the orchestrator's instance, its curve and summary alike."""
    from orchestrator.cost import CostMeter, PriceTable

    prices = PriceTable()
    root = compare.budget_dir(tmp_path / "out", "Hopper-v5", 5)
    own_node = CostMeter(prices)  # an older run's bill: no redis_cpu_s column, no flag
    own_node.invocation("actor", 150_000.0, 1769)
    run_dir = root / "stellaris" / "seed1"
    run_dir.mkdir(parents=True)
    with open(run_dir / "metrics.csv", "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=[c for c in CSV_COLUMNS if c != "redis_cpu_s"])
        w.writeheader()
        for wall, ret in zip([50.0, 100.0], [1000.0, 2000.0], strict=True):
            w.writerow({"wall_s": wall, "env_steps": 1000, "episodic_return": ret,
                        "orchestrator_cpu_s": wall * 0.02,
                        "cost_usd": own_node.total(wall, orchestrator_cpu_s=wall * 0.02)})
    summary = {"wall_s": 100.0, "sps": 100.0, "mean_return": 2000.0,
               "cost": {k: v for k, v in own_node.report(100.0, 2.0).items()
                        if k not in ("redis_on_orchestrator", "redis_cpu_s")},
               "footprint": {"redis": {"instance": "cache.t4g.micro", "baseline_vcpu": 0.2,
                                       "memory_mib": 384, "baseline_mbps": 64, "vcpu_mean": 0.01,
                                       "peak_memory_mib": 2.6, "net_mbps_mean": 40.0,
                                       "fits": True}, "fits": True}}
    (run_dir / "summary.json").write_text(json.dumps(summary))
    _write_run(root / "rllib" / "seed1", [400.0, 500.0], [2000.0, 2000.0], 0.012)
    results = tmp_path / "RESULTS.md"
    assert compare.main(["--envs", "Hopper-v5", "--minutes", "5", "--report-only", "--redis-host",
                         "orchestrator", "--out", str(tmp_path / "out"),
                         "--results", str(results)]) == 0
    text = results.read_text()
    colocated = CostMeter(prices, redis_on_orchestrator=True, components=own_node.components)
    rllib = 0.012 * 400 / 500
    assert f"$ vs RLlib: {colocated.total(100.0, False, 2.0, 1.0) / rllib:.2f}x" in text
    assert (f"with Redis on a cache.t4g.micro of its own (`--set redis_host=elasticache`, as "
            f"sessions 22–27 priced it): {own_node.total(100.0, False, 2.0) / rllib:.2f}x") in text
    data = compare.collect(root, redis_host="orchestrator")
    (run,) = data["stellaris"]
    assert run["summary"]["cost"]["total_usd"] == pytest.approx(colocated.total(100.0, False, 2.0, 1.0))
    assert run["curve"]["cost_usd_dedicated_vcpu"] == pytest.approx(run["curve"]["cost_usd"])
