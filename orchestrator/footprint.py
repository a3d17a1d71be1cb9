"""What a run's always-on parts used, measured, against the instances they are priced as.

The cost table (:mod:`orchestrator.cost`) prices the orchestrator as a t3.micro and Redis as a
cache.t4g.micro. That is only honest while the run fits them, so every run measures:

- the orchestrator process: CPU seconds (``time.process_time``: all its threads) and the
  peak of its resident memory over the run (sampled from ``/proc/self/statm`` at each metrics
  row; not ``getrusage``'s lifetime peak, which would count whatever a process hosting several
  runs, a test session, held before this one). The functions run elsewhere (runtime workers, Lambda, Ray
  workers) — except on the ``inline`` backend, whose handlers are threads of this process: there
  the CPU is not the orchestrator's alone and is reported as unmeasured (and not billed);
- the Redis server: ``INFO``'s CPU seconds, peak memory and bytes in and out.

and reports each against its instance: CPU against the baseline share the hourly price covers
(above it the orchestrator's surplus is billed, as T3's unlimited mode bills it; Redis has no
such mode, so a Redis above its baseline does not fit), memory against what the instance leaves
the process, network against the instance's baseline bandwidth. A run that does not fit says
so in ``summary.json`` (``footprint``) and on the console, with what was over.

With Redis on the orchestrator's instance (``redis_host="orchestrator"``) the two share it:
their CPU together against its baseline (the surplus billed), their memory together against
what it leaves them, Redis's traffic against its network baseline.
"""

from __future__ import annotations

import resource
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orchestrator.cost import PriceTable

MIB = 1024 * 1024


@dataclass(frozen=True)
class InstanceSize:
    """What an always-on part's priced instance can carry."""

    name: str
    baseline_vcpu: float  # CPU share the hourly price covers (burstable: the baseline)
    memory_mib: float  # what the instance leaves the process (the OS / reserved memory out)
    baseline_mbps: float  # sustained network bandwidth (burstable: the baseline)


# t3.micro: 1 GiB, of which the OS and agents keep ~200 MiB; its CPU baseline is the one the
# price table bills surplus above (one number, in PriceTable); 64 Mbit/s baseline network
# (bursts to 5 Gbit/s).
ORCHESTRATOR_INSTANCE = InstanceSize(
    "t3.micro", PriceTable().orchestrator_baseline_vcpu, 1024 - 200, 64.0)
# cache.t4g.micro: 0.5 GiB, of which ElastiCache reserves 25% by default (reserved-memory-percent);
# 2 vCPU at a 10% baseline each; 64 Mbit/s baseline network.
REDIS_INSTANCE = InstanceSize("cache.t4g.micro", 0.2, 512 * 0.75, 64.0)


def rss_mib() -> float:
    """Resident memory of this process now (``/proc/self/statm``); where there is no /proc,
    its lifetime peak (``ru_maxrss``: KiB on Linux, bytes on macOS — an over-estimate either
    way, never an under-estimate)."""
    try:
        resident_pages = int(Path("/proc/self/statm").read_text().split()[1])
        return resident_pages * resource.getpagesize() / MIB
    except (OSError, IndexError, ValueError):
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def redis_counters(info: dict[str, Any]) -> dict[str, float]:
    """The cumulative counters of a Redis ``INFO`` reply this module uses."""
    return {
        "cpu_s": float(info.get("used_cpu_sys", 0.0)) + float(info.get("used_cpu_user", 0.0)),
        "net_bytes": float(info.get("total_net_input_bytes", 0))
        + float(info.get("total_net_output_bytes", 0)),
        "peak_memory_mib": float(info.get("used_memory_peak", 0)) / MIB,
        "uptime_s": float(info.get("uptime_in_seconds", 0)),
    }


class Footprint:
    """Measures the orchestrator process and the Redis server over one run session."""

    def __init__(self, orchestrator_measured: bool = True,
                 redis_on_orchestrator: bool = False) -> None:
        self.orchestrator_measured = orchestrator_measured
        self.redis_on_orchestrator = redis_on_orchestrator
        self._cpu0 = time.process_time()
        self._cpu_offset = 0.0  # earlier sessions of a resumed run
        self._redis_cpu_offset = 0.0
        self._peak_rss_mib = rss_mib()
        self._redis0: dict[str, float] | None = None
        self._redis_last: dict[str, float] | None = None
        self._redis_done = {"cpu_s": 0.0, "net_bytes": 0.0}  # servers that restarted since
        self._redis_peak_mib = 0.0

    # -- orchestrator ---------------------------------------------------------------------------
    def orchestrator_cpu_s(self) -> float:
        """CPU seconds of the orchestrator over the run, all sessions (0 when unmeasured)."""
        if not self.orchestrator_measured:
            return 0.0
        return self._cpu_offset + time.process_time() - self._cpu0

    def sample_orchestrator(self) -> None:
        """Record the orchestrator's resident memory now (its peak over the run is reported)."""
        self._peak_rss_mib = max(self._peak_rss_mib, rss_mib())

    def resume(self, cpu_s: float, redis_cpu_s: float = 0.0) -> None:
        """Continue a resumed run's CPU clocks (orchestrator, Redis) from its checkpoint."""
        self._cpu_offset = float(cpu_s) if self.orchestrator_measured else 0.0
        self._redis_cpu_offset = float(redis_cpu_s)

    # -- redis --------------------------------------------------------------------------------
    def sample_redis(self, info: dict[str, Any]) -> None:
        """Record a Redis ``INFO`` reply (the first is the baseline of the deltas). A server
        that restarted (its uptime went back) counted from zero again: what the old one counted
        is kept, and the new one's counters are the next baseline."""
        now = redis_counters(info)
        self._redis_peak_mib = max(self._redis_peak_mib, now["peak_memory_mib"])
        last, first = self._redis_last, self._redis0
        if last is not None and first is not None and now["uptime_s"] < last["uptime_s"]:
            for key in self._redis_done:
                self._redis_done[key] += last[key] - first[key]
            self._redis0 = {**now, "cpu_s": 0.0, "net_bytes": 0.0}
        elif first is None:
            self._redis0 = now
        self._redis_last = now

    def redis_cpu_s(self) -> float:
        """CPU seconds of the Redis server over the run, all sessions and restarts."""
        return self._redis_cpu_offset + self._session_redis_cpu_s()

    def _session_redis_cpu_s(self) -> float:
        if self._redis0 is None or self._redis_last is None:
            return 0.0  # before the first INFO
        return self._redis_done["cpu_s"] + self._redis_last["cpu_s"] - self._redis0["cpu_s"]

    # -- report -------------------------------------------------------------------------------
    def report(self, session_wall_s: float) -> dict[str, Any]:
        """Usage over this session's ``session_wall_s`` seconds against the priced instances."""
        wall = max(session_wall_s, 1e-9)
        out: dict[str, Any] = {"orchestrator": self._orchestrator(wall)}
        if self._redis0 is not None and self._redis_last is not None:
            out["redis"] = self._redis(wall)
        out["fits"] = all(part.get("fits", True) for part in out.values() if isinstance(part, dict))
        return out

    def _orchestrator(self, wall: float) -> dict[str, Any]:
        inst = ORCHESTRATOR_INSTANCE
        self.sample_orchestrator()
        rss = self._peak_rss_mib
        part: dict[str, Any] = {"instance": inst.name, "peak_rss_mib": round(rss, 1),
                                "memory_mib": inst.memory_mib, "baseline_vcpu": inst.baseline_vcpu}
        # Redis on this instance: its memory and CPU count against the instance too
        shared = self.redis_on_orchestrator
        redis_mib = self._redis_peak_mib if shared else 0.0
        redis_vcpu = self._session_redis_cpu_s() / wall if shared else 0.0
        if shared:
            part["with_redis"] = True
        over = []
        if self.orchestrator_measured:
            vcpu = (self.orchestrator_cpu_s() - self._cpu_offset) / wall  # this session's
            part["vcpu_mean"] = round(vcpu, 4)
            if vcpu + redis_vcpu > inst.baseline_vcpu:  # billed (unlimited mode): a note
                part["note"] = (f"CPU {vcpu + redis_vcpu:.2f} vCPU above the "
                                f"{inst.baseline_vcpu} baseline: surplus billed")
        else:
            part["vcpu_mean"] = None
            part["note"] = "inline backend: the functions are threads of this process, CPU unmeasured"
        if rss + redis_mib > inst.memory_mib:
            with_redis = f" (with Redis's {redis_mib:.0f})" if shared else ""
            over.append(f"peak memory {rss + redis_mib:.0f} MiB{with_redis} > "
                        f"{inst.memory_mib:.0f} MiB")
        part["fits"] = not over
        part["over"] = over
        return part

    def _redis(self, wall: float) -> dict[str, Any]:
        shared = self.redis_on_orchestrator
        inst = ORCHESTRATOR_INSTANCE if shared else REDIS_INSTANCE
        r0, r1 = self._redis0 or {}, self._redis_last or {}
        done = self._redis_done
        vcpu = self._session_redis_cpu_s() / wall
        mbps = (done["net_bytes"] + r1["net_bytes"] - r0["net_bytes"]) * 8 / 1e6 / wall
        peak = self._redis_peak_mib
        over = []
        # On the orchestrator's instance its CPU and memory are checked with the
        # orchestrator's (above); on its own node here, where a CPU surplus is not billable.
        if not shared and vcpu > inst.baseline_vcpu:
            over.append(f"CPU {vcpu:.2f} vCPU > {inst.baseline_vcpu} baseline")
        if not shared and peak > inst.memory_mib:
            over.append(f"peak memory {peak:.0f} MiB > {inst.memory_mib:.0f} MiB")
        if mbps > inst.baseline_mbps:
            over.append(f"network {mbps:.1f} Mbit/s > {inst.baseline_mbps:.0f} Mbit/s baseline")
        name = f"{inst.name} (the orchestrator's)" if shared else inst.name
        return {"instance": name, "vcpu_mean": round(vcpu, 4), "baseline_vcpu": inst.baseline_vcpu,
                "peak_memory_mib": round(peak, 1), "memory_mib": inst.memory_mib,
                "net_mbps_mean": round(mbps, 2), "baseline_mbps": inst.baseline_mbps,
                "fits": not over, "over": over}


def misfit_lines(footprint: dict[str, Any]) -> list[str]:
    """One console line per always-on part that outgrew its priced instance."""
    return [f"warning: the {name} outgrew its priced {part['instance']}: {'; '.join(part['over'])} "
            "(the $ is under-priced; see orchestrator/footprint.py)"
            for name, part in footprint.items() if isinstance(part, dict) and part.get("over")]
