"""Staleness-aware gradient aggregation (the paper's rule; docs/algorithm.md).

Pure logic, no I/O: the trainer feeds gradients in, asks whether the buffer rule fires, and
takes one weighted mean gradient out per aggregation (one optimizer step).

* staleness ``delta = v_now - v_used``;
* weight ``w = 1`` if ``delta <= v0`` else ``1/sqrt(delta)``; ``g = (1/H) sum_j w_j g_j``;
* fire when the buffer's mean staleness ``<= beta_k``, or ``H == H_max`` (``buffer_max``, else
  one gradient per learner in flight), or the oldest buffered gradient waited ``timeout_s``
  (never block forever);
* ``beta_k = max(1, delta_max * d^k)`` with ``delta_max`` the largest buffer-mean staleness seen
  during a fully asynchronous warm-up (every gradient applied as it comes), and ``k`` counting
  training rounds — one per ``learner_batch_steps`` env steps the learners consumed — not
  aggregations (hundreds per round): the paper's bound decays once per train batch;
* optional hard drop of ``delta > delta_drop`` — counted, never silent;
* every gradient is applied at most once (dedupe by invocation id, epoch and minibatch).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from functions.wire import Gradient, Layout, split_flat
from orchestrator.config import AggregationConfig


@dataclass
class Aggregate:
    """The result of one aggregation: the gradient to apply and what went into it."""

    flat: np.ndarray  # the weighted mean gradient, float32, in ``layout`` order
    layout: Layout
    weights: list[float]
    staleness: list[int]
    dedupe_ids: list[str]
    entry_ids: list[str]
    reason: str
    n_samples: int
    # (lineage, seq) of the look-ahead learners' gradients in it, in stream order
    lineages: list[tuple[str, int]] = field(default_factory=list)
    # The rate to step with: the mean of the learners' rates for these gradients (an annealed
    # run's; one gradient: exactly the rate its look-ahead used). None: the master's own.
    lr: float | None = None

    @property
    def grads(self) -> dict[str, np.ndarray]:
        """The mean gradient by parameter name (views into ``flat``)."""
        return split_flat(self.flat, self.layout)


def _mean_lr(rates: list[float | None]) -> float | None:
    given = [r for r in rates if r is not None]
    return sum(given) / len(given) if given else None


@dataclass
class _Buffered:
    gradient: Gradient
    entry_id: str
    arrived: float


def staleness_weight(delta: int, v0: int) -> float:
    return 1.0 if delta <= v0 else 1.0 / math.sqrt(delta)


@dataclass
class StalenessAggregator:
    rule: AggregationConfig
    learners: int = 1  # in flight: H_max when the rule sets no buffer_max
    buffer: list[_Buffered] = field(default_factory=list)
    applied: set[str] = field(default_factory=set)
    aggregations: int = 0
    delta_max: float = 0.0
    duplicates: int = 0
    dropped: int = 0
    rounds: int = 0
    # (round, env steps consumed, beta) at the end of each round: the bound's trajectory
    bound_trajectory: list[tuple[int, int, float | None]] = field(default_factory=list)
    steps_consumed: int = 0  # env steps of the batches learners finished

    @property
    def h_max(self) -> int:
        return self.rule.h_max(self.learners)

    # -- the bound --------------------------------------------------------------------------
    @property
    def in_warmup(self) -> bool:
        return self.rounds < self.rule.warmup_rounds

    def beta(self) -> float:
        """The current staleness bound ``beta_k`` (``inf`` during warm-up: fire on arrival)."""
        if self.in_warmup:
            return math.inf
        k = self.rounds - self.rule.warmup_rounds
        decay = self.rule.decay**k if self.rule.bound_decay else 1.0
        return max(1.0, self.delta_max * decay)

    def consumed(self, env_steps: int, batch_steps: int) -> int:
        """A learner finished a batch of ``env_steps``: rounds advance by whole
        ``batch_steps`` consumed (a retried batch is counted once, when it succeeds).
        Returns the number of rounds completed by it."""
        if batch_steps < 1:
            raise ValueError("batch_steps must be >= 1")
        self.steps_consumed += int(env_steps)
        done = self.steps_consumed // batch_steps - self.rounds
        for _ in range(done):
            self.rounds += 1
            beta = self.beta()
            self.bound_trajectory.append(
                (self.rounds, self.steps_consumed, None if math.isinf(beta) else beta))
        return done

    # -- feeding ----------------------------------------------------------------------------
    def offer(self, gradient: Gradient, entry_id: str, v_now: int, now: float) -> str:
        """Buffer a gradient; returns ``"buffered"``, ``"duplicate"`` or ``"dropped"``."""
        dedupe = gradient.dedupe_id
        if dedupe in self.applied or any(b.gradient.dedupe_id == dedupe for b in self.buffer):
            self.duplicates += 1
            return "duplicate"
        delta = max(0, v_now - gradient.version_used)
        if self.rule.drop_staleness is not None and delta > self.rule.drop_staleness:
            self.dropped += 1
            self.applied.add(dedupe)  # decided once: a redelivery must not resurrect it
            return "dropped"
        self.buffer.append(_Buffered(gradient, entry_id, now))
        return "buffered"

    def mean_staleness(self, v_now: int) -> float:
        if not self.buffer:
            return 0.0
        return float(np.mean([max(0, v_now - b.gradient.version_used) for b in self.buffer]))

    def should_aggregate(self, v_now: int, now: float) -> str | None:
        """The reason the buffer rule fires now, or ``None``."""
        if not self.buffer:
            return None
        if self.in_warmup:
            return "warmup"
        if len(self.buffer) >= self.h_max:
            return "full"
        if self.mean_staleness(v_now) <= self.beta():
            return "bound"
        if now - self.buffer[0].arrived >= self.rule.timeout_s:
            return "timeout"
        return None

    # -- taking -------------------------------------------------------------------------------
    def take(self, v_now: int, reason: str) -> Aggregate:
        """Empty the buffer into one weighted mean gradient (one optimizer step)."""
        if not self.buffer:
            raise ValueError("nothing buffered")
        if self.in_warmup:
            self.delta_max = max(self.delta_max, self.mean_staleness(v_now))
        deltas = [max(0, v_now - b.gradient.version_used) for b in self.buffer]
        weights = [
            staleness_weight(d, self.rule.v0) if self.rule.staleness_weights else 1.0
            for d in deltas
        ]
        h = len(self.buffer)
        first = self.buffer[0].gradient
        # One fused multiply-add per buffered gradient over its flat vector (H is small).
        flat = weights[0] * first.flat_vector()
        for w, b in zip(weights[1:], self.buffer[1:], strict=True):
            other = b.gradient.flat_vector()
            if other.shape != flat.shape:
                raise ValueError(f"gradient {b.gradient.dedupe_id} has {other.size} numbers, "
                                 f"the buffer's first has {flat.size}")
            flat += w * other
        flat /= h
        out = Aggregate(
            flat=flat.astype(np.float32, copy=False),
            layout=first.param_layout(),
            weights=weights,
            staleness=deltas,
            dedupe_ids=[b.gradient.dedupe_id for b in self.buffer],
            entry_ids=[b.entry_id for b in self.buffer],
            reason=reason,
            n_samples=sum(b.gradient.n_samples for b in self.buffer),
            lineages=[(b.gradient.lineage, b.gradient.seq) for b in self.buffer
                      if b.gradient.lineage is not None and b.gradient.seq is not None],
            lr=_mean_lr([b.gradient.lr for b in self.buffer]),
        )
        self.applied.update(out.dedupe_ids)
        self.buffer.clear()
        self.aggregations += 1
        return out
