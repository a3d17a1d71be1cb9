"""The minibatch step behind one interface: what ``make_step`` chooses, each choice the eager
reference's maths, one fallback rule for all of them, and the compile-ahead warm-ups."""

from __future__ import annotations

import logging

import torch

from functions.adam import ADAM_EPS, FlatAdam
from functions.batch import synthetic_batch
from functions.compiled import Fallback, MinibatchLoss, clipped_grad, ppo_step
from functions.epochs import minibatches
from functions.fused import FusedStep
from functions.graphed import can_graph
from functions.hyper import PPOHyper
from functions.policy import init_policy
from functions.step import make_step, warm, warm_cache


def _policy(seed: int = 1) -> tuple[torch.nn.Module, FlatAdam]:
    model, _ = init_policy("Pendulum-v1", seed=seed)
    return model, FlatAdam(model, lr=3e-4, eps=ADAM_EPS)


def test_a_gradient_only_step_is_the_clipped_gradient_of_the_loss() -> None:
    hyper = PPOHyper()
    model, _ = init_policy("Pendulum-v1", seed=1)
    batch = synthetic_batch(model, 128)
    step = make_step(hyper, model, batch)
    idx = torch.arange(32)
    grad = step(model, batch, idx)
    ref, stats = clipped_grad(MinibatchLoss(hyper, compile=False), model,
                              list(model.parameters()), batch, idx, hyper.max_grad_norm)
    assert grad is not None and torch.equal(grad, ref)
    assert step.stats.n == 1 and step.index_device is None and step.fused is None
    assert step.result()["losses/approx_kl"] == float(stats["approx_kl"])
    assert not step.compiled and step.replays == 0


def test_an_uncompiled_optimizer_step_is_the_eager_reference_bit_for_bit() -> None:
    """``learner_compile=False``: the sync learner and the lean PPO step exactly as
    :func:`ppo_step` (tests/orchestrator/test_equivalence.py relies on it)."""
    hyper = PPOHyper()
    (model, adam), (ref_model, ref_adam) = _policy(), _policy()
    batch = synthetic_batch(model, 128)
    step = make_step(hyper, model, batch, adam=adam)
    ref_loss = MinibatchLoss(hyper, compile=False)
    for idx in minibatches(len(batch), hyper.model_copy(update={"num_minibatches": 4}),
                           torch.Generator().manual_seed(0)):
        assert step(model, batch, idx) is None
        ppo_step(ref_loss, ref_model, batch, idx, ref_adam, hyper.max_grad_norm)
    assert torch.equal(adam.flat, ref_adam.flat)
    assert step.stats.n == 4 and step.fused_steps == 0 and not step.compiled


def test_a_compiled_optimizer_step_on_the_cpu_is_the_fused_one() -> None:
    hyper = PPOHyper()
    model, adam = _policy()
    batch = synthetic_batch(model, 128)
    step = make_step(hyper, model, batch, compile=True, adam=adam, cuda_graph=True)
    step(model, batch, torch.arange(32))
    assert step.fused_steps == 1 and step.compiled and step.graphed is None  # CPU: no graph


def test_one_failed_compile_leaves_every_step_eager_and_says_so_once(
        monkeypatch, caplog, broken_torch_compile) -> None:
    monkeypatch.setattr(Fallback, "failed", False)
    monkeypatch.setattr(MinibatchLoss, "_compiled", {})
    monkeypatch.setattr(FusedStep, "_compiled", {})
    hyper = PPOHyper()
    (model, adam), (ref_model, ref_adam) = _policy(), _policy()
    batch = synthetic_batch(model, 128)
    step = make_step(hyper, model, batch, compile=True, adam=adam)
    with caplog.at_level(logging.WARNING, logger="functions.compiled"):
        for idx in (torch.arange(32), torch.arange(32, 64)):
            step(model, batch, idx)
            ppo_step(MinibatchLoss(hyper, compile=False), ref_model, batch, idx, ref_adam,
                     hyper.max_grad_norm)
    assert torch.equal(adam.flat, ref_adam.flat)  # the eager reference, exactly
    assert caplog.text.count("steps eagerly from now on") == 1
    assert Fallback.failed and step.fused_steps == 0 and not step.compiled
    # the process remembers, for every kind of step
    assert not make_step(hyper, model, batch, compile=True).compiled
    assert not can_graph(torch.device("cuda"), True, vtrace=False)


def test_warm_compiles_the_step_and_puts_the_weights_back() -> None:
    hyper = PPOHyper(clip_coef=0.125)  # a loss no other test compiles
    model, _ = init_policy("CartPole-v1", seed=0)
    before = torch.cat([p.detach().reshape(-1) for p in model.parameters()]).clone()
    assert warm(hyper, model, [86, 85], batch_size=256, update=True)
    assert warm(hyper, model, [86, 85], batch_size=256, update=False)
    after = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    assert torch.equal(before, after)
    assert all(p.grad is None for p in model.parameters())


def test_warm_cache_compiles_for_an_env() -> None:
    for env_id in ("Pendulum-v1", "CartPole-v1"):  # continuous and discrete actions
        assert warm_cache(env_id, batch=128, minibatch=16) > 0


def test_warm_cache_compiles_with_the_functions_one_thread(monkeypatch) -> None:
    """Inductor's CPU kernels depend on the thread count: a cache warmed with a machine's
    every thread is cold for the one-thread learners and lean PPO that it is warmed for."""
    from functions.fused import FusedStep

    seen: list[int] = []
    original = FusedStep.__call__

    def spy(self, *args, **kwargs):
        seen.append(torch.get_num_threads())
        return original(self, *args, **kwargs)

    monkeypatch.setattr(FusedStep, "__call__", spy)
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        warm_cache("Pendulum-v1", batch=128, minibatch=16)
        assert seen == [1]
        assert torch.get_num_threads() == 2  # the caller's setting, restored
    finally:
        torch.set_num_threads(before)

