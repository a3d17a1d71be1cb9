"""The learner's minibatch loss through torch.compile: same loss, same gradients, and the
eager fallback when compiling is impossible (the one rule, :class:`Fallback`)."""

from __future__ import annotations

import logging

import pytest
import torch

from functions import compiled
from functions.batch import Flat, synthetic_batch
from functions.compiled import Fallback, MinibatchLoss
from functions.hyper import PPOHyper
from functions.policy import init_policy


def _grads(model: torch.nn.Module, fn: MinibatchLoss, b: Flat, idx: torch.Tensor):
    model.zero_grad(set_to_none=True)
    loss, stats = fn(model, b, idx)
    loss.backward()
    flat = torch.cat([p.grad.reshape(-1) for p in model.parameters()])
    return loss.detach(), {k: v.detach() for k, v in stats.items()}, flat


@pytest.mark.parametrize("is_correction", ["decoupled", "truncate", "none"])
def test_compiled_loss_matches_eager(is_correction: str) -> None:
    hyper = PPOHyper(is_correction=is_correction)
    model, _ = init_policy("Hopper-v5", seed=3)
    b = synthetic_batch(model, 256, k=2 if is_correction == "truncate" else 0)
    eager, comp = MinibatchLoss(hyper, compile=False), MinibatchLoss(hyper, compile=True)
    assert comp.compiled and not eager.compiled
    # two minibatch sizes: the second one makes the compiled graph generalise its shapes
    for idx in (torch.arange(0, 256, 4), torch.arange(7, 200, 3)):
        loss_e, stats_e, grad_e = _grads(model, eager, b, idx)
        loss_c, stats_c, grad_c = _grads(model, comp, b, idx)
        torch.testing.assert_close(loss_c, loss_e, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(grad_c, grad_e, rtol=1e-4, atol=1e-6)
        assert stats_c.keys() == stats_e.keys()
        for key in stats_e:
            torch.testing.assert_close(stats_c[key], stats_e[key], rtol=1e-5, atol=1e-6)
    assert comp.compiled  # it compiled, it did not fall back


def test_compile_failure_falls_back_to_eager_once(monkeypatch, caplog,
                                                  broken_torch_compile) -> None:
    """No C++ compiler, an unsupported op...: the learner warns and goes on eagerly."""
    monkeypatch.setattr(compiled.MinibatchLoss, "_compiled", {})
    monkeypatch.setattr(Fallback, "failed", False)
    hyper = PPOHyper()
    model, _ = init_policy("Pendulum-v1", seed=1)
    b = synthetic_batch(model, 64)
    fn = MinibatchLoss(hyper, compile=True)
    with caplog.at_level(logging.WARNING, logger="functions.compiled"):
        loss, _, grad = _grads(model, fn, b, torch.arange(32))
    assert not fn.compiled and "no working C++ compiler" in caplog.text
    ref_loss, _, ref_grad = _grads(model, MinibatchLoss(hyper, compile=False), b, torch.arange(32))
    assert torch.equal(loss, ref_loss) and torch.equal(grad, ref_grad)
    # the process remembers: later invocations do not try (and pay for) compiling again
    assert not MinibatchLoss(hyper, compile=True).compiled


def test_a_real_error_still_raises(monkeypatch) -> None:
    """The fallback is for compiling, not for bad data: eager raises, compiling stays on."""
    monkeypatch.setattr(Fallback, "failed", False)
    hyper = PPOHyper()
    model, _ = init_policy("Pendulum-v1", seed=1)
    b = synthetic_batch(model, 64)
    b.obs = torch.cat([b.obs, b.obs[:, :1]], dim=1)  # observations of the wrong width
    with pytest.raises(RuntimeError):
        MinibatchLoss(hyper, compile=True)(model, b, torch.arange(32))
    assert MinibatchLoss(hyper, compile=True).compiled


def test_compile_fn_trusts_the_cpu_flags_unless_told(monkeypatch) -> None:
    import torch._inductor.config as inductor_config

    monkeypatch.delenv(compiled.VEC_ISA_ENV, raising=False)
    monkeypatch.setattr(inductor_config.cpp, "vec_isa_ok", None)
    compiled.compile_fn(torch.tanh)
    assert inductor_config.cpp.vec_isa_ok is True
    # whoever runs us set torch's own switch: theirs to keep
    monkeypatch.setenv(compiled.VEC_ISA_ENV, "0")
    monkeypatch.setattr(inductor_config.cpp, "vec_isa_ok", False)
    compiled.compile_fn(torch.tanh)
    assert inductor_config.cpp.vec_isa_ok is False


def _probes_in_a_new_process(compile_with: str) -> int:
    import os
    import subprocess
    import sys

    script = f"""
import torch, torch._inductor.cpu_vec_isa as isa
from functions import compiled
probes = []
isa.VecISA._probe_load = lambda self, path: probes.append(path) or True
torch.set_num_threads(1)
x = torch.randn(64, 16)
fn = {compile_with}(lambda x: torch.tanh(x * 2.0 + 1.0).sum(-1))
assert torch.allclose(fn(x), torch.tanh(x * 2.0 + 1.0).sum(-1), atol=1e-5)
print("probes", len(probes))
"""
    env = {k: v for k, v in os.environ.items() if k != compiled.VEC_ISA_ENV}
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         env=env, timeout=300, check=True).stdout
    return int(out.split("probes")[-1])


def test_a_new_process_compiles_with_fewer_isa_probes() -> None:
    """What a new execution environment skips (a fresh process: a process probes once): the
    base ISAs' probe subprocesses; the kernel still builds, vectorised, and is right."""
    ours, torchs = (_probes_in_a_new_process("compiled.compile_fn"),
                    _probes_in_a_new_process("torch.compile"))
    assert ours == 0 or ours < torchs, (ours, torchs)
