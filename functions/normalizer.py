"""Running mean / variance (CleanRL's ``RunningMeanStd``) with a mergeable parallel form.

Observation and return statistics are part of the policy: an actor reports the statistics of
the batch it saw, the orchestrator merges them into the version it publishes next with the
parallel-variance formula (Chan, Golub & LeVeque), so a cold actor never starts from zero.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np


class RunningMeanStd:
    """Mean/var of a stream of vectors (or scalars when ``shape == ()``)."""

    def __init__(self, shape: tuple[int, ...] = (), epsilon: float = 1e-4) -> None:
        # CleanRL / gymnasium start from mean 0, var 1 with a tiny pseudo-count.
        self.mean = np.zeros(shape, dtype=np.float64)
        self.var = np.ones(shape, dtype=np.float64)
        self.count = float(epsilon)

    @property
    def shape(self) -> tuple[int, ...]:
        return self.mean.shape

    def update(self, batch: Any) -> None:
        """Fold in a batch whose first axis indexes samples."""
        x = np.asarray(batch, dtype=np.float64).reshape((-1, *self.shape))
        if x.shape[0] == 0:
            return
        self.merge(x.shape[0], x.mean(axis=0), x.var(axis=0))

    def merge(self, count: float, mean: Any, var: Any) -> None:
        """Combine with the statistics of another sample set (parallel variance formula)."""
        count = float(count)
        if count <= 0:
            return
        mean = np.asarray(mean, dtype=np.float64).reshape(self.shape)
        var = np.asarray(var, dtype=np.float64).reshape(self.shape)
        delta = mean - self.mean
        total = self.count + count
        new_mean = self.mean + delta * count / total
        m2 = self.var * self.count + var * count + np.square(delta) * self.count * count / total
        self.mean, self.var, self.count = new_mean, m2 / total, total

    def normalize(self, x: np.ndarray, clip: float | None = None, eps: float = 1e-8) -> np.ndarray:
        out = (x - self.mean) / np.sqrt(self.var + eps)
        if clip is not None:
            out = np.clip(out, -clip, clip)
        return out.astype(np.float32)

    # -- (de)serialisation: plain JSON-able dict ---------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        scalar = self.shape == ()
        return {
            "count": float(self.count),
            "mean": float(self.mean) if scalar else self.mean.tolist(),
            "var": float(self.var) if scalar else self.var.tolist(),
        }

    @classmethod
    def from_dict(cls, doc: Mapping[str, Any]) -> RunningMeanStd:
        mean = np.asarray(doc["mean"], dtype=np.float64)
        rms = cls(shape=mean.shape)
        rms.mean = mean.copy()
        rms.var = np.asarray(doc["var"], dtype=np.float64).reshape(mean.shape).copy()
        rms.count = float(doc["count"])
        return rms

    @classmethod
    def from_batch(cls, batch: Any, shape: tuple[int, ...] = ()) -> RunningMeanStd:
        """Exact statistics of one batch (no pseudo-count): what an actor reports."""
        x = np.asarray(batch, dtype=np.float64).reshape((-1, *shape))
        rms = cls(shape=shape, epsilon=0.0)
        rms.count = 0.0
        if x.shape[0]:
            rms.mean, rms.var, rms.count = x.mean(axis=0), x.var(axis=0), float(x.shape[0])
        return rms

    def copy(self) -> RunningMeanStd:
        return RunningMeanStd.from_dict(self.to_dict())

    def __repr__(self) -> str:
        return f"RunningMeanStd(shape={self.shape}, count={self.count:.0f})"


def merge_stats(base: RunningMeanStd, stats: Iterable[Mapping[str, Any]]) -> RunningMeanStd:
    """A copy of ``base`` with every reported ``{"count","mean","var"}`` merged in."""
    out = base.copy()
    for s in stats:
        out.merge(s["count"], s["mean"], s["var"])
    return out
