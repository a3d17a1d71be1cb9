"""A learner's minibatch step on a GPU as one CUDA graph replay.

Hopper's policy is two 64x64 MLPs: a minibatch step is ~150 tiny kernels eagerly, ~20
compiled, and on a GPU each costs a launch from Python (~5-20 µs of host time), not
arithmetic. Measured on an H200 (``benchmarks/gpu_bench.py``) the step was 3.5x *slower*
than one CPU core, eager or compiled. Captured once as a CUDA graph
— forward, backward, the flat gradient, the global-norm clip and (update mode) the fused
Adam step — each later minibatch is one copy of its indices and one replay: the GPU runs
the same kernels on the same buffers with no Python between them.

What a graph requires, and how this keeps it:

- **Fixed memory**: the batch, the parameters (views into one flat vector that look-ahead
  rebases copy into, never replace) and the optimizer state stay where they were captured;
  a graph lives for one invocation (one batch), and V-trace, which rebuilds the batch each
  epoch, is not graphed. The minibatch's indices go through one static buffer.
- **Fixed shapes**: one graph per minibatch size (``tensor_split`` makes at most two: 2,048
  into 30 minibatches is 69s and 68s); each size is warmed up eagerly before its capture.
- **Warm-up before capture** (PyTorch's rule: lazy initialisation must not happen inside a
  capture): the first minibatches run eagerly on a side stream — real steps, not thrown
  away — which also compiles the loss for the device's index tensors.
- **No host syncs inside**: the loss and the clip are pure tensor maths; statistics are
  summed into device accumulators inside the graph and read once at the end.

Numbers are the eager step's to float rounding (the same kernels in the same order); the
CUDA tests compare a graphed learner with the CPU's reference loop. One of the step's
implementations (:func:`functions.step.make_step` chooses); a capture that fails steps
eagerly, by :class:`~functions.compiled.Fallback`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from functions.adam import adam_step
from functions.compiled import Fallback, Stats, clipped_grad

WARMUP_STEPS = 3  # eager steps before the capture (PyTorch's examples use 3)
MAX_GRAPHS = 2  # minibatch sizes with a graph: tensor_split makes at most two


class GraphedStep:
    """``step(idx) -> flat clipped gradient`` for one invocation's batch, on CUDA.

    ``loss_fn(model, batch, idx)`` is the minibatch loss; with ``optimizer`` (a
    ``torch.optim.Adam`` over ``flat``, fused) the Adam step is captured too (update mode),
    else the caller applies the returned gradient (gradient mode, look-ahead). The returned
    gradient is a static buffer: overwritten by the next step, so copy what must outlive it.
    """

    def __init__(self, loss_fn: Callable[..., tuple[torch.Tensor, dict[str, torch.Tensor]]],
                 model: torch.nn.Module, batch: Any, max_grad_norm: float,
                 optimizer: torch.optim.Adam | None = None,
                 flat: torch.Tensor | None = None) -> None:
        self.loss_fn, self.model, self.batch = loss_fn, model, batch
        self.params = list(model.parameters())
        self.max_grad_norm = max_grad_norm
        self.optimizer, self.flat = optimizer, flat
        self.device = self.params[0].device
        self.graphs: dict[int, tuple[torch.cuda.CUDAGraph, torch.Tensor, torch.Tensor]] = {}
        self.acc = Stats()  # the loss's stats, summed on the device (inside the graph too)
        self.warm: dict[int, int] = {}  # eager steps per minibatch size
        self.side = torch.cuda.Stream(self.device)
        self.replays = 0

    def _step(self, idx: torch.Tensor) -> torch.Tensor:
        """The step itself: run eagerly, or recorded inside a capture."""
        grad, stats = clipped_grad(self.loss_fn, self.model, self.params, self.batch, idx,
                                   self.max_grad_norm)
        if self.optimizer is not None:
            adam_step(self.optimizer, self.flat, grad)
        self.acc.add(stats, count=False)  # __call__ counts: a replay runs no Python
        return grad

    def _capture(self, size: int) -> tuple[torch.cuda.CUDAGraph, torch.Tensor, torch.Tensor]:
        static_idx = torch.zeros(size, dtype=torch.long, device=self.device)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):  # the gradients backward allocates come from its pool
            grad = self._step(static_idx)
        return graph, static_idx, grad

    def __call__(self, idx: torch.Tensor) -> torch.Tensor:
        """One minibatch step on ``idx`` (indices on the device)."""
        self.acc.n += 1
        size = idx.numel()
        if size not in self.graphs:
            # The first size warms up for WARMUP_STEPS; another (a ragged last minibatch)
            # for one step, so that its compile happens before, not inside, a capture.
            needed = 1 if self.graphs else WARMUP_STEPS
            if (Fallback.failed or self.warm.get(size, 0) < needed
                    or len(self.graphs) >= MAX_GRAPHS):
                self.warm[size] = self.warm.get(size, 0) + 1
                return self._eager_on_side_stream(idx)
            # Nothing runs during a capture (capturing records, it does not execute): where
            # it fails, this minibatch and the rest go eagerly with the same result.
            out, captured = Fallback.prove(lambda: self._capture(size),
                                           lambda: self._eager_on_side_stream(idx),
                                           "CUDA graph capture of the learner step")
            if not captured:
                return out
            self.graphs[size] = out
        graph, static_idx, grad = self.graphs[size]
        static_idx.copy_(idx)
        graph.replay()
        self.replays += 1
        return grad

    def _eager_on_side_stream(self, idx: torch.Tensor) -> torch.Tensor:
        # on a side stream, as PyTorch asks of the warm-up before a capture
        current = torch.cuda.current_stream(self.device)
        self.side.wait_stream(current)
        with torch.cuda.stream(self.side):
            grad = self._step(idx)
        current.wait_stream(self.side)
        # the caller reads it on the current stream: keep its memory from the side stream's
        # next allocations until that work is done
        grad.record_stream(current)
        return grad


def can_graph(device: torch.device, wanted: bool, vtrace: bool) -> bool:
    """Whether a learner invocation steps through :class:`GraphedStep`."""
    return wanted and device.type == "cuda" and not vtrace and not Fallback.failed
