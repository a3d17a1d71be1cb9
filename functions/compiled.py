"""The learner's minibatch loss and gradient, eager or through ``torch.compile``, and the one
rule for a step that fails to compile.

A PPO minibatch on Hopper is 64 samples through two 64x64 MLPs: microseconds of arithmetic
behind ~100 tensor ops forward and as many backward, each a few microseconds of dispatch.
Eagerly that is the learner's whole cost; compiled (inductor fuses the gathers, the Gaussian
log-prob and the clipped surrogate into a few C++ kernels, forward and backward) it is about
half (docs/decisions.md#learner-compile). Same maths, same code: the compiled function calls
:func:`functions.ppo.ppo_loss` and the policy's methods.

Costs and limits, and why compiling is a choice (``learner_compile``) rather than a given:
the first compile in a process takes ~2 s with inductor's on-disk cache warm and ~15 s cold
(a fresh machine, or a Lambda execution environment: the cache lives in ``/tmp``), and it
needs a C++ compiler on the machine. When compiling fails the learner says so once and goes
on eagerly (:class:`Fallback`); results are the same to float rounding.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from typing import Any, TypeVar

import torch

from functions import ppo
from functions.adam import FlatAdam, flat_grad
from functions.hyper import PPOHyper

log = logging.getLogger(__name__)

LossFn = Callable[..., tuple[torch.Tensor, dict[str, torch.Tensor]]]
T = TypeVar("T")

# torch's own switch for the probe below; one set by whoever runs us is theirs to keep
VEC_ISA_ENV = "TORCHINDUCTOR_VEC_ISA_OK"


def compile_fn(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``torch.compile(fn)``, with the CPU's vector ISAs taken from its flags.

    Before its first CPU kernel, every new process of inductor proves each vector ISA that
    ``/proc/cpuinfo`` reports by compiling a probe library and ``dlopen``-ing it in a fresh
    Python subprocess: six subprocesses here, ~1 s of a learner's first invocation, paid again
    by each execution environment's cold start. Linux reports an ISA only where the kernel
    enabled it, so the base ISAs are trusted instead (torch's ``cpp.vec_isa_ok``, as Meta's own
    builds do); AVX-512's bf16 and VNNI extensions still probe. A learner's first invocation
    on Hopper went from 5.3 to 4.1 s (three runs each). Should a kernel then fail to build,
    the step falls back as for any failed compile.
    """
    if VEC_ISA_ENV not in os.environ:
        import torch._inductor.config as inductor_config  # here: a second to import

        inductor_config.cpp.vec_isa_ok = True
    return torch.compile(fn)


class Fallback:
    """The one rule for every accelerated step (a compiled loss, a compiled whole step, a
    CUDA graph): its first call proves it.

    If that call raises, the eager step runs with the same arguments and decides: its error
    (bad data fails eagerly too) is the learner's to raise; if it succeeds, what failed was
    compiling (or capturing), so this process steps eagerly from then on — said once, kept in
    :attr:`failed` so that later invocations do not try (and pay for) it again. Compiling and
    capturing happen before anything runs, so the eager rerun never repeats an update.
    """

    failed = False

    @classmethod
    def prove(cls, fast: Callable[[], Any], eager: Callable[[], T],
              what: str) -> tuple[Any, bool]:
        """``(fast(), True)``, or ``(eager(), False)`` where ``fast`` raised."""
        try:
            return fast(), True
        except Exception as exc:  # noqa: BLE001 - whatever failed, eager decides below
            out = eager()
            if not cls.failed:
                first = (str(exc).splitlines() or [""])[0][:200]
                log.warning("%s failed (%s: %s); the learner steps eagerly from now on", what,
                            type(exc).__name__, first)
            cls.failed = True
            return out, False


def loss_kwargs(hyper: PPOHyper) -> dict[str, Any]:
    """The hyper-parameters the loss depends on (not lr, epochs, gamma...)."""
    return dict(clip_coef=hyper.clip_coef, ent_coef=hyper.ent_coef, vf_coef=hyper.vf_coef,
                # batch scope: build_batch standardized them already, the loss must not again
                norm_adv=hyper.norm_adv and hyper.norm_adv_scope == "minibatch",
                clip_vloss=hyper.clip_vloss,
                is_correction=hyper.is_correction, rho_bar=hyper.rho_bar)


def loss_terms(kwargs: dict[str, Any]) -> LossFn:
    """The loss of minibatch ``idx`` of a flat batch, hyper-parameters bound as constants
    (the compiled graph specialises on them instead of guarding on a pydantic object)."""

    def loss(model: torch.nn.Module, idx: torch.Tensor, obs: torch.Tensor,
             actions: torch.Tensor, logprobs: torch.Tensor, advantages: torch.Tensor,
             returns: torch.Tensor, values: torch.Tensor, logratio_others: torch.Tensor,
             logprobs_prox: torch.Tensor) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        mb_obs = obs[idx]
        newlogprob, entropy = model.log_prob_entropy(mb_obs, actions[idx])
        newvalue = model.get_value(mb_obs)
        return ppo.ppo_loss(
            newlogprob, entropy, newvalue, logprobs[idx], advantages[idx], returns[idx],
            values[idx], logratio_others=logratio_others[idx],
            logprob_prox=logprobs_prox[idx], **kwargs)

    return loss


class MinibatchLoss:
    """``loss(model, batch, idx) -> (loss, stats)``, compiled when asked and possible."""

    _lock = threading.Lock()
    # per loss hyper-parameters, shared by a process's threads
    _compiled: dict[tuple[tuple[str, Any], ...], LossFn] = {}

    def __init__(self, hyper: PPOHyper, compile: bool) -> None:
        kwargs = loss_kwargs(hyper)
        self.eager = loss_terms(kwargs)
        self.fn: LossFn = self.eager
        if compile and not Fallback.failed:
            key = tuple(sorted(kwargs.items()))
            with MinibatchLoss._lock:
                if key not in MinibatchLoss._compiled:
                    # dynamic=None: specialise on the first shapes, generalise if they vary
                    MinibatchLoss._compiled[key] = compile_fn(self.eager)
                self.fn = MinibatchLoss._compiled[key]
        self.proven = self.fn is self.eager  # eager needs no proof

    @property
    def compiled(self) -> bool:
        return self.fn is not self.eager

    def __call__(self, model: torch.nn.Module, b: Any,
                 idx: torch.Tensor) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        args = (model, idx, b.obs, b.actions, b.logprobs, b.advantages, b.returns, b.values,
                b.logratio_others, b.logprobs_prox)
        if self.proven:
            return self.fn(*args)
        if Fallback.failed:  # another step failed to compile since this one was built
            out, compiled = self.eager(*args), False
        else:
            out, compiled = Fallback.prove(lambda: self.fn(*args), lambda: self.eager(*args),
                                           "torch.compile of the learner loss")
        if not compiled:
            self.fn = self.eager
        self.proven = True
        return out


class Stats:
    """Running sums of the loss's statistics over a learner's minibatches (``n`` of them).

    Summed as tensors on the step's device, in place: a ``float()`` per stat per minibatch
    would sync a GPU eight times, and a CUDA graph captures in-place sums (``count=False``
    there: the graph's caller counts its replays).
    """

    def __init__(self) -> None:
        self.sums: dict[str, torch.Tensor] = {}
        self.n = 0

    def add(self, stats: dict[str, torch.Tensor], count: bool = True) -> None:
        for k, v in stats.items():
            if k not in self.sums:
                self.sums[k] = torch.zeros((), dtype=v.dtype, device=v.device)
            self.sums[k].add_(v.detach())
        self.n += int(count)

    def result(self) -> dict[str, float]:
        """CleanRL's ``losses/*`` metrics: each statistic's mean over the minibatches."""
        return {f"losses/{k}": float(v) / max(self.n, 1) for k, v in self.sums.items()}


def clipped_grad(loss_fn: LossFn | MinibatchLoss, model: torch.nn.Module,
                 params: list[torch.nn.Parameter], batch: Any, idx: torch.Tensor,
                 max_grad_norm: float) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """One minibatch's gradient — loss, backward, one flat copy of the gradients, the
    global-norm clip — and the loss's stats. Every learner step is this, then an Adam step
    (:func:`ppo_step`) or a send (gradient mode)."""
    for p in params:  # cheaper than Module.zero_grad, which walks every submodule
        p.grad = None
    loss, stats = loss_fn(model, batch, idx)
    loss.backward()
    grad = flat_grad(params)
    ppo.clip_grad_norm_flat_(grad, max_grad_norm)
    return grad, stats


def ppo_step(loss_fn: LossFn | MinibatchLoss, model: torch.nn.Module, batch: Any,
             idx: torch.Tensor, adam: FlatAdam, max_grad_norm: float) -> dict[str, torch.Tensor]:
    """One PPO minibatch: loss, backward, the global-norm clip, one Adam step; the minibatch's
    stats. The eager reference every optimizer step is checked against (and falls back to)."""
    grad, stats = clipped_grad(loss_fn, model, adam.params, batch, idx, max_grad_norm)
    adam.step(grad)
    return stats
