"""The learner's minibatch loss, optionally through ``torch.compile``.

A PPO minibatch on Hopper is 64 samples through two 64x64 MLPs: microseconds of arithmetic
behind ~100 tensor ops forward and as many backward, each a few microseconds of dispatch.
Eagerly that is ~720 µs per minibatch on one core, the learner's whole cost; compiled
(inductor fuses the gathers, the Gaussian log-prob and the clipped surrogate into a few C++
kernels, forward and backward) it is about half (benchmarks/RESULTS.md). Same maths, same
code: the compiled function calls :func:`functions.ppo.ppo_loss` and the policy's methods.

Costs and limits, and why compiling is a choice (``learner_compile``) rather than a given:
the first compile in a process takes ~2 s with inductor's on-disk cache warm and ~15 s cold
(a fresh machine, or a Lambda execution environment: the cache lives in ``/tmp``), and it
needs a C++ compiler on the machine. When compiling fails the learner says so once and goes
on eagerly; results are the same to float rounding.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from typing import Any

import torch

from functions import ppo
from functions.adam import flat_grad
from functions.messages import PPOHyper
from functions.policy import init_policy

log = logging.getLogger(__name__)

LossFn = Callable[..., tuple[torch.Tensor, dict[str, torch.Tensor]]]

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
    the loss and the fused step say so and step eagerly, as for any failed compile.
    """
    if VEC_ISA_ENV not in os.environ:
        import torch._inductor.config as inductor_config  # here: a second to import

        inductor_config.cpp.vec_isa_ok = True
    return torch.compile(fn)


def _loss_kwargs(hyper: PPOHyper) -> dict[str, Any]:
    """The hyper-parameters the loss depends on (not lr, epochs, gamma...)."""
    return dict(clip_coef=hyper.clip_coef, ent_coef=hyper.ent_coef, vf_coef=hyper.vf_coef,
                # batch scope: build_batch standardized them already, the loss must not again
                norm_adv=hyper.norm_adv and hyper.norm_adv_scope == "minibatch",
                clip_vloss=hyper.clip_vloss,
                is_correction=hyper.is_correction, rho_bar=hyper.rho_bar)


def _loss_terms(kwargs: dict[str, Any]) -> LossFn:
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
    _failed = False  # compiling failed once in this process: do not retry every invocation

    def __init__(self, hyper: PPOHyper, compile: bool) -> None:
        kwargs = _loss_kwargs(hyper)
        self.eager = _loss_terms(kwargs)
        self.fn: LossFn = self.eager
        self.proven = not compile  # eager needs no proof; compiled until its first success
        if compile and not MinibatchLoss._failed:
            key = tuple(sorted(kwargs.items()))
            with MinibatchLoss._lock:
                if key not in MinibatchLoss._compiled:
                    # dynamic=None: specialise on the first shapes, generalise if they vary
                    MinibatchLoss._compiled[key] = compile_fn(self.eager)
                self.fn = MinibatchLoss._compiled[key]

    @property
    def compiled(self) -> bool:
        return self.fn is not self.eager

    def __call__(self, model: torch.nn.Module, b: Any,
                 idx: torch.Tensor) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        args = (model, idx, b.obs, b.actions, b.logprobs, b.advantages, b.returns, b.values,
                b.logratio_others, b.logprobs_prox)
        if self.proven:
            return self.fn(*args)
        try:
            out = self.fn(*args)
        except Exception as exc:  # noqa: BLE001 - whatever failed, eager decides below
            # Bad data fails eagerly too, and that error is the learner's to raise; only a
            # failure of compiling itself leaves this process eager from now on.
            out = self.eager(*args)
            log.warning("torch.compile of the learner loss failed (%s: %s); computing it "
                        "eagerly", type(exc).__name__, str(exc).splitlines()[0][:200])
            MinibatchLoss._failed = True
            self.fn = self.eager
        self.proven = True
        return out


def clipped_grad(loss_fn: LossFn | MinibatchLoss, model: torch.nn.Module,
                 params: list[torch.nn.Parameter], batch: Any, idx: torch.Tensor,
                 max_grad_norm: float) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """One minibatch's gradient — loss, backward, one flat copy of the gradients, the
    global-norm clip — and the loss's stats. Every learner step is this, then an Adam step
    (sync learner, lean PPO, graphed update) or a send (async learner)."""
    for p in params:  # cheaper than Module.zero_grad, which walks every submodule
        p.grad = None
    loss, stats = loss_fn(model, batch, idx)
    loss.backward()
    grad = flat_grad(params)
    ppo.clip_grad_norm_flat_(grad, max_grad_norm)
    return grad, stats


def warm_cache(env_id: str, hyper: PPOHyper | None = None, batch: int = 2048,
               minibatch: int = 64) -> float:
    """Compile the loss and the fused whole step (:mod:`functions.fused`) for ``env_id``'s
    policy shapes once, filling inductor's disk cache (seconds later, in any process on this
    machine, instead of ~15 s); returns the seconds it took. For benchmarks (every run, not
    only the first, finds the cache warm) and for images built for short-lived execution
    environments."""
    from functions.adam import FlatAdam  # here: these import this module
    from functions.fused import FusedStep
    from functions.learner import ADAM_EPS

    hyper = hyper or PPOHyper()
    model, _ = init_policy(env_id, seed=0)
    b = synthetic_batch(model, batch)
    # Compile with one thread, as the functions and the lean PPO run: inductor's CPU kernels
    # (and so its cache entries) differ with the thread count, and a cache warmed with all of
    # a 16-core machine's threads left a one-thread learner a cold ~50 s compile there.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        t0 = time.perf_counter()
        fn = MinibatchLoss(hyper, compile=True)
        loss, _ = fn(model, b, torch.arange(minibatch))
        loss.backward()
        if not fn.compiled:
            raise RuntimeError("torch.compile is not available here (see the warning above)")
        step = FusedStep(hyper, fn, fused=True)
        step(model, b, torch.arange(minibatch),
             FlatAdam(model, lr=hyper.learning_rate, eps=ADAM_EPS))
        if not step.steps_fused:
            raise RuntimeError("torch.compile of the fused step failed here (see the warning above)")
        return time.perf_counter() - t0
    finally:
        torch.set_num_threads(threads)


def synthetic_batch(model: Any, n: int, k: int = 0, seed: int = 0) -> Any:
    """A random flat batch of ``n`` samples shaped for ``model`` (``k`` other versions'
    log-ratios), with actions as actors record them: int64 indices, or float vectors."""
    from functions.learner import Flat  # here: the learner imports this module

    g = torch.Generator().manual_seed(seed)

    def r(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=g)

    actions = (torch.randint(model.act_dim, (n,), generator=g) if model.discrete
               else r(n, model.act_dim))
    return Flat(obs=r(n, model.obs_dim), actions=actions, logprobs=r(n) - 3.0, values=r(n),
                advantages=r(n), returns=r(n), behaviour_version=torch.zeros(n, dtype=torch.long),
                logratio_others=0.1 * r(n, k), logprobs_prox=r(n) - 3.0)
