"""capacity.py's machinery: the synthetic functions send the real messages at the real sizes
through a real Redis, one tiny point runs the real orchestrator against the capacity host and
measures it, and the capacity model reads a sweep's rows."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from benchmarks import capacity  # noqa: E402
from benchmarks import synthetic_functions as syn  # noqa: E402
from benchmarks.capacity_run import Point, run_point  # noqa: E402
from functions.events import ActorEvent, LearnerEvent  # noqa: E402
from functions.hyper import PolicySpec, PPOHyper  # noqa: E402
from functions.policy import init_policy, param_layout, policy_meta  # noqa: E402
from functions.wire import Gradient, Trajectory  # noqa: E402
from store import EmbeddedRedis, RunStore, Store  # noqa: E402


@pytest.fixture()
def redis_url():  # noqa: ANN201
    with EmbeddedRedis() as r:
        yield r.url


def _publish(url: str, run_id: str, hidden: int) -> tuple[RunStore, tuple]:
    rs = RunStore(Store(url), run_id)
    model, tensors = init_policy("Hopper-v5", PolicySpec(hidden_sizes=[hidden, hidden]), 0)
    rs.params.publish(0, tensors, policy_meta(model))
    return rs, param_layout(model)


def test_synthetic_actor_writes_a_real_trajectory(redis_url: str, monkeypatch) -> None:  # noqa: ANN001
    monkeypatch.setenv(syn.ENV_STEPS_PER_S, "1e9")  # no env time
    rs, _ = _publish(redis_url, "cap-actor", 64)
    syn.STATS.take()
    event = ActorEvent(run_id="cap-actor", redis_url=redis_url, invocation_id="a-1",
                       env_id="Hopper-v5", n_envs=8, steps=256, refresh_steps=32).to_event()
    out = syn.actor(event)
    assert out["steps"] == 2048 and out["behaviour_version"] == 0
    entry = rs.traj.get([out["trajectory_id"]])[0]
    traj = Trajectory.from_blob(entry.blob)
    assert traj.obs.shape == (256, 8, 11) and traj.actions.shape == (256, 8, 3)
    ops = syn.STATS.take()["ops"]
    # one read of the policy, then seven version checks that transferred nothing
    assert ops["param_read"]["calls"] == 1 and ops["param_read"]["bytes"] > 0
    assert ops["param_poll"]["calls"] == 7 and ops["traj_append"]["calls"] == 1


def test_synthetic_learner_streams_gradients_of_the_policy_layout(redis_url: str,
                                                                    monkeypatch) -> None:  # noqa: ANN001
    monkeypatch.setenv(syn.ENV_STEPS_PER_S, "1e9")
    monkeypatch.setenv(syn.MINIBATCH_MS, "0")
    rs, layout = _publish(redis_url, "cap-learner", 256)
    rs.grads.ensure_group("g", start_id="0")
    ids = [syn.actor(ActorEvent(run_id="cap-learner", redis_url=redis_url, invocation_id=f"a-{i}",
                                env_id="Hopper-v5").to_event())["trajectory_id"] for i in range(2)]
    event = LearnerEvent(run_id="cap-learner", redis_url=redis_url, mode="gradient",
                         invocation_id="l-1", trajectory_ids=ids, hold_lease_s=60,
                         hyper=PPOHyper(update_epochs=2, num_minibatches=3)).to_event()
    out = syn.learner(event)
    assert out["gradients"] == 6
    entries = rs.grads.read("g", "c", count=100, block_ms=None)
    grads = [g for e in entries for g in Gradient.unpack(e.blob)]
    assert len(grads) == 6 and grads[0].param_layout() == layout
    assert grads[0].flat_vector().size > 100_000  # a 256x256 policy's real size


def test_capacity_model_from_rows() -> None:
    rows = [{"policy": "64x64", "learners": 4, "actors": n, "rollouts_s": 2.5 * n,
             "orch_cpu": 0.05 + 0.002 * 2.5 * n, "actor_use": 0.95, "mean_actor_ms": 400.0}
            for n in (16, 64, 128)]
    rows[-1]["orch_cpu"] = 0.75  # over the limit: not carried
    cap = capacity.capacity(rows, learners=4)["64x64"]
    assert cap["measured_actors"] == 64
    assert cap["short_at"] == 128 and cap["limit"] == "orchestrator"
    assert cap["rollouts_s_per_actor"] == pytest.approx(2.5)
    assert cap["model_actors"] is not None and 50 < cap["model_actors"] < 150


@pytest.mark.timeout(180)
def test_one_point_measures_the_orchestrator(redis_url: str, tmp_path: Path) -> None:
    import redis

    pid = int(redis.Redis.from_url(redis_url).info("server")["process_id"])
    p = Point(hidden=64, actors=4, learners=2, latency_ms=5.0, window_s=3.0, warmup_s=1.0,
              minibatch_ms=0.5)
    res = run_point(p, redis_url, pid, tmp_path)
    row = res["row"]
    assert row["orch_alive"], (tmp_path / "cap.log")
    assert row["rollouts_s"] > 1 and row["gradients_s"] > 1 and row["param_reads_s"] > 0
    assert 0 < row["orch_cpu"] < 2 and 0 < row["redis_cpu"] < 2 and row["host_cpu"] > 0
    assert row["redis_in_mb_s"] > 0.1  # trajectories of ~200 KB reached Redis
    assert res["latency"]["traj_append"]["p50_ms"] is not None
    assert "evalsha" in res["redis_commands"]


def test_lambda_bill_of_a_point() -> None:
    # 400 ms a rollout of which 50 ms is the platform's: 9M invocations an hour, 350 ms each
    c = capacity.lambda_usd_per_hour({"mean_actor_ms": 400.0, "latency_ms": 50.0}, actors=1000)
    assert c["invocations_per_hour"] == pytest.approx(9e6)
    assert c["billed_ms"] == pytest.approx(350.0)
    assert c["usd_per_hour"] == pytest.approx(9e6 * (0.35 * 1769 / 1024 * 0.0000166667 + 2e-7))
