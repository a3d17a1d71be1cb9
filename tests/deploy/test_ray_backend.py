"""`--backend ray`: a tiny async run on a local Ray, and a tiny sync run on a Ray cluster
(`ray start --head` as a process) reached by address, whose workers get our code through
runtime_env py_modules."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import ray  # a dependency (the ray extra): an ImportError fails loudly, never a skip
from procs import process_env, read_until, start, stop

from orchestrator.cli import main as stellaris
from orchestrator.invokers.ray_ import code_runtime_env, learner_gpus

# The `ray` CLI installed next to this interpreter (CI does not put the venv on PATH).
RAY_CLI = str(Path(sys.executable).parent / "ray")


def tiny(mode: str, run_dir: Path, redis_url: str, *extra: str) -> list[str]:
    return ["train", "--backend", "ray", "--mode", mode, "--env", "CartPole-v1",
            "--total-steps", "4096", "--actors", "2", "--progress", "none", "--eval-interval-s", "0",
            "--redis-url", redis_url, "--run-dir", str(run_dir), *extra]


def test_runtime_env_ships_our_packages() -> None:
    env = code_runtime_env({"X": "1"})
    names = sorted(Path(p).name for p in env["py_modules"])
    assert names == ["functions", "orchestrator", "store"]
    assert all((Path(p) / "__init__.py").exists() for p in env["py_modules"])
    assert "__pycache__" in env["excludes"] and env["env_vars"]["X"] == "1"
    assert learner_gpus({"CPU": 8}) == 0 and learner_gpus({"CPU": 8, "GPU": 2.0}) == 1


@pytest.mark.timeout(120)
def test_local_ray_async(redis_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc = stellaris(tiny("async", tmp_path / "run", redis_url))
    out = capsys.readouterr().out
    assert rc == 0, out
    assert not ray.is_initialized()  # the invoker's own local Ray is shut down
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["env_steps"] >= 4096 and summary["version"] > 0


@pytest.mark.timeout(150)
def test_ray_cluster_by_address_sync(redis_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    # Token auth is Ray's default for new clusters; this throwaway loopback cluster opts out
    # (docs/deploy.md, "Ray cluster", shows how to pass the token to a real one).
    env = process_env({"RAY_AUTH_MODE": "disabled"})
    temp = tempfile.mkdtemp(prefix="stray-", dir="/tmp")  # Ray's socket paths must stay short
    head = start([RAY_CLI, "start", "--head", "--node-ip-address=127.0.0.1", f"--port={port}",
                  "--num-cpus=4", "--num-gpus=0", "--include-dashboard=false",
                  f"--temp-dir={temp}", "--block"], env, cwd=tmp_path)
    try:
        read_until(head, "will now block", timeout=90)
        # The driver runs as its own process, elsewhere (cwd tmp_path): workers must get
        # functions/store/orchestrator shipped. Out of process also keeps this test's Ray
        # settings (auth disabled) from leaking into later in-process ray.init() calls.
        driver = subprocess.run(
            [sys.executable, "-m", "orchestrator.cli",
             *tiny("sync", tmp_path / "run", redis_url, "--ray-address", f"127.0.0.1:{port}")],
            env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300)
        assert driver.returncode == 0, driver.stdout[-2000:] + driver.stderr[-2000:]
        summary = json.loads((tmp_path / "run" / "summary.json").read_text())
        assert summary["env_steps"] >= 4096
        assert head.poll() is None  # the driver disconnected; the cluster keeps running
    finally:
        stop(head, timeout=15)
        shutil.rmtree(temp, ignore_errors=True)
    leftovers = subprocess.run(["pgrep", "-g", str(head.pid)], capture_output=True, text=True)
    assert leftovers.stdout.strip() == "", "ray head left processes behind"
