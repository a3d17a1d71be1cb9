"""The actor scaler and the budget stop rule."""

from __future__ import annotations

import csv
from pathlib import Path

from orchestrator.config import load_config
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


def test_budget_stops_the_run(tmp_path: Path, redis_url: str) -> None:
    cfg = load_config(None, {
        "env": "CartPole-v1", "backend": "inline", "minutes": 5, "budget_usd": 0.0002,
        "n_envs": 4, "rollout_steps": 128, "learner_batch_steps": 512, "eval_interval_s": 0,
        "progress": "none", "run_dir": str(tmp_path / "b"), "redis_url": redis_url,
        "hyper": {"update_epochs": 1, "num_minibatches": 4},
        "autoscale": True, "max_actors": 3,
        # eager: a cold inductor cache (a wiped /tmp) bills ~15 s of compiling to the first
        # learner invocation, which alone overshoots this tiny budget
        "learner_compile": False,
    })
    summary = train(cfg)
    assert summary["wall_s"] < 120
    # Stops at the budget (plus what was already in flight when it was reached).
    assert 0.0002 <= summary["cost"]["total_usd"] < 0.0006


def test_stop_at_return_ends_the_run_on_a_logged_row(tmp_path: Path, redis_url: str) -> None:
    cfg = load_config(None, {
        "env": "CartPole-v1", "backend": "inline", "minutes": 5, "stop_at_return": 10.0,
        "n_envs": 4, "rollout_steps": 128, "learner_batch_steps": 512, "eval_interval_s": 0,
        "progress": "none", "run_dir": str(tmp_path / "s"), "redis_url": redis_url,
        "log_interval_s": 0.5, "hyper": {"update_epochs": 1, "num_minibatches": 4},
        "learner_compile": False,
    })
    summary = train(cfg)
    assert summary["target_reached"] and summary["wall_s"] < 60  # not the 5-minute budget
    with open(tmp_path / "s" / "metrics.csv") as fh:
        returns = [r["episodic_return"] for r in csv.DictReader(fh) if r["episodic_return"]]
    assert max(float(r) for r in returns) >= 10.0  # the curve shows the target reached
