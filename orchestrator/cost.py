"""Cost accounting on one clock: every system is billed by the same table and stopwatch.

Serverless components are billed like Lambda (duration rounded up to 1 ms x memory GB x price
per GB-s, plus a price per request); GPU learner time at a GPU instance's per-second price;
serverful components (the orchestrator's VM, Redis, a baseline's whole cluster) for the whole
wall-clock time. Prices: us-east-1 list prices (re-check before publishing), overridable.

The always-on parts are priced at the size they need, as the baseline's machine is: a
serverful baseline keeps two vCPUs busy, so it pays a c6i.large; the orchestrator keeps a tenth
of one busy and Redis holds a few MB, so they pay a burstable t3.micro and a cache.t4g.micro.
Sizing is checked on every run, not assumed: :mod:`orchestrator.footprint` measures what both
used and says when a run outgrew its priced instance. A burstable instance runs above its
baseline CPU share in "unlimited" mode (T3's default) and is billed for the surplus vCPU-hours,
so the orchestrator's bill includes that surplus, from the CPU time it measured.

Where Redis runs is the deployment's choice (``redis_host``): on the orchestrator's instance
(the default, as ``docker compose`` and the embedded Redis of ``stellaris train`` run it; on AWS
the functions reach it in the VPC as they would reach ElastiCache) it adds no line of its own,
and the instance's CPU above its baseline is the two processes' together; on its own ElastiCache
node it is billed as one. :mod:`orchestrator.footprint` checks either against its instance.

A second figure, never the headline: the same bill at **dedicated vCPUs**. Where functions run
on a shared host (the local runtime on a laptop), part of each billed duration is time spent
waiting for one of its cores, which the runtime measures (``cpu_wait_ms``); on Lambda every
environment has its vCPU share to itself, so the same invocations would be billed without it.
The fixed components and the wall clock are the same in both figures.
"""

from __future__ import annotations

import math
import threading
from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass(frozen=True)
class PriceTable:
    lambda_gb_second_usd: float = 0.0000166667  # x86_64, first tier
    lambda_request_usd: float = 0.20 / 1_000_000
    gpu_instance_hour_usd: float = 1.006  # g5.xlarge (1x A10G), on demand
    orchestrator_hour_usd: float = 0.0104  # t3.micro: 2 vCPU (burstable), 1 GiB — the control loop
    # vCPUs the hourly price covers: a t3.micro's baseline is 10% of each of its 2 vCPUs
    orchestrator_baseline_vcpu: float = 0.2
    burst_vcpu_hour_usd: float = 0.05  # T3 unlimited mode: surplus vCPU-hour above the baseline
    redis_hour_usd: float = 0.016  # cache.t4g.micro (ElastiCache): 2 vCPU, 0.5 GiB
    serverful_hour_usd: float = 0.085  # c6i.large: 2 vCPU — a baseline's whole machine

    @classmethod
    def from_overrides(cls, overrides: dict[str, float] | None) -> PriceTable:
        unknown = sorted(set(overrides or {}) - set(asdict(cls())))
        if unknown:
            raise ValueError(f"unknown price(s) {', '.join(unknown)}: the prices are "
                             f"{', '.join(asdict(cls()))}")
        return cls(**{**asdict(cls()), **(overrides or {})})


# The always-on parts as the first benchmarks priced them, before they were sized to what they
# use: a t3.medium orchestrator (its 2 x 20% baseline is more than it ever used) and a
# cache.t4g.small Redis. compare.py reports the $ at these prices beside the current ones.
UNSIZED_FIXED_PRICES: dict[str, float] = {
    "orchestrator_hour_usd": 0.0416, "orchestrator_baseline_vcpu": 0.4, "redis_hour_usd": 0.034,
}


def lambda_cost(duration_ms: float, memory_mb: int, prices: PriceTable) -> tuple[int, float]:
    """(billed ms, USD) of one invocation: 1 ms rounding, GB-s, plus the request price."""
    billed_ms = max(1, math.ceil(duration_ms))
    gb_s = (memory_mb / 1024.0) * (billed_ms / 1000.0)
    return billed_ms, gb_s * prices.lambda_gb_second_usd + prices.lambda_request_usd


@dataclass
class CostMeter:
    """Accumulates the cost of a run, per component, thread-safe."""

    prices: PriceTable = field(default_factory=PriceTable)
    serverless: bool = True
    # Redis runs on the orchestrator's instance: no Redis line; the CPU passed in is both's
    redis_on_orchestrator: bool = False
    components: dict[str, dict[str, float]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def invocation(self, component: str, duration_ms: float, memory_mb: int, gpu: bool = False,
                   cpu_wait_ms: float | None = None) -> float:
        billed_ms, usd = self._bill(duration_ms, memory_mb, gpu)
        wait = min(max(cpu_wait_ms or 0.0, 0.0), duration_ms)
        dedicated_usd = self._bill(duration_ms - wait, memory_mb, gpu)[1] if wait else usd
        with self._lock:
            c = self.components.setdefault(
                component, {"invocations": 0, "billed_ms": 0, "gb_seconds": 0.0, "usd": 0.0}
            )
            # a component restored from a run saved before these two were kept starts them here
            c.setdefault("cpu_wait_ms", 0.0)
            c.setdefault("usd_dedicated", c["usd"])
            c["invocations"] += 1
            c["billed_ms"] += billed_ms
            c["gb_seconds"] += memory_mb / 1024.0 * billed_ms / 1000.0
            c["usd"] += usd
            c["cpu_wait_ms"] += wait
            c["usd_dedicated"] += dedicated_usd
        return usd

    def _bill(self, duration_ms: float, memory_mb: int, gpu: bool) -> tuple[int, float]:
        """(billed ms, USD) of one invocation of ``duration_ms``."""
        billed_ms, usd = lambda_cost(duration_ms, memory_mb, self.prices)
        if gpu:  # a GPU learner is billed per second of GPU instance instead of GB-s
            usd = billed_ms / 1000.0 * self.prices.gpu_instance_hour_usd / 3600.0
        return billed_ms, usd

    def fixed_usd(self, wall_s: float, orchestrator_cpu_s: float = 0.0,
                  redis_cpu_s: float = 0.0) -> dict[str, float]:
        """Always-on components for ``wall_s`` seconds, during which the orchestrator used
        ``orchestrator_cpu_s`` CPU seconds and Redis ``redis_cpu_s``: the instance's CPU above
        its baseline share is billed (the orchestrator's, plus Redis's where Redis runs on it)."""
        cpu = orchestrator_cpu_s + (redis_cpu_s if self.redis_on_orchestrator else 0.0)
        return fixed_usd(self.prices, self.serverless, wall_s, cpu, self.redis_on_orchestrator)

    def total(self, wall_s: float, dedicated: bool = False, orchestrator_cpu_s: float = 0.0,
              redis_cpu_s: float = 0.0) -> float:
        """USD so far; ``dedicated``: the functions billed without their shared-CPU wait."""
        key = "usd_dedicated" if dedicated else "usd"
        with self._lock:
            variable = sum(c.get(key, c["usd"]) for c in self.components.values())
        return variable + sum(self.fixed_usd(wall_s, orchestrator_cpu_s, redis_cpu_s).values())

    def report(self, wall_s: float, orchestrator_cpu_s: float = 0.0,
               redis_cpu_s: float = 0.0) -> dict[str, Any]:
        with self._lock:
            comps = {k: dict(v) for k, v in self.components.items()}
        fixed = self.fixed_usd(wall_s, orchestrator_cpu_s, redis_cpu_s)
        return {
            "wall_s": wall_s,
            "orchestrator_cpu_s": orchestrator_cpu_s,
            "redis_cpu_s": redis_cpu_s,
            "functions": comps,
            "fixed": fixed,
            "total_usd": sum(c["usd"] for c in comps.values()) + sum(fixed.values()),
            "total_usd_dedicated_vcpu": sum(c.get("usd_dedicated", c["usd"]) for c in comps.values())
            + sum(fixed.values()),
            "prices": asdict(self.prices),
            "redis_on_orchestrator": self.redis_on_orchestrator,
        }


def fixed_usd(prices: PriceTable, serverless: bool, wall_s: float,
              orchestrator_cpu_s: float = 0.0, redis_on_orchestrator: bool = False
              ) -> dict[str, float]:
    """The always-on part of a bill: a serverless run's orchestrator VM (its hourly price plus
    any CPU above its baseline share, at the burst price) and Redis on its own node unless it
    runs on that VM; a serverful one's machine."""
    hours = wall_s / 3600.0
    if not serverless:
        return {"instance": hours * prices.serverful_hour_usd}
    surplus_vcpu_h = max(0.0, orchestrator_cpu_s / 3600.0 - hours * prices.orchestrator_baseline_vcpu)
    out = {
        "orchestrator": hours * prices.orchestrator_hour_usd,
        "orchestrator_burst": surplus_vcpu_h * prices.burst_vcpu_hour_usd,
    }
    if not redis_on_orchestrator:
        out["redis"] = hours * prices.redis_hour_usd
    return out


def reprice_fixed(usd: float, wall_s: float, orchestrator_cpu_s: float, run_prices: PriceTable,
                  other: PriceTable, redis_on_orchestrator: bool = False,
                  other_redis_on_orchestrator: bool = False, redis_cpu_s: float = 0.0) -> float:
    """A serverless run's bill ``usd`` at ``wall_s`` with its always-on parts priced by
    ``other`` (and Redis placed by ``other_redis_on_orchestrator``) instead of how the run
    priced them (the functions' part does not depend on them). ``orchestrator_cpu_s`` is the
    orchestrator process's own CPU; ``redis_cpu_s`` Redis's, which shares the instance's
    baseline where Redis runs on it."""
    def fixed(prices: PriceTable, on_orchestrator: bool) -> float:
        cpu = orchestrator_cpu_s + (redis_cpu_s if on_orchestrator else 0.0)
        return sum(fixed_usd(prices, True, wall_s, cpu, on_orchestrator).values())

    return (usd - fixed(run_prices, redis_on_orchestrator)
            + fixed(other, other_redis_on_orchestrator))
