"""The actor scaler and the budget stop rule."""

from __future__ import annotations

import csv
from pathlib import Path

from orchestrator.config import TrainConfig, load_config
from orchestrator.run import train
from orchestrator.scaler import ActorScaler


def test_fixed_by_default() -> None:
    cfg = load_config(None, {"actors": 3, "minutes": 1})
    assert ActorScaler(cfg).target(0, 0, 0) == 3


def test_autoscale_grows_when_learners_starve_and_shrinks_when_data_piles_up() -> None:
    cfg = load_config(None, {"actors": 2, "max_actors": 4, "autoscale": True, "minutes": 1,
                             "learner_batch_steps": 1000, "learners": 1})
    s = ActorScaler(cfg, period_s=0.0)
    assert s.target(2, backlog_steps=0, learners_busy=0) == 3
    assert s.target(3, 0, 0) == 4
    assert s.target(4, 0, 0) == 4  # capped at max_actors
    assert s.target(4, backlog_steps=5000, learners_busy=1) == 3
    for _ in range(10):
        s.target(3, 5000, 1)
    assert s.current == 1  # never below one


def _cartpole_run(run_dir: Path, redis_url: str, **fields: object) -> TrainConfig:
    """A small in-process CartPole run. Eager learners: a cold inductor cache (a wiped /tmp)
    bills ~15 s of compiling to the first learner invocation, which alone overshoots the
    tiny budgets here."""
    return load_config(None, {
        "env": "CartPole-v1", "backend": "inline", "eval_interval_s": 0, "progress": "none",
        "run_dir": str(run_dir), "redis_url": redis_url, "experimental": {"learner_compile": False},
        **fields})


def test_budget_stops_the_run(tmp_path: Path, redis_url: str) -> None:
    cfg = _cartpole_run(
        tmp_path / "b", redis_url, minutes=5, budget_usd=0.0002, n_envs=4, rollout_steps=128,
        learner_batch_steps=512, hyper={"update_epochs": 1, "num_minibatches": 4},
        autoscale=True, max_actors=3)
    summary = train(cfg)
    assert summary["wall_s"] < 120
    # Stops at the budget (plus what was already in flight when it was reached).
    assert 0.0002 <= summary["cost"]["total_usd"] < 0.0006


def test_stop_at_return_ends_the_run_on_a_logged_row(tmp_path: Path, redis_url: str) -> None:
    cfg = _cartpole_run(
        tmp_path / "s", redis_url, minutes=5, stop_at_return=10.0, n_envs=4, rollout_steps=128,
        learner_batch_steps=512, log_interval_s=0.5,
        hyper={"update_epochs": 1, "num_minibatches": 4})
    summary = train(cfg)
    assert summary["target_reached"] and summary["wall_s"] < 60  # not the 5-minute budget
    with open(tmp_path / "s" / "metrics.csv") as fh:
        returns = [r["episodic_return"] for r in csv.DictReader(fh) if r["episodic_return"]]
    assert max(float(r) for r in returns) >= 10.0  # the curve shows the target reached


def test_async_backpressure_keeps_at_most_the_actors_the_learners_can_feed() -> None:
    """Rollouts in flight never exceed the learners' next batches, so with the default
    8 envs x 256 steps one learner's 2,048-step batch feeds one actor: asking for more says
    so (and how to size rollouts for them); sync rounds and the default count stay quiet."""
    many = load_config(None, {"actors": 8, "minutes": 1})
    assert many.actors_fed == 2  # the lead and the filler of filler_envs = "auto"
    warning = many.idle_actors_warning()
    assert warning is not None and "at most 2 will run at once" in warning
    assert "--n-envs 1" in warning
    one = load_config(None, {"actors": 8, "minutes": 1, "experimental": {"filler_envs": 0}})
    assert one.actors_fed == 1 and "at most 1 will run at once" in (one.idle_actors_warning() or "")
    assert load_config(None, {"actors": 8, "n_envs": 1, "minutes": 1}).actors_fed == 8
    assert load_config(None, {"actors": 8, "n_envs": 1, "minutes": 1}).idle_actors_warning() is None
    assert load_config(None, {"minutes": 1}).idle_actors_warning() is None  # the default 2
    assert load_config(None, {"actors": 8, "mode": "sync", "minutes": 1}).idle_actors_warning() is None
    assert load_config(None, {"actors": 8, "learners": 4, "minutes": 1,
                              "experimental": {"learner_publishes": False}}).actors_fed == 4
    scaled = load_config(None, {"autoscale": True, "max_actors": 6, "minutes": 1})
    assert "6 actors asked for" in (scaled.idle_actors_warning() or "")


def test_a_run_with_more_actors_than_fed_warns_and_keeps_to_the_cap(
        tmp_path: Path, redis_url: str, capsys) -> None:
    cfg = _cartpole_run(
        tmp_path / "a", redis_url, total_steps=3072, actors=6, n_envs=2, rollout_steps=32,
        learner_batch_steps=128, log_interval_s=0.1,
        hyper={"update_epochs": 1, "num_minibatches": 2})
    assert cfg.actors_fed == 2
    train(cfg)
    assert "6 actors asked for, but at most 2 will run at once" in capsys.readouterr().err
    with open(tmp_path / "a" / "metrics.csv") as fh:
        in_flight = [int(r["actors_in_flight"]) for r in csv.DictReader(fh)
                     if r["actors_in_flight"]]
    assert in_flight and max(in_flight) <= 2


def test_actors_ask_for_a_lower_priority_only_where_they_have_processes_of_their_own() -> None:
    """inline actors are orchestrator threads and Ray's workers may run a learner next: a
    niceness they cannot give back must not reach them."""
    for backend, expected in (("local", 7), ("lambda", 7), ("inline", 0), ("ray", 0)):
        cfg = load_config(None, {"backend": backend, "experimental": {"actor_nice": 7},
                                 "minutes": 1})
        assert cfg.actor_event_nice == expected, backend
    assert load_config(None, {"backend": "local", "minutes": 1}).actor_event_nice == 0
