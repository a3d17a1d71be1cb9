"""capacity.py's Ray path: one tiny point (one actor, one learner, the 64x64 policy, a six-second
window) through a real Ray head (`ray start --head`, its own process group) joined with
``--ray-address``, the synthetic handlers running as that cluster's tasks."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
# tests/deploy/procs.py: processes in their own session, stopped by their group
sys.path.insert(0, str(REPO / "tests" / "deploy"))

from procs import ray_head  # noqa: E402


@pytest.mark.timeout(180)
def test_one_point_on_a_ray_head(tmp_path: Path) -> None:
    with ray_head(tmp_path) as (port, env):
        # the documented command, as its own process (its embedded redis-server included)
        cmd = [sys.executable, str(REPO / "benchmarks" / "capacity.py"), "--backend", "ray",
               "--ray-address", f"127.0.0.1:{port}", "--policies", "64", "--actors", "1",
               "--learners", "1", "--learner-sweep", "--window-s", "6", "--warmup-s", "1",
               # one actor's rollouts come four per learner round (the async backpressure holds
               # it meanwhile), a round a few seconds on two busy cores: the window holds one
               # at least; 2 x 32 gradients a round, not 10 x 32, keep the machine's load down
               "--set", "hyper.update_epochs=2",
               "--out", str(tmp_path / "out"), "--no-record", "--dump", str(tmp_path / "dump.json")]
        done = subprocess.run(cmd, env=env, cwd=REPO, capture_output=True, text=True, timeout=150)
        logs = "".join(p.read_text(errors="replace")[-3000:] for p in (tmp_path / "out").glob("*.log"))
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:] + logs
        assert "64x64 actors=1 learners=1:" in done.stdout
        # the orchestrator joined this head, not a Ray of its own
        assert f":{port}" in logs and "Connected to Ray cluster" in logs, logs

    (res,) = json.loads((tmp_path / "dump.json").read_text())
    row = res["row"]
    assert row["backend"] == "ray" and row["orch_alive"]
    # one actor: 2,048 env steps at 6,471 steps/s (0.32 s) a rollout plus Ray's turnaround, four
    # a learner round; a path whose tasks never ran or stalled makes none in the window
    assert 0.15 < row["rollouts_s"] < 10, row
    assert row["env_steps_s"] == pytest.approx(row["rollouts_s"] * 2048)
    assert row["gradients_s"] > 1, row  # the learner's task streamed gradients to the orchestrator
    # the orchestrator's own process, measured: some CPU, not a whole core's worth for one actor
    assert 0.001 < row["orch_cpu"] < 1.0, row
    assert row["orch_ms_per_rollout"] > 0
    assert row["redis_cpu"] is not None and row["redis_cpu"] > 0  # the embedded one, on this machine
    assert row["redis_in_mb_s"] > 0.1  # trajectories of ~200 KB reached Redis from the workers
    assert row["host_cpu"] is None  # no capacity host on Ray
    assert "xadd" in res["redis_commands"]
