"""Stellaris's machinery adds no maths: a synchronous run (inline backend, one actor) publishes,
round by round, exactly the weights the lean single-process PPO's loop computes from the same
seeds — actor function, store round trips, the orchestrator's statistics merge and the
learner's update mode included. The benchmarks compare against that loop, so a difference in
env steps between them is not in this code path."""

from __future__ import annotations

import zlib
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from functions.actor import rollout
from functions.adam import ADAM_EPS, FlatAdam
from functions.batch import build_batch, group_rollouts
from functions.compiled import MinibatchLoss, ppo_step
from functions.envs import WarmEnv
from functions.epochs import minibatches
from functions.events import ActorEvent, LearnerEvent
from functions.hyper import PolicySpec
from functions.normalizer import RunningMeanStd
from functions.policy import build_policy, init_policy, load_policy_tensors
from functions.ppo import annealed_lr
from functions.warm import CachedPolicy
from orchestrator.config import load_config
from orchestrator.invokers import inline
from orchestrator.run import train
from store import RunStore, Store

SPEC = {"hidden_sizes": [16, 16]}


@pytest.mark.parametrize("anneal_lr", [False, True])
def test_sync_run_equals_the_lean_ppo_loop_bit_for_bit(tmp_path: Path, redis_url: str,
                                                      monkeypatch: pytest.MonkeyPatch,
                                                      anneal_lr: bool) -> None:
    events: list[tuple[str, dict[str, Any]]] = []
    submit = inline.InlineInvoker.submit

    def recording_submit(self: Any, function: str, event: dict[str, Any]) -> Any:
        events.append((function, dict(event)))  # observe the events, run them unchanged
        return submit(self, function, event)

    monkeypatch.setattr(inline.InlineInvoker, "submit", recording_submit)
    rounds = 3
    run_id = f"eq-anneal{int(anneal_lr)}"  # one Redis serves every test: its own keys
    cfg = load_config(None, {
        "env": "Pendulum-v1", "mode": "sync", "backend": "inline", "actors": 1, "n_envs": 4,
        "rollout_steps": 64, "learner_batch_steps": 256, "total_steps": 256 * rounds, "seed": 3,
        "redis_url": redis_url, "run_dir": str(tmp_path / run_id), "eval_interval_s": 0,
        "progress": "none", "experimental": {"learner_compile": False}, "policy": SPEC,
        "hyper": {"update_epochs": 2, "num_minibatches": 4, "anneal_lr": anneal_lr}})
    train(cfg)
    actors = [e for f, e in events if f == "actor"]
    learners = [e for f, e in events if f == "learner"]
    assert len(actors) == len(learners) == rounds

    # The lean PPO's loop (benchmarks/lean_ppo.py), fed the run's seeds and invocation ids.
    spec = PolicySpec(**SPEC)
    model, _ = init_policy("Pendulum-v1", spec, 3)
    adam = FlatAdam(model, lr=cfg.hyper.learning_rate, eps=ADAM_EPS)
    wenv = WarmEnv("Pendulum-v1", 4, ActorEvent(**actors[0]).seed)
    pol = CachedPolicy(0, model, RunningMeanStd((model.obs_dim,)), RunningMeanStd(()), {})
    rs = RunStore(Store(redis_url), run_id)
    for k in range(rounds):
        traj = rollout(wenv, pol, ActorEvent(**actors[k]))
        for rms, st in ((pol.obs_rms, traj.obs_stats), (pol.ret_rms, traj.ret_stats)):
            rms.merge(st["count"], st["mean"], st["var"])
        ev = LearnerEvent(**learners[k])
        if anneal_lr:  # the lean PPO's schedule: the budget used once the batch is sampled
            adam.set_lr(annealed_lr(cfg.hyper.learning_rate, (k + 1) / rounds))
        assert ev.hyper.learning_rate == adam.lr
        batch = build_batch(model, group_rollouts([traj], torch.device("cpu")), ev.hyper, [])
        gen = torch.Generator().manual_seed(
            (ev.seed * 1_000_003 + zlib.crc32(ev.invocation_id.encode())) % (2**63))
        loss_fn = MinibatchLoss(ev.hyper, compile=False)
        for _ in range(ev.hyper.update_epochs):
            for idx in minibatches(len(batch), ev.hyper, gen):
                ppo_step(loss_fn, model, batch, idx, adam, ev.hyper.max_grad_norm)
        snap = rs.params.get(k + 1)
        published = build_policy(snap.meta)
        obs_rms, ret_rms = load_policy_tensors(published, snap.tensors)
        for (name, a), b in zip(model.named_parameters(), published.parameters(), strict=True):
            assert torch.equal(a.detach(), b.detach()), (k + 1, name)
        np.testing.assert_array_equal(obs_rms.mean, pol.obs_rms.mean)
        np.testing.assert_array_equal(ret_rms.var, pol.ret_rms.var)
