"""compare.py end to end on CartPole-v1 with a ~8 s budget (lean PPO + Stellaris on the inline
backend): run folders, CSV columns, figures, one record per run and the results page rendered
from them; and the commands it builds for each system."""

from __future__ import annotations

import argparse
import csv
import json
import platform
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from benchmarks import compare, report  # noqa: E402
from benchmarks import compare_analysis as analysis  # noqa: E402
from benchmarks.records import PUBLISHING, git_state, read_records  # noqa: E402
from orchestrator.metrics import CSV_COLUMNS  # noqa: E402


@pytest.mark.timeout(120)
def test_compare_runs_two_systems_records_each_run_and_the_page_shows_them(
        tmp_path: Path) -> None:
    out, records = tmp_path / "out", tmp_path / "records"
    rc = compare.main(["--envs", "CartPole-v1", "--minutes", "0.13", "--seeds", "1",
                       "--systems", "lean", "stellaris", "--backend", "inline",
                       "--out", str(out), "--records", str(records), "--series", "equal-cores"])
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
    assert rc == 0
    # every clock from process start: the lean PPO's own; Stellaris' measured and added back
    lean_bench = json.loads((root / "lean" / "seed1" / "bench.json").read_text())
    stell_bench = json.loads((root / "stellaris_backend=inline_" / "seed1" / "bench.json").read_text())
    assert lean_bench["clock_offset_s"] == 0.0 and lean_bench["cores"] == 1
    assert 0.5 < stell_bench["clock_offset_s"] < stell_bench["elapsed_s"]
    assert stell_bench["cores"] == 2
    stell = json.loads((root / "stellaris_backend=inline_" / "seed1" / "summary.json").read_text())
    # one learner publishes its updates (the default): data staleness, no gradients
    assert stell["staleness_hist"]["traj"] and "traj" in stell["staleness_mean"]
    figs = {p.name for p in (root / "figures").glob("*.png")}
    assert {"CartPole-v1_return_vs_wall.png", "CartPole-v1_return_vs_env.png",
            "CartPole-v1_return_vs_cost.png", "CartPole-v1_cost.png",
            "CartPole-v1_staleness.png"} <= figs
    assert "| lean PPO |" in (root / "report.md").read_text()

    # one record per run, a few KB, naming how it was made
    recs = {r["summary"]["variant"]: r for r in read_records(records)}
    assert sorted(recs) == ["lean", "stellaris[backend=inline]"]
    head, dirty = git_state()
    files = sorted(records.rglob("*.json"))
    assert len(files) == 2 and all(f.stat().st_size < 6000 for f in files)
    node = platform.node()
    for r in recs.values():
        assert r["kind"] == r["benchmark"] == "compare" and r["schema"] == 1
        assert r["command"].startswith("python benchmarks/compare.py --envs CartPole-v1")
        assert (r["commit"], r["dirty"]) == (head, dirty) and r["date"].endswith("Z")
        assert r["machine"]["cpu_count"] and r["software"]["torch"]
        assert r["summary"]["series"] == "equal-cores" and r["summary"]["seed"] == 1
        assert set(r["curve_points"]["to_target"]) == {"100", "200", "400"}
        assert r["curve_points"]["last"]["env_steps"] > 0
    if len(node) > 3:
        assert all(node not in f.read_text() for f in files)  # no hostname
    assert recs["stellaris[backend=inline]"]["path"] == PUBLISHING
    assert recs["lean"]["path"] is None
    assert recs["stellaris[backend=inline]"]["summary"]["staleness"]["traj"]["n"] > 0
    # the record's wall time is on the clock from process start (the run's own plus the offset)
    assert recs["stellaris[backend=inline]"]["summary"]["wall_s"] == pytest.approx(
        stell["wall_s"] + stell_bench["clock_offset_s"])

    page = tmp_path / "results.md"
    assert report.main(["--records", str(records), "--out", str(page)]) == 0
    text = page.read_text()
    steps = recs["lean"]["summary"]["env_steps"]
    # the headline series: in the headline, with the seeds; and in the compare section
    assert "### CartPole-v1" in text and "#### 0.13-minute budget, `equal-cores`" in text
    assert "### CartPole-v1, 0.13-minute budget (`equal-cores`)" in text
    assert "| lean PPO | n/a (baseline) | 1 | 1 (1) |" in text  # the cores it uses, not the machine's
    assert f"| Stellaris (async) [backend=inline] | {PUBLISHING} |" in text
    assert "speedup vs lean PPO:" in text and "| system | entropy at" in text
    assert f"{recs['lean']['summary']['sps']:.0f}" in text and steps > 0
    assert head[:7] in text and "python benchmarks/compare.py --envs CartPole-v1" in text
    assert report.main(["--records", str(records), "--out", str(page), "--check"]) == 0


def test_report_only_with_record_writes_the_records_of_existing_run_folders(
        tmp_path: Path) -> None:
    """``--report-only --record``: runs made earlier get their records, with the commit and
    start their ``bench.json`` kept, and writing them again replaces them."""
    run_dir = compare.budget_dir(tmp_path / "out", "Hopper-v5", 5) / "lean" / "seed3"
    _write_run(run_dir, [50.0, 100.0], [1000.0, 2000.0], 0.01)
    (run_dir / "bench.json").write_text(json.dumps({
        "system": "lean", "variant": "lean", "minutes": 5, "commit": "0123456789abcdef",
        "dirty": False, "started_utc": "2026-12-01T10:00:00Z", "rc": 0}))
    argv = ["--envs", "Hopper-v5", "--minutes", "5", "--report-only", "--record",
            "--out", str(tmp_path / "out"), "--records", str(tmp_path / "records")]
    assert compare.main(argv) == 0 and compare.main(argv) == 0
    (rec,) = read_records(tmp_path / "records")
    assert (rec["commit"], rec["date"]) == ("0123456789abcdef", "2026-12-01T10:00:00Z")
    assert rec["curve_points"]["to_target"]["2000"]["wall_s"] == 100.0
    assert rec["curve_points"]["return_at_min"] == {"1": 1000.0}  # 60 s: the row at 50 s


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
    """--pool adds earlier invocations' run folders to the report, one list per system; the
    same seed in two folders is two runs (an async run is not reproducible from its seed)."""
    old, new = tmp_path / "a", tmp_path / "b"
    for out, seed, t_stell in ((old, 1, 50.0), (new, 1, 150.0), (new, 2, 100.0)):
        root = compare.budget_dir(out, "Hopper-v5", 5)
        _write_run(root / "stellaris" / f"seed{seed}", [t_stell, 300.0], [2000.0, 2100.0], 0.02)
        _write_run(root / "lean" / f"seed{seed}", [200.0, 300.0], [2000.0, 2000.0], 0.007)
    rc = compare.main(["--envs", "Hopper-v5", "--minutes", "5", "--report-only",
                       "--out", str(new), "--pool", str(old)])
    assert rc == 0
    root = compare.budget_dir(new, "Hopper-v5", 5)
    text = (root / "report.md").read_text()
    assert "Seeds per system: Stellaris (async) 3, lean PPO 3." in text
    assert "speedup vs lean PPO: 2.0x;" in text  # 200 s / mean(50, 150, 100) s
    assert "pooled with those under `--pool`" in text
    assert (root / "figures" / "Hopper-v5_return_vs_wall.png").exists()
    alone = analysis.collect_pooled([root], [2000], 5)
    assert sorted(r["seed"] for r in alone["stellaris"]) == [1, 2]


def test_anneal_lr_reaches_every_system_each_with_its_own_schedule(tmp_path: Path) -> None:
    from benchmarks import rllib_ppo
    from functions.hyper import PPOHyper

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
    assert rllib_ppo._hyper(parser, "Hopper-v5", ["ent_coef=0.005"]).ent_coef == 0.005
    cfg = rllib_ppo.build_config("Hopper-v5", 1,
                                 rllib_ppo._hyper(parser, "Hopper-v5", ["ent_coef=0.005"]))
    assert cfg.entropy_coeff == 0.005
    with pytest.raises(SystemExit):
        rllib_ppo._hyper(parser, "Hopper-v5", ["clip_vloss=false"])
    # RLlib's PPO runs every epoch: its recorded hyper-parameters say so
    assert rllib_ppo._hyper(parser, "Hopper-v5", []).target_kl is None
    with pytest.raises(SystemExit):
        rllib_ppo._hyper(parser, "Hopper-v5", ["target_kl=0.01"])
    # an env's own defaults reach the matched baseline, under what it is given
    from functions.hyper import ENV_HYPER

    env, fields = next(iter(ENV_HYPER.items()))
    assert rllib_ppo._hyper(parser, env, []).model_dump(include=set(fields)) == fields
    assert rllib_ppo._hyper(parser, env, ["ent_coef=0.0"]).ent_coef == 0.0


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


def test_label_by_hyper_pools_runs_by_what_they_ran_with_not_what_named_them(tmp_path: Path) -> None:
    """A run made with ``--set hyper.target_kl=0.02`` when that was not the default pools with
    today's default runs; one made under an older default gets named for its difference
    (``hyper.target_kl=null``); RLlib is judged against its own matched baseline; a field a run
    did not record never passes for today's default — unless every run before the field did
    what its default does (``norm_adv_scope``: per minibatch)."""
    from benchmarks import rllib_ppo
    from functions.hyper import PPOHyper

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
    as_named = analysis.collect_pooled(roots, [1000, 2000], 5)
    assert sorted(as_named) == ["lean", "rllib", "stellaris", "stellaris[hyper.target_kl=0.02]"]
    data = analysis.collect_pooled(roots, [1000, 2000], 5, by_hyper=True)
    assert PPOHyper().target_kl == 0.02  # the premise: today's default
    assert sorted(data) == ["lean[hyper.target_kl=unrecorded]", "rllib", "stellaris",
                            "stellaris[hyper.target_kl=null]"]
    assert sorted(r["seed"] for r in data["stellaris"]) == [1, 2]
    assert sorted(r["seed"] for r in data["rllib"]) == [1, 2]
    assert compare.main(["--envs", "Hopper-v5", "--minutes", "5", "--report-only", "--out",
                         str(new), "--pool", str(old), "--label-by-hyper"]) == 0
    text = (compare.budget_dir(new, "Hopper-v5", 5) / "report.md").read_text()
    assert "(`--label-by-hyper`)" in text
    assert "Stellaris (async) 2, RLlib 2.60 PPO 2" in text
    # an ablation that ran on some of the pooled baseline's seeds says its means are unpaired
    assert "over different seeds (stellaris[hyper.target_kl=null] 1 runs, RLlib 2:" in text
