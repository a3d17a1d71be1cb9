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

from collections.abc import Mapping

import numpy as np
import torch

from functions.policy import flatten_parameters

ADAM_EPS = 1e-5  # CleanRL's
OPTIMIZER_STATE = "optimizer"  # the store state the published versions' Adam moments are in


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


def flat_grad(params: list[torch.nn.Parameter]) -> torch.Tensor:
    """The parameters' gradients as one fresh flat vector (zeros where there is none)."""
    return torch.cat([p.grad.reshape(-1) if p.grad is not None else p.new_zeros(p.numel())
                      for p in params])


class FlatAdam:
    """Adam over one flat vector that all of a module's parameters are views into.

    A PPO update takes hundreds of Adam steps on a ~10k-number policy, where the per-tensor
    Python of ``torch.optim.Adam.step`` and ``clip_grad_norm_`` (a kernel or several per
    parameter tensor) cost more than the arithmetic: on Hopper's 64x64 MLPs they were about
    half of each minibatch step. Flat, a step is one ``cat`` of the gradients, two ops of
    clipping and one fused Adam kernel — the same update (Adam is elementwise, the clip a
    global norm), the same kernel the master and look-ahead learners use.

    Moments are saved and loaded per parameter name (``exp_avg.<name>``, ``exp_avg_sq.<name>``,
    ``step.<name>``), the format every Adam state in the store has.
    """

    def __init__(self, model: torch.nn.Module, lr: float, eps: float,
                 betas: tuple[float, float] = (0.9, 0.999)) -> None:
        self.named = dict(model.named_parameters())
        self.params = list(self.named.values())
        self.flat, self.slices = flatten_parameters(model)
        self.optimizer = torch.optim.Adam([self.flat], lr=lr, betas=betas, eps=eps, fused=True)

    def zero_grad(self) -> None:
        for p in self.params:  # cheaper than Module.zero_grad, which walks every submodule
            p.grad = None

    def step(self, flat_grad: torch.Tensor) -> None:
        adam_step(self.optimizer, self.flat, flat_grad)

    @property
    def lr(self) -> float:
        return float(self.optimizer.param_groups[0]["lr"])

    def set_lr(self, lr: float) -> None:
        """The rate of the next steps (an annealed schedule's); the moments are kept."""
        self.optimizer.param_groups[0]["lr"] = float(lr)

    def state_arrays(self) -> dict[str, np.ndarray]:
        """Adam's moments per parameter name ({} before the first step)."""
        state = self.optimizer.state.get(self.flat)
        if not state:
            return {}
        avg = state["exp_avg"].detach().cpu().numpy()
        avg_sq = state["exp_avg_sq"].detach().cpu().numpy()
        step = np.asarray([float(state["step"])], dtype=np.float64)
        out: dict[str, np.ndarray] = {}
        for name, sl in self.slices.items():
            shape = tuple(self.named[name].shape)
            out[f"exp_avg.{name}"] = avg[sl].reshape(shape).copy()
            out[f"exp_avg_sq.{name}"] = avg_sq[sl].reshape(shape).copy()
            out[f"step.{name}"] = step.copy()
        return out

    def load_state_arrays(self, arrays: Mapping[str, np.ndarray], prefix: str = "") -> bool:
        """Install per-name moments saved by :meth:`state_arrays` (keys under ``prefix``).

        All or nothing: a state of another architecture (missing or differently shaped
        entries) is ignored, so the optimizer starts fresh rather than mis-applying moments.
        """
        for name, p in self.named.items():
            for k in ("exp_avg", "exp_avg_sq", "step"):
                if f"{prefix}{k}.{name}" not in arrays:
                    return False
            for k in ("exp_avg", "exp_avg_sq"):
                if tuple(np.shape(arrays[f"{prefix}{k}.{name}"])) != tuple(p.shape):
                    return False

        def cat(k: str) -> torch.Tensor:
            parts = [np.asarray(arrays[f"{prefix}{k}.{n}"], dtype=np.float32).reshape(-1)
                     for n in self.named]
            return torch.from_numpy(np.concatenate(parts)).to(self.flat.device)

        first = next(iter(self.named))
        step = float(np.asarray(arrays[f"{prefix}step.{first}"]).reshape(-1)[0])
        self.optimizer.state[self.flat] = {
            # on the parameters' device, as the fused kernel requires (a CUDA learner's)
            "step": torch.tensor(step, dtype=torch.float32, device=self.flat.device),
            "exp_avg": cat("exp_avg"), "exp_avg_sq": cat("exp_avg_sq"),
        }
        return True
