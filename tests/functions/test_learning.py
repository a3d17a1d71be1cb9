"""Learning checks: the sync path (handlers in a loop, update mode) really learns.

Default PPOHyper (10 epochs x 32 minibatches, IS correction ``truncate``), 8 envs x 256 steps
per round. Bounded: each check stops as soon as its target is met.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from sync_loop import run_sync  # noqa: E402

from functions import evaluator  # noqa: E402

pytestmark = pytest.mark.slow


def test_sync_ppo_solves_cartpole(run_store, redis_url):
    history = run_sync(run_store, redis_url, "CartPole-v1", rounds=40, eval_every=2,
                       eval_episodes=10, stop_at=475.0)
    final = evaluator.handler({"run_id": run_store.run_id, "redis_url": redis_url,
                               "episodes": 20, "seed": 123, "max_steps": 500})
    assert final["mean_return"] >= 450, (final, history[-5:])


def test_sync_ppo_improves_inverted_pendulum(run_store, redis_url):
    history = run_sync(run_store, redis_url, "InvertedPendulum-v5", rounds=20, eval_every=2,
                       stop_at=900.0)
    start = history[0]["eval_return"]  # version 0, evaluated before training
    end = evaluator.handler({"run_id": run_store.run_id, "redis_url": redis_url,
                             "episodes": 5, "seed": 7})["mean_return"]
    assert end >= 500 and end >= 10 * start, (start, end, history)
