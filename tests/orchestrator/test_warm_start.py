"""Warm start (``init_from``): a new run learns on from another run's checkpoint, its own
counters at zero; the lean PPO takes the same file."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from benchmarks.lean_ppo import train as lean_train
from functions.hyper import PPOHyper
from orchestrator.checkpoint import Checkpointer
from orchestrator.config import ConfigError, load_config
from orchestrator.run import PreflightError, train
from store import CorruptBlob

TINY = {
    "env": "CartPole-v1", "backend": "inline", "actors": 2, "n_envs": 4, "rollout_steps": 128,
    "learner_batch_steps": 512, "total_steps": 2048, "eval_interval_s": 0, "progress": "none",
    "hyper": {"update_epochs": 2, "num_minibatches": 4}, "aggregation": {"warmup_rounds": 1},
}


def _source(tmp_path: Path, redis_url: str) -> Path:
    """A short run's last checkpoint file."""
    run_dir = tmp_path / "source"
    train(load_config(None, {**TINY, "run_dir": str(run_dir), "redis_url": redis_url}))
    meta = json.loads((run_dir / "checkpoints" / "metadata.json").read_text())
    assert meta["version"] > 0 and meta["env_steps"] >= 2048
    return run_dir / "checkpoints" / meta["file"]


def test_a_warm_start_learns_on_from_the_checkpoint_with_its_own_counters(
        tmp_path: Path, redis_url: str) -> None:
    source = _source(tmp_path, redis_url)
    src, src_meta = Checkpointer(tmp_path / "scratch").load(source)
    run_dir = tmp_path / "warm"
    # a learning rate too small to move the weights: what the run ends with is what it loaded
    cfg = load_config(None, {**TINY, "run_dir": str(run_dir), "redis_url": redis_url,
                             "total_steps": 1024, "init_from": str(source),
                             "hyper": {**TINY["hyper"], "learning_rate": 1e-12}})
    summary = train(cfg)
    assert summary["failures"] == {"actor": 0, "learner": 0, "evaluator": 0}, summary["last_errors"]
    # this run's counters: its own env steps and versions, not the source's plus more
    assert 1024 <= summary["env_steps"] < src_meta["env_steps"]
    assert summary["version"] < src_meta["version"]
    end, _ = Checkpointer(run_dir).latest()  # type: ignore[misc]
    for name in ("actor.0.weight", "actor.4.weight", "critic.4.bias"):
        np.testing.assert_allclose(end[name], src[name], atol=1e-6)
    # the normalisers went on from the source's statistics (its count plus this run's steps)
    assert end["obs_rms.count"][0] >= src["obs_rms.count"][0] + 1024
    # and the Adam moments came along: the step count goes on from the source's
    assert end["optim.step.actor.0.weight"][0] > src["optim.step.actor.0.weight"][0]


def test_a_warm_start_refuses_a_missing_file_or_another_env(tmp_path: Path,
                                                            redis_url: str) -> None:
    with pytest.raises(ConfigError, match="init_from: no checkpoint file"):
        load_config(None, {**TINY, "init_from": str(tmp_path / "nope.safetensors")})
    source = _source(tmp_path, redis_url)
    cfg = load_config(None, {**TINY, "env": "Acrobot-v1", "run_dir": str(tmp_path / "other"),
                             "redis_url": redis_url, "init_from": str(source)})
    with pytest.raises(PreflightError, match="is a checkpoint of CartPole-v1, not Acrobot-v1"):
        train(cfg)
    # another architecture, or a file that is no checkpoint: one error naming the file
    cfg = load_config(None, {**TINY, "run_dir": str(tmp_path / "narrow"), "redis_url": redis_url,
                             "init_from": str(source), "policy": {"hidden_sizes": [32]}})
    with pytest.raises(PreflightError, match=r"init_from .*has shape"):
        train(cfg)
    junk = tmp_path / "junk.safetensors"
    junk.write_bytes(b"not a checkpoint")
    cfg = load_config(None, {**TINY, "run_dir": str(tmp_path / "junk"), "redis_url": redis_url,
                             "init_from": str(junk)})
    with pytest.raises(PreflightError, match="init_from .*junk.safetensors"):
        train(cfg)
    # each refused before anything was spent: no run folder written
    assert not any((tmp_path / d).exists() for d in ("other", "narrow", "junk"))


def test_the_lean_ppo_starts_from_a_stellaris_checkpoint(tmp_path: Path, redis_url: str) -> None:
    source = _source(tmp_path, redis_url)
    summary = lean_train("CartPole-v1", 0, tmp_path / "lean", total_steps=1024, n_envs=4,
                         rollout_steps=128, hyper=PPOHyper(update_epochs=1, num_minibatches=2),
                         compile=False, init_from=source)
    assert summary["env_steps"] == 1024
    assert json.loads((tmp_path / "lean" / "config.json").read_text())["init_from"] == str(source)
    # a policy of another shape is refused by name, not half loaded
    with pytest.raises(CorruptBlob, match="has shape"):
        lean_train("Acrobot-v1", 0, tmp_path / "lean2", total_steps=512, n_envs=4,
                   rollout_steps=128, compile=False, init_from=source)
