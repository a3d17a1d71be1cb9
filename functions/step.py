"""A learner's minibatch step behind one interface, built once for where it runs.

:func:`make_step` chooses among the implementations of the same maths — loss, backward, the
flat clipped gradient, and with an optimizer one Adam step:

- gradient only (gradient mode: the caller sends the gradient), the loss eager or compiled
  (:class:`~functions.compiled.MinibatchLoss`);
- with an optimizer (update mode, the lean PPO): on the CPU with ``compile`` the whole step as
  one compiled graph (:mod:`functions.fused`), else the eager reference
  (:func:`~functions.compiled.ppo_step`);
- on CUDA, where the module and the batch stay put for the invocation, either of them
  captured once as a CUDA graph and replayed (:mod:`functions.graphed`).

All of them fall back by one rule (:class:`~functions.compiled.Fallback`): a compile or a
capture that fails is said once, and the process steps eagerly from then on.
"""

from __future__ import annotations

import time

import torch

from functions.adam import ADAM_EPS, FlatAdam
from functions.batch import Flat, synthetic_batch
from functions.compiled import MinibatchLoss, Stats, clipped_grad
from functions.fused import FusedStep
from functions.graphed import GraphedStep, can_graph
from functions.hyper import PPOHyper
from functions.policy import ActorCritic, init_policy


class Step:
    """``step(model, batch, idx) -> flat clipped gradient | None``: one PPO minibatch.

    Gradient only, it returns the minibatch's gradient: a fresh tensor, or a graphed step's
    static buffer that the next step overwrites (copy what must outlive it). With an
    optimizer it takes the Adam step and returns None. Either way the loss's statistics are
    summed in :attr:`stats`; ``idx`` must be on :attr:`index_device` when that is set.
    """

    def __init__(self, hyper: PPOHyper, loss: MinibatchLoss, adam: FlatAdam | None = None,
                 fused: FusedStep | None = None, graphed: GraphedStep | None = None) -> None:
        self.max_grad_norm = hyper.max_grad_norm
        self.loss, self.adam, self.fused, self.graphed = loss, adam, fused, graphed
        self.stats = graphed.acc if graphed is not None else Stats()
        self.index_device = graphed.device if graphed is not None else None
        self._model: torch.nn.Module | None = None
        self._params: list[torch.nn.Parameter] = []

    def __call__(self, model: torch.nn.Module, batch: Flat,
                 idx: torch.Tensor) -> torch.Tensor | None:
        if self.graphed is not None:
            return self.graphed(idx)
        if self.fused is not None and self.adam is not None:
            self.stats.add(self.fused(model, batch, idx, self.adam))
            return None
        if model is not self._model:  # a rebuilt module has new parameter objects
            self._model, self._params = model, list(model.parameters())
        grad, stats = clipped_grad(self.loss, model, self._params, batch, idx, self.max_grad_norm)
        self.stats.add(stats)
        return grad

    @property
    def fused_steps(self) -> int:
        return self.fused.steps_fused if self.fused is not None else 0

    @property
    def compiled(self) -> bool:
        return self.loss.compiled or self.fused_steps > 0

    @property
    def replays(self) -> int:
        return self.graphed.replays if self.graphed is not None else 0

    def result(self) -> dict[str, float]:
        """The loss's ``losses/*`` statistics, mean over the steps taken (one host sync)."""
        return self.stats.result()


def make_step(hyper: PPOHyper, model: torch.nn.Module, batch: Flat, *, compile: bool = False,
              cuda_graph: bool = False, adam: FlatAdam | None = None,
              fixed: bool = True) -> Step:
    """The minibatch step of ``model`` (its device) over ``batch``.

    ``compile``: through ``torch.compile``. ``cuda_graph``: on CUDA, as a graph replay, where
    ``fixed`` — ``model`` and ``batch`` stay the same objects for the whole invocation (a graph
    holds on to what it captured; V-trace's batch, rebuilt each epoch, never is). ``adam``:
    take its step (its parameters are ``model``'s); without, return the gradient.
    """
    loss = MinibatchLoss(hyper, compile)
    device = next(model.parameters()).device
    graphed = None
    if fixed and can_graph(device, cuda_graph, hyper.is_correction == "vtrace"):
        graphed = GraphedStep(loss, model, batch, hyper.max_grad_norm,
                              adam.optimizer if adam is not None else None,
                              adam.flat if adam is not None else None)
    if graphed is not None or adam is None:
        return Step(hyper, loss, adam, graphed=graphed)
    return Step(hyper, loss, adam, fused=FusedStep(hyper, loss, fused=compile))


def warm(hyper: PPOHyper, model: ActorCritic, sizes: list[int], *, batch_size: int,
         update: bool, betas: tuple[float, float] = (0.9, 0.999)) -> bool:
    """Compile ``model``'s step for each minibatch size, on a synthetic batch of
    ``batch_size``; whether it compiled. ``update``: the whole step with an Adam of
    ``betas``, at a learning rate of 0 and a throwaway state, the weights put back all the
    same; else the gradient. Nothing else changes."""
    batch = synthetic_batch(model, batch_size)
    adam = FlatAdam(model, lr=0.0, eps=ADAM_EPS, betas=betas) if update else None
    weights = adam.flat.detach().clone() if adam is not None else None
    step = make_step(hyper, model, batch, compile=True, adam=adam)
    try:
        for n in sizes:
            step(model, batch, torch.arange(n))
    finally:
        if adam is not None and weights is not None:
            with torch.no_grad():
                adam.flat.copy_(weights)
        model.zero_grad(set_to_none=True)
    return step.fused_steps > 0 if update else step.loss.compiled


def warm_cache(env_id: str, hyper: PPOHyper | None = None, batch: int = 2048,
               minibatch: int = 64) -> float:
    """Compile the loss and the fused whole step for ``env_id``'s policy shapes once,
    filling inductor's disk cache (seconds later, in any process on this machine, instead of
    ~15 s); returns the seconds it took. For benchmarks (every run, not only the first, finds
    the cache warm) and for images built for short-lived execution environments."""
    hyper = hyper or PPOHyper()
    model, _ = init_policy(env_id, seed=0)
    # Compile with one thread, as the functions and the lean PPO run: inductor's CPU kernels
    # (and so its cache entries) differ with the thread count, and a cache warmed with all of
    # a 16-core machine's threads left a one-thread learner a cold ~50 s compile there.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        t0 = time.perf_counter()
        if not warm(hyper, model, [minibatch], batch_size=batch, update=False):
            raise RuntimeError("torch.compile is not available here (see the warning above)")
        if not warm(hyper, model, [minibatch], batch_size=batch, update=True):
            raise RuntimeError("torch.compile of the fused step failed here (see the warning above)")
        return time.perf_counter() - t0
    finally:
        torch.set_num_threads(threads)
