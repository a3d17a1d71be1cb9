"""Per-function metering, billed like Lambda, and the Prometheus view of the same counters.

Billed duration = (Duration + Init Duration on a cold start) rounded up to 1 ms; GB-s =
memory GB x billed seconds; plus a price per request (LAMBDA_CONTRACT.md section 1.5).

Beside that, how much of the duration the handlers spent waiting for one of the host's shared
cores (``cpu_wait_ms``, from the kernel's run-queue delay): on Lambda each environment has its
vCPU share to itself, so ``dedicated_gb_seconds`` — the GB-s without that wait — is what the
same work would have been billed there. The Lambda bill above is never reduced by it.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

PRICES = {
    "architecture": "x86_64",
    "usd_per_gb_second": 0.0000166667,
    "usd_per_request": 0.20 / 1_000_000,
    "billing_granularity_ms": 1,
    "init_billed": True,
}


def billed_ms(duration_ms: float, init_ms: float = 0.0) -> int:
    return max(1, math.ceil(duration_ms + init_ms - 1e-9))


@dataclass
class FunctionMeter:
    memory_mb: int = 128
    invocations: int = 0
    errors: int = 0
    throttles: int = 0
    timeouts: int = 0
    cold_starts: int = 0
    duration_ms: float = 0.0
    billed_ms: int = 0
    init_ms: float = 0.0
    gb_seconds: float = 0.0
    cpu_wait_ms: float = 0.0
    dedicated_gb_seconds: float = 0.0

    def report(self) -> dict[str, Any]:
        doc = asdict(self)
        doc["requests_usd"] = self.invocations * PRICES["usd_per_request"]
        doc["duration_usd"] = self.gb_seconds * PRICES["usd_per_gb_second"]
        doc["cost_usd"] = doc["requests_usd"] + doc["duration_usd"]
        doc["dedicated_cost_usd"] = (doc["requests_usd"]
                                     + self.dedicated_gb_seconds * PRICES["usd_per_gb_second"])
        return doc


class Billing:
    def __init__(self) -> None:
        self.meters: dict[str, FunctionMeter] = {}
        self.registry = CollectorRegistry()
        labels = ["function"]
        self.m_invocations = Counter("lambda_invocations", "Invocations run", labels, registry=self.registry)
        self.m_errors = Counter("lambda_errors", "Invocations that failed", labels, registry=self.registry)
        self.m_throttles = Counter("lambda_throttles", "Invocations throttled", labels, registry=self.registry)
        self.m_timeouts = Counter("lambda_timeouts", "Invocations timed out", labels, registry=self.registry)
        self.m_cold = Counter("lambda_cold_starts", "Cold starts", labels, registry=self.registry)
        self.m_duration = Histogram(
            "lambda_duration_seconds", "Handler duration", labels, registry=self.registry,
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60),
        )
        self.m_init = Histogram("lambda_init_duration_seconds", "Cold start (spawn + INIT)", labels,
                                registry=self.registry, buckets=(0.05, 0.1, 0.2, 0.3, 0.5, 1, 2, 5, 10))
        self.m_gbs = Counter("lambda_billed_gb_seconds", "Billed GB-seconds", labels, registry=self.registry)
        self.m_cpu_wait = Counter("lambda_cpu_wait_seconds",
                                  "Handler time spent waiting for a shared host CPU (in the billed duration)",
                                  labels, registry=self.registry)
        self.m_concurrent = Gauge("lambda_concurrent_executions", "In-flight invocations", labels,
                                  registry=self.registry)
        self.m_envs = Gauge("lambda_environments", "Execution environments by state", ["state"],
                            registry=self.registry)

    def _meter(self, name: str, memory_mb: int) -> FunctionMeter:
        meter = self.meters.setdefault(name, FunctionMeter(memory_mb=memory_mb))
        meter.memory_mb = memory_mb
        return meter

    def record(self, name: str, memory_mb: int, duration_ms: float, init_ms: float | None,
               error: bool, timeout: bool, cpu_wait_ms: float | None = None) -> int:
        """Meter one invocation; returns its billed duration in ms. ``cpu_wait_ms`` is already
        within [0, duration_ms] (``Invoker.run_once`` bounds what the worker reports)."""
        cold = init_ms is not None
        billed = billed_ms(duration_ms, init_ms or 0.0)
        gbs = memory_mb / 1024 * billed / 1000
        wait = cpu_wait_ms or 0.0
        dedicated = billed_ms(duration_ms - wait, init_ms or 0.0)
        m = self._meter(name, memory_mb)
        m.invocations += 1
        m.errors += int(error)
        m.timeouts += int(timeout)
        m.cold_starts += int(cold)
        m.duration_ms += duration_ms
        m.init_ms += init_ms or 0.0
        m.billed_ms += billed
        m.gb_seconds += gbs
        m.cpu_wait_ms += wait
        m.dedicated_gb_seconds += memory_mb / 1024 * dedicated / 1000
        self.m_invocations.labels(name).inc()
        if error:
            self.m_errors.labels(name).inc()
        if timeout:
            self.m_timeouts.labels(name).inc()
        if cold:
            self.m_cold.labels(name).inc()
            self.m_init.labels(name).observe((init_ms or 0.0) / 1000)
        self.m_duration.labels(name).observe(duration_ms / 1000)
        self.m_gbs.labels(name).inc(gbs)
        self.m_cpu_wait.labels(name).inc(wait / 1000)
        return billed

    def throttle(self, name: str, memory_mb: int) -> None:
        self._meter(name, memory_mb).throttles += 1
        self.m_throttles.labels(name).inc()

    def report(self) -> dict[str, Any]:
        functions = {name: m.report() for name, m in sorted(self.meters.items())}
        total: dict[str, Any] = {}
        for doc in functions.values():
            for key, value in doc.items():
                total[key] = total.get(key, 0) + value
        if not total:
            total = FunctionMeter(memory_mb=0).report()
        return {"functions": functions, "total": total, "prices": dict(PRICES)}
