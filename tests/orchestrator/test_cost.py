"""Cost arithmetic: Lambda billing at 1 ms, GB-s, requests, GPU seconds, always-on parts."""

from __future__ import annotations

import pytest

from orchestrator.cost import CostMeter, PriceTable, lambda_cost


def test_lambda_cost_rounds_up_to_the_millisecond() -> None:
    p = PriceTable()
    billed, usd = lambda_cost(3.01, 1024, p)
    assert billed == 4
    assert usd == pytest.approx(0.004 * 0.0000166667 + 0.2e-6)
    billed, usd = lambda_cost(1000.0, 1769, p)
    assert billed == 1000
    assert usd == pytest.approx(1769 / 1024 * 1.0 * 0.0000166667 + 0.2e-6)
    assert lambda_cost(0.0, 128, p)[0] == 1


def test_meter_components_and_fixed_costs() -> None:
    meter = CostMeter(PriceTable(orchestrator_hour_usd=3.6, redis_hour_usd=0.36))
    meter.invocation("actor", 999.2, 2048)
    meter.invocation("actor", 0.5, 2048)
    meter.invocation("learner", 2000.0, 1024, gpu=True)
    rep = meter.report(wall_s=10.0)
    actor = rep["functions"]["actor"]
    assert actor["invocations"] == 2 and actor["billed_ms"] == 1001
    assert actor["gb_seconds"] == pytest.approx(2.0 * 1.001)
    assert rep["functions"]["learner"]["usd"] == pytest.approx(2.0 * 1.006 / 3600)
    assert rep["fixed"] == {"orchestrator": pytest.approx(0.01), "orchestrator_burst": 0.0,
                            "redis": pytest.approx(0.001)}
    assert rep["total_usd"] == pytest.approx(
        actor["usd"] + rep["functions"]["learner"]["usd"] + 0.011)


def test_dedicated_vcpu_bill_leaves_out_the_wait_for_a_shared_core() -> None:
    meter = CostMeter(PriceTable(orchestrator_hour_usd=3.6, redis_hour_usd=0.0))
    usd = meter.invocation("actor", 1000.0, 1024, cpu_wait_ms=250.0)
    meter.invocation("actor", 500.0, 1024)  # no measurement (AWS, inline): billed as it is
    meter.invocation("learner", 100.0, 1024, cpu_wait_ms=400.0)  # a wait over the duration caps
    actor = meter.report(10.0)["functions"]["actor"]
    assert usd == pytest.approx(1.0 * 0.0000166667 + 0.2e-6)  # the Lambda bill is not reduced
    assert actor["cpu_wait_ms"] == pytest.approx(250.0)
    assert actor["usd_dedicated"] == pytest.approx(1.25 * 0.0000166667 + 0.4e-6)
    learner = meter.report(10.0)["functions"]["learner"]
    assert learner["usd_dedicated"] == pytest.approx(0.001 * 0.0000166667 + 0.2e-6)
    rep = meter.report(10.0)
    assert rep["total_usd_dedicated_vcpu"] == pytest.approx(
        actor["usd_dedicated"] + learner["usd_dedicated"] + 0.01)
    assert meter.total(10.0, dedicated=True) == pytest.approx(rep["total_usd_dedicated_vcpu"])
    assert meter.total(10.0) == pytest.approx(rep["total_usd"]) and rep["total_usd"] > meter.total(10.0, True)


def test_dedicated_bill_of_a_run_saved_before_it_was_kept() -> None:
    # A resumed run's components come back from its metadata; old ones lack the new keys.
    meter = CostMeter()
    meter.components["actor"] = {"invocations": 1, "billed_ms": 1000, "gb_seconds": 1.0, "usd": 0.5}
    meter.invocation("actor", 1000.0, 1024, cpu_wait_ms=500.0)
    actor = meter.components["actor"]
    assert actor["usd_dedicated"] == pytest.approx(0.5 + 0.5 * 0.0000166667 + 0.2e-6)
    assert actor["cpu_wait_ms"] == pytest.approx(500.0)


def test_serverful_pays_the_whole_wall_time() -> None:
    meter = CostMeter(PriceTable(serverful_hour_usd=0.085), serverless=False)
    assert meter.total(3600.0) == pytest.approx(0.085)


def test_price_overrides() -> None:
    p = PriceTable.from_overrides({"lambda_gb_second_usd": 1.0})
    assert p.lambda_gb_second_usd == 1.0 and p.lambda_request_usd == pytest.approx(0.2e-6)


def test_a_learner_is_billed_by_the_device_it_reports_having_run_on() -> None:
    """With device "auto" on a GPU machine the learners run on CUDA: billed as GPU time."""
    from types import SimpleNamespace

    from orchestrator.config import load_config
    from orchestrator.invokers.base import InvocationResult
    from orchestrator.trainer import Trainer

    cfg = load_config(None, {"device": "auto", "total_steps": 1})
    trainer = SimpleNamespace(cfg=cfg, cost=CostMeter())
    for device in ("cuda:0", "cpu"):
        Trainer.record_cost(trainer, InvocationResult("learner", True, {"device": device},
                                                      duration_ms=1000.0))
    gpu_s = 1.0 * PriceTable().gpu_instance_hour_usd / 3600
    cpu_s = lambda_cost(1000.0, cfg.learner_memory_mb, PriceTable())[1]
    assert trainer.cost.report(wall_s=1.0)["functions"]["learner"]["usd"] == pytest.approx(
        gpu_s + cpu_s)
