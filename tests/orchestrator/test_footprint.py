"""The always-on parts' footprint: the orchestrator's CPU and memory, Redis's CPU, memory and
network, measured (a real redis-server) and checked against the instances they are priced as."""

from __future__ import annotations

import time

import pytest
import redis

from orchestrator.config import ConfigError, load_config
from orchestrator.cost import UNSIZED_FIXED_PRICES, CostMeter, PriceTable, fixed_usd, reprice_fixed
from orchestrator.footprint import REDIS_INSTANCE, Footprint, misfit_lines


def _burn(seconds: float) -> None:
    end = time.process_time() + seconds
    while time.process_time() < end:
        pass


def test_the_orchestrators_cpu_is_its_process_time_and_resumes_from_a_checkpoint() -> None:
    fp = Footprint()
    _burn(0.2)
    assert 0.2 <= fp.orchestrator_cpu_s() < 5.0
    fp.resume(100.0)  # a resumed run carries on from its checkpoint's CPU seconds
    assert fp.orchestrator_cpu_s() >= 100.2
    part = fp.report(session_wall_s=1.0)["orchestrator"]
    assert part["vcpu_mean"] >= 0.2 and part["peak_rss_mib"] > 10
    # inline handlers are threads of the orchestrator's process: nothing measured, nothing billed
    inline = Footprint(orchestrator_measured=False)
    _burn(0.05)
    inline.resume(100.0)
    assert inline.orchestrator_cpu_s() == 0.0
    assert inline.report(1.0)["orchestrator"]["vcpu_mean"] is None


def test_the_orchestrators_memory_is_its_peak_over_the_run_not_the_process_lifetime() -> None:
    import numpy as np

    from orchestrator.footprint import rss_mib

    fp = Footprint()
    start = rss_mib()
    block = np.ones(64 * 2**20 // 8)  # 64 MiB, touched
    fp.sample_orchestrator()
    del block
    part = fp.report(1.0)["orchestrator"]
    assert part["peak_rss_mib"] >= start + 60
    # a run that starts after the block was freed does not count it
    later = Footprint().report(1.0)["orchestrator"]
    assert later["peak_rss_mib"] < part["peak_rss_mib"]


def test_redis_usage_is_read_from_a_real_servers_info(redis_url: str) -> None:
    client = redis.Redis.from_url(redis_url)
    fp = Footprint()
    fp.sample_redis(client.info())
    blob = b"x" * 256 * 1024
    t0 = time.monotonic()
    for i in range(40):
        client.set(f"footprint-test:{i}", blob)
        client.get(f"footprint-test:{i}")
    client.delete(*(f"footprint-test:{i}" for i in range(40)))
    fp.sample_redis(client.info())
    wall = time.monotonic() - t0
    part = fp.report(session_wall_s=wall)["redis"]
    # 40 x 256 KiB in and out, over the wall time it took
    assert part["net_mbps_mean"] >= 2 * 40 * 256 * 1024 * 8 / 1e6 / wall * 0.9
    assert part["vcpu_mean"] >= 0.0 and part["peak_memory_mib"] >= 256 / 1024
    assert part["instance"] == REDIS_INSTANCE.name
    client.close()


def test_a_restarted_redis_keeps_what_the_old_server_counted() -> None:
    fp = Footprint()

    def info(uptime: int, cpu: float, net: int, peak: int) -> dict[str, float]:
        return {"uptime_in_seconds": uptime, "used_cpu_sys": cpu, "used_cpu_user": 0.0,
                "total_net_input_bytes": net, "total_net_output_bytes": 0, "used_memory_peak": peak}

    fp.sample_redis(info(1000, 5.0, 1_000_000, 10 * 2**20))
    fp.sample_redis(info(1010, 6.0, 2_000_000, 12 * 2**20))  # +1 s CPU, +1 MB
    fp.sample_redis(info(3, 0.5, 500_000, 2**20))  # restarted: its counters began again
    part = fp.report(session_wall_s=10.0)["redis"]
    assert part["vcpu_mean"] == pytest.approx(1.5 / 10)
    assert part["net_mbps_mean"] == pytest.approx(1.5e6 * 8 / 1e6 / 10)
    assert part["peak_memory_mib"] == pytest.approx(12.0)  # the old server's peak is not lost


def test_a_run_that_outgrows_its_priced_instances_says_so() -> None:
    fp = Footprint()
    fp.sample_redis({"uptime_in_seconds": 1, "used_cpu_sys": 0.0, "used_memory_peak": 0,
                     "total_net_input_bytes": 0})
    fp.sample_redis({"uptime_in_seconds": 11, "used_cpu_sys": 5.0, "used_memory_peak": 2**30,
                     "total_net_input_bytes": 200e6})
    report = fp.report(session_wall_s=10.0)
    over = report["redis"]["over"]
    assert not report["redis"]["fits"] and not report["fits"]
    assert any("CPU 0.50 vCPU" in o for o in over)
    assert any("peak memory 1024 MiB" in o for o in over)
    assert any("network 160.0 Mbit/s" in o for o in over)
    # (the orchestrator's line depends on the test process's memory: only Redis's is checked)
    (line,) = [x for x in misfit_lines(report) if "redis" in x]
    assert line.startswith("warning: the redis outgrew its priced cache.t4g.micro")


def test_orchestrator_cpu_above_its_baseline_is_billed_at_the_burst_price() -> None:
    p = PriceTable()
    # an hour at the 0.2-vCPU baseline: the hourly price alone
    assert fixed_usd(p, True, 3600.0, 720.0)["orchestrator_burst"] == 0.0
    # an hour at one whole vCPU: 0.8 surplus vCPU-hours at the burst price
    fixed = fixed_usd(p, True, 3600.0, 3600.0)
    assert fixed["orchestrator_burst"] == pytest.approx(0.8 * p.burst_vcpu_hour_usd)
    meter = CostMeter(p)
    assert meter.total(3600.0, orchestrator_cpu_s=3600.0) == pytest.approx(
        p.orchestrator_hour_usd + p.redis_hour_usd + 0.8 * p.burst_vcpu_hour_usd)
    assert meter.report(3600.0, 3600.0)["orchestrator_cpu_s"] == 3600.0
    # a serverful baseline has one machine: no orchestrator, nothing burst
    assert fixed_usd(p, False, 3600.0, 3600.0) == {"instance": pytest.approx(p.serverful_hour_usd)}


def test_a_bill_repriced_at_the_unsized_prices_changes_only_its_always_on_part() -> None:
    sized = PriceTable()
    unsized = PriceTable.from_overrides(UNSIZED_FIXED_PRICES)
    meter = CostMeter(sized)
    meter.invocation("actor", 60_000.0, 1769)
    usd = meter.total(600.0, orchestrator_cpu_s=30.0)
    repriced = reprice_fixed(usd, 600.0, 30.0, sized, unsized)
    assert repriced == pytest.approx(CostMeter(unsized, components=meter.components).total(600.0, False, 30.0))
    assert repriced - usd == pytest.approx(600.0 / 3600 * (0.0416 + 0.034 - 0.0104 - 0.016))


def test_prices_are_overridable_by_config_and_unknown_ones_refused() -> None:
    cfg = load_config(None, {"total_steps": 1, "prices": {"orchestrator_hour_usd": 0.0416}})
    assert PriceTable.from_overrides(cfg.prices).orchestrator_hour_usd == 0.0416
    with pytest.raises(ConfigError, match="unknown price.*orchestrator_hourly"):
        load_config(None, {"total_steps": 1, "prices": {"orchestrator_hourly": 1.0}})
    with pytest.raises(ConfigError, match="negative"):
        load_config(None, {"total_steps": 1, "prices": {"redis_hour_usd": -1.0}})


def test_redis_on_the_orchestrators_instance_is_no_line_of_its_own_and_shares_its_baseline() -> None:
    p = PriceTable()
    # an hour, each process at 0.15 vCPU: 0.3 together, 0.1 above the t3.micro's 0.2 baseline
    fixed = fixed_usd(p, True, 3600.0, 1080.0, redis_on_orchestrator=True)
    assert "redis" not in fixed and fixed["orchestrator"] == pytest.approx(p.orchestrator_hour_usd)
    meter = CostMeter(p, redis_on_orchestrator=True)
    meter.invocation("actor", 60_000.0, 1769)
    total = meter.total(3600.0, orchestrator_cpu_s=540.0, redis_cpu_s=540.0)
    functions = meter.components["actor"]["usd"]
    assert total == pytest.approx(functions + p.orchestrator_hour_usd + 0.1 * p.burst_vcpu_hour_usd)
    report = meter.report(3600.0, 540.0, 540.0)
    assert report["redis_on_orchestrator"] and report["redis_cpu_s"] == 540.0
    assert "redis" not in report["fixed"]
    # on its own node Redis's CPU is its own node's: the orchestrator's alone is under baseline
    own = CostMeter(p, components=meter.components)
    assert own.total(3600.0, orchestrator_cpu_s=540.0, redis_cpu_s=540.0) == pytest.approx(
        functions + p.orchestrator_hour_usd + p.redis_hour_usd)
    # repricing a co-located run's bill as if Redis had its own node adds that node, drops the burst
    moved = reprice_fixed(total, 3600.0, 540.0, p, p, redis_on_orchestrator=True,
                          other_redis_on_orchestrator=False, redis_cpu_s=540.0)
    assert moved == pytest.approx(functions + p.orchestrator_hour_usd + p.redis_hour_usd)


def test_footprint_with_redis_on_the_orchestrators_instance_checks_them_together() -> None:
    fp = Footprint(redis_on_orchestrator=True)
    fp.sample_redis({"uptime_in_seconds": 10, "used_cpu_sys": 1.0, "used_memory_peak": 2**20,
                     "total_net_input_bytes": 0})
    # Redis used 0.3 vCPU over 10 s and 900 MiB: over the t3.micro's memory with the
    # orchestrator's, its CPU a billed surplus (a note), not a misfit
    fp.sample_redis({"uptime_in_seconds": 20, "used_cpu_sys": 4.0, "used_memory_peak": 900 * 2**20,
                     "total_net_input_bytes": 10e6})
    assert fp.redis_cpu_s() == pytest.approx(3.0)
    report = fp.report(session_wall_s=10.0)
    orch, part = report["orchestrator"], report["redis"]
    assert part["instance"] == "t3.micro (the orchestrator's)" and part["fits"]
    assert part["net_mbps_mean"] == pytest.approx(8.0)
    assert orch["with_redis"] and not orch["fits"] and not report["fits"]
    assert any("(with Redis's 900)" in o for o in orch["over"])
    assert "surplus billed" in orch["note"]
    # a resumed run carries Redis's CPU seconds on from its checkpoint
    fp.resume(0.0, redis_cpu_s=7.0)
    assert fp.redis_cpu_s() == pytest.approx(10.0)


def test_redis_host_is_in_the_config_and_checked() -> None:
    assert load_config(None, {"total_steps": 1}).redis_host == "orchestrator"
    assert load_config(None, {"total_steps": 1, "redis_host": "elasticache"}).redis_host == "elasticache"
    with pytest.raises(ConfigError):
        load_config(None, {"total_steps": 1, "redis_host": "memcached"})
