"""The learner's whole minibatch step compiled as one graph: the same updates as the eager
reference (``functions.compiled.ppo_step``) to float rounding, on the optimizer's own state,
no recompiling per invocation, and the eager step when compiling is impossible."""

from __future__ import annotations

import logging

import pytest
import torch
import torch._dynamo.utils as dynamo_utils

from functions.adam import ADAM_EPS, FlatAdam
from functions.batch import synthetic_batch
from functions.compiled import Fallback, MinibatchLoss, ppo_step
from functions.fused import FusedStep
from functions.hyper import PPOHyper
from functions.policy import init_policy


def _setup(env_id: str, seed: int, lr: float = 3e-4) -> tuple[torch.nn.Module, FlatAdam]:
    model, _ = init_policy(env_id, seed=seed)
    return model, FlatAdam(model, lr=lr, eps=ADAM_EPS)


def _minibatches(n: int, size: int, seed: int) -> list[torch.Tensor]:
    perm = torch.randperm(n, generator=torch.Generator().manual_seed(seed))
    return list(perm.split(size))


@pytest.mark.parametrize(("env_id", "is_correction", "k"), [
    ("Hopper-v5", "decoupled", 0), ("Pendulum-v1", "truncate", 2), ("CartPole-v1", "none", 0),
])
def test_fused_step_matches_the_eager_reference(env_id: str, is_correction: str, k: int) -> None:
    hyper = PPOHyper(is_correction=is_correction)
    ref_model, ref_adam = _setup(env_id, seed=4)
    model, adam = _setup(env_id, seed=4)
    batch = synthetic_batch(model, 512, k=k)
    ref_loss = MinibatchLoss(hyper, compile=False)
    step = FusedStep(hyper, MinibatchLoss(hyper, compile=True), fused=True)
    for epoch in range(3):  # 96 Adam steps: the moments and bias corrections move
        for idx in _minibatches(len(batch), 16, epoch):
            ref_stats = ppo_step(ref_loss, ref_model, batch, idx, ref_adam, hyper.max_grad_norm)
            stats = step(model, batch, idx, adam)
            assert stats.keys() == ref_stats.keys()
            for key in ref_stats:
                torch.testing.assert_close(stats[key], ref_stats[key], rtol=1e-4, atol=1e-5)
    assert step.steps_fused == 96
    torch.testing.assert_close(adam.flat, ref_adam.flat, rtol=1e-4, atol=1e-6)
    # the step wrote the optimizer's own state: what checkpoints and the store save
    state, ref_state = adam.state_arrays(), ref_adam.state_arrays()
    assert state.keys() == ref_state.keys()
    for key in ref_state:
        torch.testing.assert_close(torch.as_tensor(state[key]), torch.as_tensor(ref_state[key]),
                                   rtol=1e-4, atol=1e-7)
    # and the module's parameters are views into what it updated
    for p, ref in zip(model.parameters(), ref_model.parameters(), strict=True):
        torch.testing.assert_close(p, ref, rtol=1e-4, atol=1e-6)


def test_fused_step_continues_a_loaded_optimizer_state_and_follows_the_rate() -> None:
    """An Adam state saved by an earlier update (the store's) is continued, not restarted;
    a new learning rate (annealing) is taken without compiling again."""
    hyper = PPOHyper()
    model, adam = _setup("Pendulum-v1", seed=2)
    batch = synthetic_batch(model, 256)
    warm = FusedStep(hyper, MinibatchLoss(hyper, compile=True), fused=True)
    for idx in _minibatches(len(batch), 32, 0):
        warm(model, batch, idx, adam)
    saved = adam.state_arrays()
    ref_model, ref_adam = _setup("Pendulum-v1", seed=2)
    ref_model.load_state_dict(model.state_dict())
    assert ref_adam.load_state_arrays(saved) and adam.load_state_arrays(saved)
    before = dict(dynamo_utils.counters["stats"])
    step = FusedStep(hyper, MinibatchLoss(hyper, compile=True), fused=True)
    ref_loss = MinibatchLoss(hyper, compile=False)
    for lr in (2e-4, 1e-4):
        adam.set_lr(lr)
        ref_adam.set_lr(lr)
        for idx in _minibatches(len(batch), 32, 1):
            step(model, batch, idx, adam)
            ppo_step(ref_loss, ref_model, batch, idx, ref_adam, hyper.max_grad_norm)
    assert float(adam.optimizer.state[adam.flat]["step"]) == 8 + 16
    torch.testing.assert_close(adam.flat, ref_adam.flat, rtol=1e-4, atol=1e-6)
    # a new invocation's step and module, a new rate: the graph compiled once is reused
    assert dynamo_utils.counters["stats"]["unique_graphs"] == before.get("unique_graphs", 0)


def _step_beside_the_reference(step: FusedStep, env_id: str, seed: int, n: int,
                               size: int) -> tuple[FlatAdam, FlatAdam]:
    """``step`` and the eager reference over the same minibatches of one synthetic batch,
    from the same initial policy; their optimizers (the parameters are views into them)."""
    hyper = step.hyper
    model, adam = _setup(env_id, seed=seed)
    ref_model, ref_adam = _setup(env_id, seed=seed)
    batch = synthetic_batch(model, n)
    ref_loss = MinibatchLoss(hyper, compile=False)
    for idx in _minibatches(n, size, 0):
        step(model, batch, idx, adam)
        ppo_step(ref_loss, ref_model, batch, idx, ref_adam, hyper.max_grad_norm)
    return adam, ref_adam


def test_fused_step_compile_failure_steps_eagerly_once(monkeypatch, caplog,
                                                       broken_torch_compile) -> None:
    monkeypatch.setattr(FusedStep, "_compiled", {})
    monkeypatch.setattr(Fallback, "failed", False)
    hyper = PPOHyper()
    step = FusedStep(hyper, MinibatchLoss(hyper, compile=False), fused=True)
    with caplog.at_level(logging.WARNING, logger="functions.compiled"):
        adam, ref_adam = _step_beside_the_reference(step, "Pendulum-v1", 1, 64, 16)
    assert "no working C++ compiler" in caplog.text and step.steps_fused == 0
    assert torch.equal(adam.flat, ref_adam.flat)  # the eager step, exactly
    assert Fallback.failed  # later invocations do not try (and pay for) compiling again


def test_unfused_step_is_the_eager_reference_bit_for_bit() -> None:
    """``learner_compile=False`` keeps the learner bit-identical to the reference loop."""
    hyper = PPOHyper()
    step = FusedStep(hyper, MinibatchLoss(hyper, compile=False), fused=False)
    adam, ref_adam = _step_beside_the_reference(step, "Hopper-v5", 5, 128, 32)
    assert step.steps_fused == 0 and torch.equal(adam.flat, ref_adam.flat)
