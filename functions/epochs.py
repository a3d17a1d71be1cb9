"""The PPO update's loop: ``update_epochs`` epochs of ``num_minibatches`` minibatches.

One implementation for every learner — gradient mode (each minibatch's gradient streamed),
update mode (each an Adam step, then a publish) and the lean PPO benchmark — so they cannot
drift apart. What a minibatch does is the caller's (``minibatch(batch, mb)``); the loop owns
what makes it PPO's update:

- a fresh permutation each epoch, from the invocation's generator on the CPU, so a CPU and a
  GPU learner visit the same minibatches;
- CleanRL's ``target_kl`` early stop: after an epoch whose minibatches' mean approx_kl exceeds
  it, the update ends (docs/decisions.md#target-kl-002);
- V-trace's targets, which depend on the current critic, rebuilt once per epoch (``rebuild``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple, Protocol

import torch

from functions import ppo
from functions.batch import Flat
from functions.hyper import PPOHyper


class Sums(Protocol):
    """Running sums of the loss's statistics (:class:`functions.compiled.Stats`)."""

    sums: dict[str, torch.Tensor]
    n: int


@dataclass(frozen=True)
class Minibatch:
    epoch: int
    index: int  # within the epoch
    idx: torch.Tensor  # indices into the batch, on the CPU
    on_device: torch.Tensor  # the same on the step's device (``idx`` where none was asked)


class Epochs(NamedTuple):
    epochs: int  # run (``target_kl`` may end the update early)
    minibatches: int


def minibatches(n: int, hyper: PPOHyper, gen: torch.Generator) -> list[torch.Tensor]:
    """One epoch's minibatch indices into a batch of ``n``: a permutation cut into
    ``num_minibatches`` (``tensor_split``: sizes differ by one at most)."""
    perm = torch.randperm(n, generator=gen)
    k = min(hyper.num_minibatches, n)
    return list(torch.tensor_split(perm, k))


def minibatch_sizes(n: int, hyper: PPOHyper) -> list[int]:
    """The distinct minibatch sizes of a batch of ``n``, the larger first (a compiled step
    specialises on each)."""
    return sorted({len(idx) for idx in minibatches(n, hyper, torch.Generator())}, reverse=True)


def on_device(mbs: list[torch.Tensor], device: torch.device) -> list[torch.Tensor]:
    """An epoch's minibatch indices on ``device`` in one transfer."""
    if device.type == "cpu":
        return mbs
    return list(torch.split(torch.cat(mbs).to(device), [len(m) for m in mbs]))


class EpochKL:
    """``target_kl``'s measure: the mean approx_kl of one epoch's minibatches, read from a
    step's running sums (eager, or a CUDA graph's device sums: one read per epoch, never per
    minibatch)."""

    def __init__(self, acc: Sums) -> None:
        self.acc = acc
        self.start()

    def _sum(self) -> float:
        return float(self.acc.sums.get("approx_kl", 0.0))

    def start(self) -> None:
        self.sum0, self.n0 = self._sum(), self.acc.n

    def mean(self) -> float:
        return (self._sum() - self.sum0) / max(self.acc.n - self.n0, 1)


def stop_early(kl: EpochKL, hyper: PPOHyper) -> bool:
    """End the update after this epoch (``target_kl``)? Starts the next epoch's count if not."""
    if hyper.target_kl is None:
        return False
    if ppo.kl_exceeded(kl.mean(), hyper.target_kl):
        return True
    kl.start()
    return False


def run_epochs(hyper: PPOHyper, batch: Flat, gen: torch.Generator,
               minibatch: Callable[[Flat, Minibatch], None], stats: Sums, *,
               rebuild: Callable[[], Flat] | None = None,
               on_epoch: Callable[[int], None] | None = None,
               index_device: torch.device | None = None) -> Epochs:
    """The update over ``batch``: ``minibatch(batch, mb)`` for each minibatch of each epoch.

    ``stats``: the sums the minibatches add their loss statistics to, for ``target_kl``.
    ``rebuild()``: the batch again with the current weights, for V-trace. ``on_epoch(e)``:
    at the start of each epoch run, after the batch is rebuilt. ``index_device``: where the
    step wants its indices (``mb.on_device``), moved once per epoch.
    """
    kl = EpochKL(stats)
    epochs = steps = 0
    for epoch in range(hyper.update_epochs):
        if epoch and stop_early(kl, hyper):
            break
        epochs += 1
        if epoch and rebuild is not None and hyper.is_correction == "vtrace":
            # once per epoch, not per weight refresh: a whole-batch rebuild per minibatch
            # made the learner 3x slower
            batch = rebuild()
        if on_epoch is not None:
            on_epoch(epoch)
        idxs = minibatches(len(batch), hyper, gen)
        placed = on_device(idxs, index_device) if index_device is not None else idxs
        for i, (idx, dev) in enumerate(zip(idxs, placed, strict=True)):
            minibatch(batch, Minibatch(epoch, i, idx, dev))
            steps += 1
    return Epochs(epochs, steps)
