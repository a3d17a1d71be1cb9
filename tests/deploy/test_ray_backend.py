"""`--backend ray`: a tiny async run on a local Ray (asking for a GPU share on a machine
without GPUs), and a tiny sync run of a custom env on a Ray cluster (`ray start --head` as a
process) joined through RAY_ADDRESS, as a Ray Job's or a KubeRay pod's driver is, whose workers
get our code and the env's package through runtime_env py_modules."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import ray  # a dependency (the ray extra): an ImportError fails loudly, never a skip
from procs import ray_head

from orchestrator.cli import main as stellaris
from orchestrator.invokers.ray_ import (
    cluster_address,
    code_runtime_env,
    fit_to_job,
    learner_gpu_share,
    task_options,
)

ENVPKG = Path(__file__).resolve().parents[1] / "envpkg"  # a custom env package (stellaris_testenvs)
LINE = "stellaris_testenvs.line:StellarisLine-v0"


def tiny(mode: str, run_dir: Path, redis_url: str, *extra: str, env: str = "CartPole-v1") -> list[str]:
    return ["train", "--backend", "ray", "--mode", mode, "--env", env,
            "--total-steps", "4096", "--actors", "2", "--progress", "none", "--eval-interval-s", "0",
            "--redis-url", redis_url, "--run-dir", str(run_dir), *extra]


def test_runtime_env_ships_our_packages(monkeypatch: pytest.MonkeyPatch) -> None:
    env = code_runtime_env({"X": "1"}, extra_modules=(str(ENVPKG / "stellaris_testenvs"),))
    names = sorted(Path(p).name for p in env["py_modules"])
    assert names == ["functions", "orchestrator", "stellaris_testenvs", "store"]
    assert all((Path(p) / "__init__.py").exists() for p in env["py_modules"])
    assert "__pycache__" in env["excludes"] and env["env_vars"]["X"] == "1"
    # inside a Ray Job, the job's runtime_env wins where both set a field (Ray refuses both)
    job = {"working_dir": "gcs://_ray_pkg_x.zip", "excludes": ["data/"], "env_vars": {"X": "2"}}
    fitted = fit_to_job(env, job)
    assert "excludes" not in fitted and fitted["py_modules"] == env["py_modules"]
    assert "X" not in fitted["env_vars"] and fitted["env_vars"]["OMP_NUM_THREADS"] == "1"
    assert fit_to_job(env, None) is env
    # the address: the config's, else RAY_ADDRESS; a dashboard URL is not one a driver joins
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    assert cluster_address(None) is None and cluster_address("head:6379") == "head:6379"
    monkeypatch.setenv("RAY_ADDRESS", "10.0.0.2:6379")
    assert cluster_address(None) == "10.0.0.2:6379"
    monkeypatch.setenv("RAY_ADDRESS", "http://127.0.0.1:8265")
    with pytest.raises(RuntimeError, match="dashboard.*ray job submit"):
        cluster_address(None)


def test_learner_gpu_share_and_task_options() -> None:
    assert learner_gpu_share({"CPU": 8}, None) == 0 and learner_gpu_share({"GPU": 2.0}, None) == 1
    assert learner_gpu_share({"CPU": 8, "GPU": 1.0}, 0.25) == 0.25  # four learners, one GPU
    assert learner_gpu_share({"CPU": 8}, 0.25) == 0  # no GPU in the cluster: ask for none
    assert learner_gpu_share({"GPU": 1.0}, 0) == 0
    with pytest.raises(RuntimeError, match="has 1 GPU"):
        learner_gpu_share({"GPU": 1.0}, 2)
    opts = task_options(0.25)
    assert opts["learner"] == {"num_cpus": 1, "num_gpus": 0.25, "max_retries": 0}
    assert opts["actor"] == opts["evaluator"] == {"num_cpus": 1, "max_retries": 0}
    assert "num_gpus" not in task_options(0)["learner"]


@pytest.mark.timeout(120)
def test_local_ray_async(redis_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # a GPU share asked for on a machine without GPUs: the learners run on CPU, nothing waits
    rc = stellaris(tiny("async", tmp_path / "run", redis_url, "--set", "learner_gpus=0.25"))
    out, err = capsys.readouterr()
    assert rc == 0, out + err
    assert "learner_gpus = 0.25 but the Ray cluster has no GPU" in err
    assert not ray.is_initialized()  # the invoker's own local Ray is shut down
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["env_steps"] >= 4096 and summary["version"] > 0


@pytest.mark.timeout(150)
def test_ray_cluster_by_ray_address_sync_custom_env(redis_url: str, tmp_path: Path) -> None:
    with ray_head(tmp_path) as (port, env):
        # The driver runs as its own process, elsewhere (cwd tmp_path), as the entrypoint of a
        # Ray Job or a KubeRay pod runs: RAY_ADDRESS names the cluster (no --ray-address), and
        # the custom env's package is on the driver's path only: the workers get it, and
        # functions/store/orchestrator, shipped. Out of process also keeps this test's Ray
        # settings (auth disabled) from leaking into later in-process ray.init() calls.
        driver_env = {**env, "RAY_ADDRESS": f"127.0.0.1:{port}",
                      "PYTHONPATH": os.pathsep.join((env["PYTHONPATH"], str(ENVPKG)))}
        driver = subprocess.run(
            [sys.executable, "-m", "orchestrator.cli",
             *tiny("sync", tmp_path / "run", redis_url, env=LINE)],
            env=driver_env, cwd=tmp_path, capture_output=True, text=True, timeout=300)
        assert driver.returncode == 0, driver.stdout[-2000:] + driver.stderr[-2000:]
        summary = json.loads((tmp_path / "run" / "summary.json").read_text())
        assert summary["env_steps"] >= 4096 and summary["env"] == LINE and summary["episodes"] > 0
        assert summary["failures"] == {"actor": 0, "learner": 0, "evaluator": 0}
