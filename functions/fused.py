"""A learner's whole minibatch step on the CPU — loss, backward, clip, Adam — as one compiled call.

On Hopper a PPO minibatch is 64 samples through two 64x64 MLPs. With the loss compiled
(:mod:`functions.compiled`) the step is still three trips through Python and the dispatcher:
the compiled forward, autograd's compiled backward plus the gradient's flat copy and clip, and
the fused Adam kernel, of which the arithmetic is about half. Here
``torch.func.grad_and_value`` differentiates the same loss with respect to the flat parameter
vector inside ``torch.compile``, so forward, backward, the global-norm clip and the Adam update
are one graph: about half the time again (docs/decisions.md#learner-compile).

Same maths as :func:`functions.compiled.ppo_step` (the eager reference): the loss is
:func:`functions.compiled.loss_terms`, the clip :func:`functions.ppo.clip_grad_norm_flat_`'s
formula, the update ``torch.optim.Adam``'s, on the optimizer's own state tensors (so
``FlatAdam.state_arrays``, checkpoints and the store's optimizer state are unchanged). Results
agree with the eager step to float rounding, not bitwise (tests/functions/test_fused.py).

One of the step's implementations (:func:`functions.step.make_step` chooses): where the step
is a plain Adam step on the CPU (update mode: sync rounds, the publishing async learner, the
lean PPO). When compiling fails it steps eagerly, by :class:`~functions.compiled.Fallback`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import torch
from torch.func import functional_call, grad_and_value

from functions.adam import FlatAdam
from functions.compiled import (
    Fallback,
    MinibatchLoss,
    compile_fn,
    loss_kwargs,
    loss_terms,
    ppo_step,
)
from functions.hyper import PPOHyper
from functions.wire import Layout


class _LossModule(torch.nn.Module):
    """The minibatch loss as a module's ``forward``, so ``functional_call`` can run it with
    the parameters taken from the flat vector being differentiated."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, *args: torch.Tensor, loss: Callable[..., Any]
                ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        # the loss is an argument, not an attribute: one function per compiled step, so a
        # new module (a new invocation's) is not a new function for the graph's guards
        return loss(self.model, *args)


def _train_step(kwargs: dict[str, Any], layout: Layout, max_grad_norm: float,
                betas: tuple[float, float], eps: float) -> Callable[..., dict[str, torch.Tensor]]:
    """The step for one loss, parameter layout and optimizer, its constants bound (the graph
    specialises on them): updates ``flat`` and Adam's state in place, returns the stats."""
    loss = loss_terms(kwargs)
    names = [f"model.{n}" for n, _ in layout]
    shapes = [s for _, s in layout]
    sizes = [int(torch.Size(s).numel()) for s in shapes]
    beta1, beta2 = betas

    def step(wrapper: _LossModule, flat: torch.Tensor, exp_avg: torch.Tensor,
             exp_avg_sq: torch.Tensor, step_count: torch.Tensor, lr: torch.Tensor,
             *batch: torch.Tensor) -> dict[str, torch.Tensor]:
        def loss_of(flat_params: torch.Tensor) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
            parts = torch.split(flat_params, sizes)
            params = {n: p.view(s) for n, p, s in zip(names, parts, shapes, strict=True)}
            return functional_call(wrapper, params, batch, {"loss": loss}, strict=False)

        grad, (_, stats) = grad_and_value(loss_of, has_aux=True)(flat)
        # functions.ppo.clip_grad_norm_flat_
        grad = grad * torch.clamp(max_grad_norm / (torch.linalg.vector_norm(grad) + 1e-6),
                                  max=1.0)
        # torch.optim.Adam (no weight decay, no AMSGrad), as its fused kernel computes it
        step_count.add_(1)
        exp_avg.lerp_(grad, 1 - beta1)
        exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
        bias1 = 1 - beta1 ** step_count
        bias2_sqrt = (1 - beta2 ** step_count).sqrt()
        denom = exp_avg_sq.sqrt() / bias2_sqrt + eps
        flat.sub_(lr / bias1 * exp_avg / denom)
        return stats

    return step


def _plain_adam(adam: FlatAdam) -> bool:
    """Adam the step reproduces: one group over the flat vector, no decay, AMSGrad, maximize."""
    opt = adam.optimizer
    group = opt.param_groups[0]
    return (len(opt.param_groups) == 1 and not group["amsgrad"] and not group["maximize"]
            and group["weight_decay"] == 0 and not group.get("decoupled_weight_decay", False)
            and not isinstance(group["lr"], torch.Tensor)
            and len(group["params"]) == 1 and group["params"][0] is adam.flat)


def _adam_state(adam: FlatAdam) -> dict[str, torch.Tensor]:
    """The optimizer's state of the flat vector, created as ``torch.optim.Adam(fused=True)``
    creates it on its first step when there is none yet."""
    opt, flat = adam.optimizer, adam.flat
    state = opt.state.get(flat)
    if not state:
        state = opt.state[flat] = {
            "step": torch.zeros((), dtype=torch.float32, device=flat.device),
            "exp_avg": torch.zeros_like(flat, memory_format=torch.preserve_format),
            "exp_avg_sq": torch.zeros_like(flat, memory_format=torch.preserve_format),
        }
    return state


class FusedStep:
    """``step(model, batch, idx, adam) -> stats``: one PPO minibatch and its Adam step.

    ``fused`` asks for the compiled whole step; it is taken on the CPU with a plain Adam, and
    otherwise (or once a compile has failed in this process) the eager reference runs:
    :func:`~functions.compiled.ppo_step` through ``loss_fn``.
    """

    _lock = threading.Lock()
    _compiled: dict[tuple[Any, ...], Callable[..., dict[str, torch.Tensor]]] = {}

    def __init__(self, hyper: PPOHyper, loss_fn: MinibatchLoss, fused: bool) -> None:
        self.hyper = hyper
        self.loss_fn = loss_fn
        self.fused = fused
        self.proven = False
        self.steps_fused = 0
        self._wrappers: dict[int, _LossModule] = {}
        self._lr: tuple[float, torch.Tensor] | None = None
        # (adam, its compiled step or None when it cannot be fused): resolved once per
        # optimizer, not per minibatch
        self._bound: tuple[FlatAdam, Callable[..., dict[str, torch.Tensor]] | None] | None = None

    def _step_for(self, adam: FlatAdam) -> Callable[..., dict[str, torch.Tensor]] | None:
        """The compiled step for ``adam``, or None where the eager step must run."""
        if self._bound is None or self._bound[0] is not adam:
            fusable = adam.flat.device.type == "cpu" and _plain_adam(adam)
            layout = tuple((n, tuple(p.shape)) for n, p in adam.named.items())
            self._bound = (adam, self._fn(adam, layout) if fusable else None)
        return self._bound[1]

    def _fn(self, adam: FlatAdam, layout: Layout) -> Callable[..., dict[str, torch.Tensor]]:
        group = adam.optimizer.param_groups[0]
        kwargs = loss_kwargs(self.hyper)
        key = (tuple(sorted(kwargs.items())), layout, float(self.hyper.max_grad_norm),
               tuple(group["betas"]), float(group["eps"]))
        with FusedStep._lock:
            if key not in FusedStep._compiled:
                FusedStep._compiled[key] = compile_fn(_train_step(
                    kwargs, layout, float(self.hyper.max_grad_norm), tuple(group["betas"]),
                    float(group["eps"])))
            return FusedStep._compiled[key]

    def _lr_tensor(self, adam: FlatAdam) -> torch.Tensor:
        lr = adam.lr
        if self._lr is None or self._lr[0] != lr:  # a tensor, so a new rate is no recompile
            self._lr = (lr, torch.tensor(lr, dtype=torch.float32, device=adam.flat.device))
        return self._lr[1]

    def _eager(self, model: torch.nn.Module, batch: Any, idx: torch.Tensor,
               adam: FlatAdam) -> dict[str, torch.Tensor]:
        return ppo_step(self.loss_fn, model, batch, idx, adam, self.hyper.max_grad_norm)

    def __call__(self, model: torch.nn.Module, batch: Any, idx: torch.Tensor,
                 adam: FlatAdam) -> dict[str, torch.Tensor]:
        fn = None if not self.fused or Fallback.failed else self._step_for(adam)
        if fn is None:
            return self._eager(model, batch, idx, adam)
        wrapper = self._wrappers.get(id(model))
        if wrapper is None or wrapper.model is not model:
            wrapper = self._wrappers[id(model)] = _LossModule(model)
        state = _adam_state(adam)
        args = (wrapper, adam.flat.detach(), state["exp_avg"], state["exp_avg_sq"],
                state["step"], self._lr_tensor(adam), idx, batch.obs, batch.actions,
                batch.logprobs, batch.advantages, batch.returns, batch.values,
                batch.logratio_others, batch.logprobs_prox)
        if self.proven:
            stats, fused = fn(*args), True
        else:
            stats, fused = Fallback.prove(lambda: fn(*args),
                                          lambda: self._eager(model, batch, idx, adam),
                                          "torch.compile of the learner's whole step")
            self.proven = fused
        self.steps_fused += int(fused)
        return stats
