"""Emulated platform latency: what a real Lambda invoke costs on top of the function's own run.

On AWS a synchronous ``Invoke`` crosses the network and Lambda's frontend twice (request in,
response out) — tens of milliseconds warm, more across regions, and with a tail: some calls
are far slower than the median (stragglers). The local runtime answers in about a
millisecond, so by default it flatters any design that invokes often or waits for the slowest
of a round. ``--invoke-latency-ms`` / ``--invoke-latency-sigma`` put that cost back: each
RequestResponse invoke waits ``median * exp(sigma * N(0, 1))`` milliseconds (log-normal: the
usual model of service latency, ``sigma = 0`` a fixed delay), half before the function is
dispatched and half after it returns.

Like the frontend on AWS it is not billed and not in the REPORT line's Duration: the function
is not running. It holds no concurrency slot (the request is still on its way) and burns no
CPU (an ``asyncio`` sleep), so an emulated slow platform does not also slow the machine.
Event invocations return 202 at once; their latency is on nobody's critical path.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from typing import Any


class InvalidLatency(ValueError):
    """A latency setting that is negative or not a finite number."""


@dataclass
class InvokeLatency:
    median_ms: float = 0.0
    sigma: float = 0.0
    rng: random.Random = field(default_factory=random.Random, repr=False)

    def __post_init__(self) -> None:
        for name, value in (("median_ms", self.median_ms), ("sigma", self.sigma)):
            if not math.isfinite(value) or value < 0:
                raise InvalidLatency(f"invoke latency {name} must be a finite number >= 0, got {value!r}")

    @property
    def enabled(self) -> bool:
        return self.median_ms > 0

    def sample_s(self) -> float:
        """One invoke's total added latency in seconds (0 when disabled)."""
        if not self.enabled:
            return 0.0
        factor = math.exp(self.sigma * self.rng.gauss(0.0, 1.0)) if self.sigma > 0 else 1.0
        return self.median_ms * factor / 1000.0

    def describe(self) -> dict[str, Any]:
        return {"median_ms": self.median_ms, "sigma": self.sigma}
