"""The equal-core baselines compare.py runs: each runner's run folder, its clock from process
start, and what the results page says of them. Real short runs of SB3 PPO, the two-core lean PPO
and RLlib PPO with normalisation (~20 s each); Sample Factory 2's converter on summaries a real
SF2 run wrote here (its venv takes minutes to build: scripts/make_sf2_venv.sh), and the
settings of RLlib's APPO."""

from __future__ import annotations

import argparse
import csv
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from benchmarks import compare, sf2_appo  # noqa: E402
from benchmarks.compare_analysis import from_process_start  # noqa: E402
from benchmarks.compare_report import equal_core_line  # noqa: E402
from orchestrator.metrics import CSV_COLUMNS  # noqa: E402

SF2_FIXTURE = Path(__file__).parent / "data" / "sf2_summaries"


def _rows(run_dir: Path) -> list[dict[str, str]]:
    with open(run_dir / "metrics.csv") as fh:
        rows = list(csv.DictReader(fh))
    assert rows and list(rows[0]) == CSV_COLUMNS
    return rows


def _run_timed(args: list[str], out: Path, timeout: float = 150) -> tuple[float, dict]:
    """Run a runner as compare.py does (its own process); the seconds from its start to its
    exit, and its summary."""
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, *args, "--out", str(out)], cwd=REPO,
                          capture_output=True, text=True, timeout=timeout,
                          env={"PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1",
                               "PYTHONPATH": str(REPO), "HOME": str(Path.home())})
    elapsed = time.monotonic() - t0
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    return elapsed, json.loads((out / "summary.json").read_text())


def _assert_clock_from_process_start(elapsed: float, summary: dict, minutes: float) -> None:
    """The run's wall time covers its whole process: at least its budget, and all but the
    shutdown of what the parent saw (a clock started after the imports and the framework's
    start-up would be short of it by those)."""
    assert summary["clock_origin"] == "process start"
    assert summary["wall_s"] >= minutes * 60 - 1
    assert summary["setup_s"] > 0.5  # imports and start-up counted, and said
    assert elapsed - 8 < summary["wall_s"] <= elapsed


def test_the_clock_from_process_start_never_runs_ahead_of_the_parents() -> None:
    """A child's age read at its exit is within what its parent saw from before the spawn to
    after the exit, give or take the kernel's one-tick stamp (psutil's create_time, on
    whole-second boot time, was up to 1 s over)."""
    tick = 1.0 / os.sysconf("SC_CLK_TCK")
    for _ in range(3):
        t0 = time.monotonic()
        out = subprocess.run([sys.executable, "-c", "from benchmarks._common import "
                              "since_process_start as s; print(s())"], cwd=REPO, text=True,
                             capture_output=True, check=True, env={"PYTHONPATH": str(REPO)})
        elapsed = time.monotonic() - t0
        assert 0.0 < float(out.stdout) <= elapsed + tick


@pytest.mark.timeout(200)
def test_sb3_ppo_runs_zoo_settings_on_two_env_processes_from_process_start(tmp_path: Path) -> None:
    out = tmp_path / "sb3"
    # an env-step budget, not minutes: on a loaded machine the imports alone can take 20 s
    elapsed, s = _run_timed(["benchmarks/sb3_ppo.py", "--env", "Hopper-v5", "--total-steps",
                             "4096", "--seed", "3"], out)
    _assert_clock_from_process_start(elapsed, s, 0)
    rows = _rows(out)
    assert s["episodes"] > 20 and s["env_steps"] > 2000
    assert 5 < float(rows[-1]["episodic_return"]) < 1000  # raw Hopper returns, not normalised
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["system"] == "sb3" and cfg["vec_env"] == "SubprocVecEnv" and cfg["n_envs"] == 2
    assert cfg["sb3_hyper"]["learning_rate"] == pytest.approx(9.80828e-05)  # the zoo's Hopper


@pytest.mark.timeout(200)
def test_two_core_lean_ppo_samples_in_a_second_process_from_process_start(tmp_path: Path) -> None:
    out = tmp_path / "lean2"
    elapsed, s = _run_timed(["benchmarks/lean_ppo.py", "--two-core", "--no-compile", "--env",
                             "Hopper-v5", "--total-steps", "10240", "--seed", "3"], out)
    _assert_clock_from_process_start(elapsed, s, 0)
    rows = _rows(out)
    assert s["backend"] == "two-process" and s["episodes"] > 20
    assert int(rows[-1]["version"]) >= 3  # updates learned from the sampler's rollouts
    assert json.loads((out / "config.json").read_text())["system"] == "lean2"
    # the sampler stops at once (it was blocked writing a rollout nobody reads), so no
    # shutdown wait sits on the run's clock, its $ and its steps/s
    assert s["wall_s"] - float(rows[-2]["wall_s"]) < 5.0


@pytest.mark.timeout(200)
def test_two_core_lean_ppo_sends_weights_larger_than_a_pipes_buffer(tmp_path: Path) -> None:
    # Humanoid's policy is ~220 KB, over the 64 KiB pipe buffer: sending it must not wait for
    # a sampler that is itself blocked sending its next rollout
    out = tmp_path / "lean2"
    elapsed, s = _run_timed(["benchmarks/lean_ppo.py", "--two-core", "--no-compile", "--env",
                             "Humanoid-v5", "--n-envs", "4", "--rollout-steps", "64",
                             "--total-steps", "2048", "--seed", "3"], out, timeout=150)
    assert int(_rows(out)[-1]["version"]) >= 5 and s["env_steps"] >= 2048
    assert s["wall_s"] <= elapsed


@pytest.mark.timeout(240)
def test_rllib_norm_logs_raw_returns_while_learning_from_normalised_rewards(tmp_path: Path) -> None:
    from benchmarks import rllib_ppo

    cfg = rllib_ppo.build_config("Hopper-v5", 1, rllib_ppo.baseline_hyper(), norm=True)
    assert cfg.use_kl_loss and cfg.kl_target == rllib_ppo.KL_TARGET
    assert cfg.env == rllib_ppo.NORM_ENV and cfg.env_config["gamma"] == 0.995
    plain = rllib_ppo.build_config("Hopper-v5", 1, rllib_ppo.baseline_hyper())
    assert not plain.use_kl_loss and plain.env == "Hopper-v5"
    # the wrapper below the normaliser sees the raw rewards; the learner gets others
    env = rllib_ppo.normalized_env({"env_id": "Hopper-v5", "gamma": 0.995})
    env.reset(seed=0)
    seen, info, done = 0.0, {}, False
    while not done:
        _, r, term, trunc, info = env.step(env.action_space.sample())
        seen += float(r)
        done = term or trunc
    assert info[rllib_ppo.RAW_RETURN] != pytest.approx(seen)
    assert 0 < info[rllib_ppo.RAW_RETURN] < 200  # a random Hopper episode's raw return

    out = tmp_path / "rllib-norm"
    s = rllib_ppo.train("Hopper-v5", 3, out, total_steps=2048, norm=True)
    assert s["system"] == "rllib-norm" and s["clock_origin"] == "process start"
    with open(out / "rllib_returns.csv") as fh:
        own = list(csv.DictReader(fh))
    ours, theirs = float(own[-1]["episodic_return"]), float(own[-1]["rllib_episode_return_mean"])
    rows = _rows(out)
    length = float(rows[-1]["episodic_length"])
    # raw Hopper reward is ~1 a step (the healthy bonus); RLlib's own mean is of the
    # normalised, clipped rewards, which are not
    assert 0.5 * length < ours < 3 * length and abs(ours - theirs) > 0.1 * ours


def test_rllib_appo_runs_rllibs_tuned_mujoco_settings_on_two_env_runners() -> None:
    from benchmarks import rllib_appo

    cfg = rllib_appo.build_config("Hopper-v5", 1)
    assert cfg.num_env_runners == 2 and cfg.num_envs_per_env_runner == 8
    assert cfg.train_batch_size_per_learner == 4096 and cfg.circular_buffer_num_batches == 16
    assert cfg.lr == 0.0005 and cfg.clip_param == 0.4 and cfg.kl_target == 0.04
    assert cfg.min_time_s_per_iteration == 1


def test_sf2_summaries_become_our_run_folder_on_the_clock_from_process_start(
        tmp_path: Path) -> None:
    """Summaries a real SF2 run (Hopper-v4, 2 workers, 45 s) wrote here, read with
    TensorBoard's reader; each row's wall time is the summary's less the process's start."""
    scalars = sf2_appo.read_scalars(SF2_FIXTURE)
    rets = scalars[sf2_appo.RETURN_TAG]
    assert len(rets) == 6 and rets[-1][1] == 28672
    started = rets[0][0] - 30.0  # SF2's first summary 30 s after its runner's process began
    s = sf2_appo.convert(scalars, started, 50.0, tmp_path,
                         {"system": "sf2", "env": "Hopper-v5", "sf2_env": "Hopper-v4"})
    rows = _rows(tmp_path)
    assert float(rows[0]["wall_s"]) == pytest.approx(30.0, abs=1e-3)
    assert [int(r["env_steps"]) for r in rows[:-1]] == [n for _, n, _ in rets]
    assert float(rows[0]["episodic_length"]) == 23  # the length written with that return
    assert float(rows[-2]["episodic_return"]) == pytest.approx(rets[-1][2], rel=1e-5)
    assert s["wall_s"] == 50.0 and s["mean_return"] == pytest.approx(rets[-1][2], rel=1e-5)
    assert s["clock_origin"] == "process start" and s["cost"]["total_usd"] > 0
    cmd = sf2_appo.sf2_command(Path("py"), "Walker2d-v5", 7, tmp_path, 100.4, False)
    assert "--env=mujoco_walker" in cmd and "--num_workers=2" in cmd
    assert "--train_for_seconds=100" in cmd and "--async_rl=False" in cmd


def test_compare_builds_each_baselines_command_and_refuses_what_it_cannot_take(
        tmp_path: Path) -> None:
    args = argparse.Namespace(no_compile=True, anneal_lr=False, rllib_sps=1000.0, backend="local",
                              is_correction=None, hyper=["ent_coef=0.005"], stop_at_return=2000.0)
    cmds = {s: compare.command(s, "Hopper-v5", 1, 5.0, tmp_path / s, args)
            for s in ("lean2", "rllib-norm", "rllib-appo", "sb3", "sb3-ours", "sf2")}
    assert cmds["lean2"][1].endswith("lean_ppo.py") and "--two-core" in cmds["lean2"]
    assert "--no-compile" in cmds["lean2"] and "ent_coef=0.005" in cmds["lean2"]
    assert cmds["rllib-norm"][1].endswith("rllib_ppo.py") and "--norm" in cmds["rllib-norm"]
    assert cmds["rllib-appo"][1].endswith("rllib_appo.py") and "--hyper" not in cmds["rllib-appo"]
    assert cmds["sb3-ours"][2:4] == ["--settings", "ours"] and "--hyper" not in cmds["sb3"]
    assert cmds["sf2"][1].endswith("sf2_appo.py")
    assert all(c[c.index("--stop-at-return") + 1] == "2000" for c in cmds.values())
    with pytest.raises(SystemExit):  # SB3 runs its own settings: a shared change cannot reach it
        compare.main(["--systems", "sb3", "--hyper", "ent_coef=0.005", "--report-only",
                      "--out", str(tmp_path / "o")])
    with pytest.raises(SystemExit):
        compare.main(["--systems", "sf2", "--init-from", "x.ckpt", "--report-only",
                      "--out", str(tmp_path / "o")])


def test_a_run_whose_clock_started_late_is_moved_to_its_process_start() -> None:
    curve = {"wall_s": [10.0, 20.0], "cost_usd": [0.1, 0.2], "episodic_return": [1.0, 2.0]}
    summary = {"wall_s": 20.0, "cost": {"total_usd": 0.2,
                                        "fixed": {"orchestrator": 0.02, "redis": 0.02,
                                                  "orchestrator_burst": 1.0}}}
    moved, msum = from_process_start(curve, summary, {"clock_offset_s": 5.0})
    assert moved["wall_s"] == [15.0, 25.0] and msum["wall_s"] == 25.0
    # 5 s more of the always-on parts at the run's rate (0.04 $ / 20 s), not its burst
    assert moved["cost_usd"] == pytest.approx([0.11, 0.21])
    assert msum["cost"]["total_usd"] == pytest.approx(0.21)
    assert from_process_start(curve, summary, {}) == (curve, summary)


def _run(seed: int, cores: int, t: float | None, usd: float, best: float) -> dict:
    to = {"2000": None if t is None else {"wall_s": t, "env_steps": 1, "usd": usd,
                                          "usd_dedicated": usd}}
    return {"seed": seed, "facts": {"cores": cores, "wall_s": 300.0, "usd": 0.01, "sps": 1.0,
                                    "load_before": None},
            "points": {"to_target": to, "return_at_min": {}, "best_return": best}}


def test_the_results_line_names_the_fastest_equal_core_baseline_and_rllibs_dollars() -> None:
    data = {"stellaris": [_run(1, 2, 40.0, 0.002, 2500), _run(2, 2, 60.0, 0.004, 2600)],
            "lean": [_run(1, 1, 30.0, 0.001, 2500), _run(2, 1, 30.0, 0.001, 2500)],  # 1 core
            "lean2": [_run(1, 2, 70.0, 0.002, 2500), _run(2, 2, 80.0, 0.002, 2500)],
            "sb3": [_run(1, 2, 100.0, 0.003, 2500), _run(2, 2, None, 0.009, 1800)],
            "rllib": [_run(1, 2, 300.0, 0.006, 2100), _run(2, 2, 300.0, 0.006, 2100)]}
    assert equal_core_line("Hopper-v5", data, 5.0, 2000) == [
        "vs best equal-core baseline, Hopper-v5: 1.5x faster to 2000 than lean PPO, two cores; "
        "$ 0.50x RLlib PPO's", ""]
    # Missed targets are censored: a rival's whole run counts as its time, so its ratio is a
    # lower bound ("at least"); RLlib's whole-run $ makes ours over it an upper bound.
    data["lean2"] = [_run(1, 2, None, 0.002, 1500), _run(2, 2, 70.0, 0.002, 2500)]
    data["rllib"][1] = _run(2, 2, None, 0.004, 1700)
    assert equal_core_line("Hopper-v5", data, 5.0, 2000) == [
        "vs best equal-core baseline, Hopper-v5: 3.7x faster to 2000 than lean PPO, two cores "
        "(at least: lean PPO, two cores reached 2000 in 1 of 2 5-minute runs; the best returns "
        "of those that missed: 1,500 (up to 500 short)); $ 0.38x RLlib PPO's (at most: RLlib "
        "2.60 PPO reached 2000 in 1 of 2 5-minute runs; the best returns of those that missed: "
        "1,700 (up to 300 short))", ""]
    data["stellaris"][1] = _run(2, 2, None, 0.01, 1900)
    line = equal_core_line("Hopper-v5", data, 5.0, 2000)[0]
    assert line == ("vs best equal-core baseline, Hopper-v5: no ratio: Stellaris (async) reached "
                    "2000 in 1 of 2 5-minute runs; the best returns of those that missed: 1,900 "
                    "(up to 100 short)")
    assert equal_core_line("Hopper-v5", {"stellaris": data["stellaris"]}, 5.0, 2000) == []


def test_a_baseline_at_other_settings_is_a_rival_too_named_by_its_tags() -> None:
    data = {"stellaris": [_run(1, 2, 40.0, 0.002, 2500), _run(2, 2, 60.0, 0.004, 2600)],
            "lean2": [_run(1, 2, 70.0, 0.002, 2500), _run(2, 2, 80.0, 0.002, 2500)],
            "lean2[hyper.ent_coef=0.003]": [_run(1, 2, 55.0, 0.002, 2500),
                                            _run(2, 2, 65.0, 0.002, 2500)],
            "stellaris[hyper.ent_coef=0.003]": [_run(1, 2, 10.0, 0.001, 2500)]}  # never a rival
    assert equal_core_line("Hopper-v5", data, 5.0, 2000)[0] == (
        "vs best equal-core baseline, Hopper-v5: 1.2x faster to 2000 than lean PPO, two cores "
        "[hyper.ent_coef=0.003]; $ vs RLlib PPO: n/a (no RLlib PPO runs)")
