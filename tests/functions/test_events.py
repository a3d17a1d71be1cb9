"""Event validation: defaults and schema strings, invocation ids, bad events named by field,
and handlers that refuse a bad event before any work."""

from __future__ import annotations

import json

import pytest

from functions import actor, evaluator, learner
from functions.events import (
    ActorEvent,
    EvaluatorEvent,
    InvalidEvent,
    LearnerEvent,
    parse_event,
)
from functions.hyper import PolicySpec, PPOHyper


def test_defaults_and_schema_strings() -> None:
    ev = parse_event(ActorEvent, {"run_id": "r", "env_id": "CartPole-v1"})
    assert (ev.n_envs, ev.steps, ev.policy_version, ev.schema_) == (8, 256, "latest",
                                                                     "stellaris.actor/1")
    assert ev.to_event()["schema"] == "stellaris.actor/1"
    assert parse_event(ActorEvent, ev.to_event()) == ev  # wire form round-trips
    assert parse_event(ActorEvent, json.dumps(ev.to_event())) == ev
    le = parse_event(LearnerEvent, {"run_id": "r", "trajectory_ids": ["1-0"]})
    assert le.schema_ == "stellaris.learner/1" and le.hyper == PPOHyper()
    assert le.hyper.is_correction == "decoupled" and le.hyper.gae_values == "learner"
    assert le.hyper.num_minibatches == 32
    ee = parse_event(EvaluatorEvent, {"run_id": "r", "schema": "stellaris.evaluator/1"})
    assert ee.episodes == 5
    assert PolicySpec().hidden_sizes == [64, 64] and PolicySpec().activation == "tanh"


def test_invocation_id_from_context_or_fresh() -> None:
    class Ctx:
        aws_request_id = "req-123"

    assert parse_event(ActorEvent, {"run_id": "r", "env_id": "E"}, Ctx()).invocation_id == "req-123"
    a = parse_event(ActorEvent, {"run_id": "r", "env_id": "E"}).invocation_id
    b = parse_event(ActorEvent, {"run_id": "r", "env_id": "E"}).invocation_id
    assert a and b and a != b


@pytest.mark.parametrize(
    ("cls", "event", "field"),
    [
        (ActorEvent, {"run_id": "r"}, "env_id"),
        (ActorEvent, {"run_id": "r", "env_id": "E", "n_envs": 0}, "n_envs"),
        (ActorEvent, {"run_id": "r", "env_id": "E", "policy_version": "newest"}, "policy_version"),
        (ActorEvent, {"run_id": "r", "env_id": "E", "obs": [[1.0]]}, "obs"),
        (ActorEvent, {"run_id": "bad id!", "env_id": "E"}, "run_id"),
        (ActorEvent, {"run_id": "r", "env_id": "E", "schema": "stellaris.actor/2"}, "schema"),
        (LearnerEvent, {"run_id": "r", "trajectory_ids": []}, "trajectory_ids"),
        (LearnerEvent, {"run_id": "r", "trajectory_ids": ["1-0"], "mode": "train"}, "mode"),
        (LearnerEvent, {"run_id": "r", "trajectory_ids": ["1-0"], "mode": "update"},
         "target_version"),
        (LearnerEvent, {"run_id": "r", "trajectory_ids": ["1-0"],
                        "hyper": {"is_correction": "clip"}}, "hyper.is_correction"),
        (LearnerEvent, {"run_id": "r", "trajectory_ids": ["1-0"], "hyper": {"rho_bar": 0.5}},
         "hyper.rho_bar"),
        (LearnerEvent, {"run_id": "r", "trajectory_ids": ["1-0"], "hyper": {"lr": 1.0}},
         "hyper.lr"),
        (LearnerEvent, {"run_id": "r", "trajectory_ids": ["1-0"], "obs_stats": {"mean": 0}},
         "obs_stats"),
        (LearnerEvent, {"run_id": "r", "trajectory_ids": ["1-0"], "device": "tpu"}, "device"),
        (EvaluatorEvent, {"run_id": "r", "episodes": 0}, "episodes"),
    ],
)
def test_bad_events_name_the_field(cls, event, field) -> None:
    with pytest.raises(InvalidEvent, match=field.replace(".", r"\.")):
        parse_event(cls, event)


def test_non_object_events() -> None:
    with pytest.raises(InvalidEvent, match="JSON object"):
        parse_event(ActorEvent, [1, 2])
    with pytest.raises(InvalidEvent, match="not valid JSON"):
        parse_event(ActorEvent, "{nope")
    assert issubclass(InvalidEvent, ValueError)


def test_bad_events_fail_before_any_work():
    nowhere = "redis://127.0.0.1:1/0"  # would hang in retries if the handler touched it
    with pytest.raises(InvalidEvent, match="n_envs"):
        actor.handler({"run_id": "r", "redis_url": nowhere, "env_id": "CartPole-v1",
                       "n_envs": -1})
    with pytest.raises(InvalidEvent, match="trajectory_ids"):
        learner.handler({"run_id": "r", "redis_url": nowhere})
    with pytest.raises(InvalidEvent, match="max_steps"):
        evaluator.handler({"run_id": "r", "redis_url": nowhere, "max_steps": "many"})
