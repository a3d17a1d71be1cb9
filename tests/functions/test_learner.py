"""The learner handler: its warm-up event, and the errors it raises before any work."""

from __future__ import annotations

import numpy as np
import pytest
from fn_helpers import ev, publish_init, sample

from functions import learner
from functions.events import InvalidEvent
from store import encode
from store.errors import CorruptBlob


@pytest.mark.parametrize("mode", ["update", "gradient"])
def test_a_learner_warm_up_compiles_what_the_first_update_runs_and_changes_nothing(
        run_store, redis_url, mode):
    from torch._dynamo.utils import counters

    publish_init(run_store, "CartPole-v1")
    ids = sample(run_store, redis_url, n=2)  # 2 x 4 envs x 32 steps: 256 samples
    # a loss no other test compiles (the graphs are the process's), cut into ragged minibatches
    hyper = {"update_epochs": 2, "num_minibatches": 3, "clip_coef": 0.123 if mode == "update"
             else 0.124}
    graphs = counters["stats"]["unique_graphs"]
    out = learner.handler({"schema": "stellaris.learner-warmup/1",
                           **ev(run_store, redis_url, mode=mode, batch_size=256, hyper=hyper)})
    assert out["warmed"] and out["minibatch_sizes"] == [86, 85] and out["version"] == 0
    assert counters["stats"]["unique_graphs"] > graphs
    # nothing in the store moved, nor the weights of the environment's cached policy
    assert run_store.params.latest_version() == 0 and run_store.get_state("optimizer") is None
    pol, _ = learner.POLICIES.get(run_store, "latest")
    stored = run_store.params.get(0).tensors
    for name, p in pol.model.named_parameters():
        np.testing.assert_array_equal(p.detach().numpy(), stored[name])
    # the first update, in the environment it warmed, compiles nothing more
    graphs = counters["stats"]["unique_graphs"]
    target = {"target_version": 1} if mode == "update" else {}
    res = learner.handler(ev(run_store, redis_url, mode=mode, trajectory_ids=ids, hyper=hyper,
                             compile=True, **target))
    assert res["compiled"] and res["optimizer_steps" if mode == "update" else "gradients"] == 6
    assert counters["stats"]["unique_graphs"] == graphs


def test_a_warm_up_without_compiling_does_nothing_and_a_bad_one_is_refused(run_store, redis_url):
    publish_init(run_store, "CartPole-v1")
    warm = {"schema": "stellaris.learner-warmup/1", **ev(run_store, redis_url)}
    assert learner.handler({**warm, "compile": False})["warmed"] is False
    with pytest.raises(InvalidEvent, match="batch_size"):
        learner.handler({**warm, "batch_size": 0})
    with pytest.raises(InvalidEvent, match="trajectory_ids"):  # not a warm-up: an update
        learner.handler(ev(run_store, redis_url, mode="update", target_version=1))


def test_learner_store_errors_are_clear(run_store, redis_url):
    publish_init(run_store, "CartPole-v1")
    with pytest.raises(learner.MissingTrajectory, match="999-0"):
        learner.handler(ev(run_store, redis_url, trajectory_ids=["999-0"]))
    bad = run_store.traj.append({"kind": "trajectory"}, b"garbage-not-safetensors")
    with pytest.raises(CorruptBlob):
        learner.handler(ev(run_store, redis_url, trajectory_ids=[bad]))
    wrong = run_store.traj.append({}, encode({"x": np.zeros(1)}, {"kind": "gradient"}))
    with pytest.raises(CorruptBlob, match="not a trajectory"):
        learner.handler(ev(run_store, redis_url, trajectory_ids=[wrong]))
