"""Both async paths learn, end to end through train(): the one-learner default (a learner
that publishes its updates) and the paper's path (four learners whose gradients the
orchestrator aggregates, ``--preset paper``). InvertedPendulum-v5: a random policy's
episodes end within ~10 steps (return ~5-10); the threshold is far above what it reaches.
Each run stops as soon as the mean return of its last 100 episodes passes it."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.config import load_config
from orchestrator.run import train

pytestmark = pytest.mark.slow

TARGET = 150.0
BASE = {"env": "InvertedPendulum-v5", "backend": "inline", "progress": "none",
        "eval_interval_s": 0, "stop_at_return": TARGET, "seed": 3}


def test_the_one_learner_default_learns(tmp_path: Path, redis_url: str) -> None:
    cfg = load_config(None, {**BASE, "minutes": 3, "run_dir": str(tmp_path / "default"),
                             "redis_url": redis_url})
    assert cfg.training_path == "one publishing learner (pipelined PPO)"
    summary = train(cfg)
    assert summary["target_reached"], (summary["mean_return"], summary["env_steps"])
    assert summary["mean_return"] >= TARGET


def test_the_papers_four_learner_path_learns(tmp_path: Path, redis_url: str) -> None:
    cfg = load_config(None, {**BASE, "preset": "paper", "minutes": 5,
                             "run_dir": str(tmp_path / "paper"), "redis_url": redis_url})
    assert cfg.training_path == "aggregation (4 learners)"
    assert (cfg.actors, cfg.n_envs, cfg.rollout_steps) == (16, 1, 256)
    summary = train(cfg)
    assert summary["target_reached"], (summary["mean_return"], summary["env_steps"],
                                       summary["last_errors"])
    # it learned through aggregation: stale gradients, weighed, against the others' policies
    assert summary["aggregations"] > 0 and summary["rounds"] > 0
    assert summary["is_others_mean"] > 0.5
    assert summary["is_versions_missing"] == 0, summary["last_errors"]
