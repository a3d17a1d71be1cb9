"""One fused Adam step on one flat parameter vector, without ``Optimizer.step``'s Python.

The master takes one Adam step per gradient (hundreds a second) and a look-ahead learner one
per minibatch. The fused kernel itself is a few microseconds for Hopper's ~10k numbers; the
``torch.optim`` wrapper around it (profiler scope, hooks, grouping tensors by device and
dtype) costed ~15 µs more, 20% of the orchestrator's CPU in a profile. This calls the same
kernel with the same arguments ``torch.optim.Adam(fused=True)`` passes it, on the
optimizer's own state, so checkpoints, ``state_dict`` and bitwise agreement between the
master and its look-ahead learners are unchanged. Anything unusual (no state yet, AMSGrad,
weight decay, a tensor learning rate) goes through ``optimizer.step()``.
"""

from __future__ import annotations

import torch


def adam_step(optimizer: torch.optim.Adam, param: torch.Tensor, grad: torch.Tensor) -> None:
    """``param.grad = grad; optimizer.step()`` for an optimizer over ``param`` alone."""
    group = optimizer.param_groups[0]
    state = optimizer.state.get(param)
    plain = (len(optimizer.param_groups) == 1 and group["fused"] and not group["amsgrad"]
             and not group["maximize"] and group["weight_decay"] == 0
             and not group.get("decoupled_weight_decay", False)
             and not isinstance(group["lr"], torch.Tensor)
             and len(group["params"]) == 1 and group["params"][0] is param)
    if not plain or not state:
        param.grad = grad
        optimizer.step()  # also creates the state the fast path steps from then on
        param.grad = None
        return
    beta1, beta2 = group["betas"]
    with torch.no_grad():
        torch._foreach_add_([state["step"]], 1)
        torch._fused_adam_(
            [param], [grad], [state["exp_avg"]], [state["exp_avg_sq"]], [], [state["step"]],
            amsgrad=False, lr=group["lr"], beta1=beta1, beta2=beta2, weight_decay=0.0,
            eps=group["eps"], maximize=False, grad_scale=None, found_inf=None)
