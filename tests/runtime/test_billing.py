"""Billing JSON (Lambda prices, 1 ms rounding, INIT billed on cold starts) and /metrics."""

from __future__ import annotations

import math

import httpx
import pytest

from runtime.billing import PRICES, billed_ms


def test_billed_ms_rounding() -> None:
    assert billed_ms(0.2) == 1 and billed_ms(3.01) == 4 and billed_ms(5.0) == 5
    assert billed_ms(1.5, init_ms=100.2) == 102


def test_billing_report(client, deploy, server) -> None:
    name = deploy({"app.py": "import time\ndef handler(e, c):\n    time.sleep(0.05)\n"
                   "    if e.get('fail'):\n        raise ValueError('x')\n    return 1\n"}, MemorySize=512)
    for event in (b"{}", b"{}", b'{"fail": true}'):
        client.invoke(FunctionName=name, Payload=event)
    report = server.billing()
    f = report["functions"][name]
    assert (f["invocations"], f["errors"], f["cold_starts"], f["throttles"], f["timeouts"]) == (3, 1, 1, 0, 0)
    assert f["memory_mb"] == 512 and f["duration_ms"] >= 150
    assert f["billed_ms"] >= math.ceil(f["duration_ms"] + f["init_ms"]) - 1
    assert f["billed_ms"] <= f["duration_ms"] + f["init_ms"] + 3
    assert f["gb_seconds"] == pytest.approx(0.5 * f["billed_ms"] / 1000)
    assert f["requests_usd"] == pytest.approx(3 * 0.20 / 1e6)
    assert f["duration_usd"] == pytest.approx(f["gb_seconds"] * 0.0000166667)
    assert f["cost_usd"] == pytest.approx(f["requests_usd"] + f["duration_usd"])
    assert report["prices"]["usd_per_gb_second"] == PRICES["usd_per_gb_second"]
    assert report["total"]["invocations"] >= 3
    for key in ("invocations", "errors", "throttles", "timeouts", "cold_starts", "duration_ms",
                "billed_ms", "init_ms", "gb_seconds", "requests_usd", "duration_usd", "cost_usd", "memory_mb"):
        assert key in report["total"]


def test_prometheus_metrics(client, deploy, server) -> None:
    name = deploy({"app.py": "def handler(e, c):\n    return 1\n"})
    client.invoke(FunctionName=name)
    text = httpx.get(f"{server.endpoint}/metrics").text
    assert f'lambda_invocations_total{{function="{name}"}} 1.0' in text
    assert f'lambda_cold_starts_total{{function="{name}"}} 1.0' in text
    assert "lambda_duration_seconds_bucket" in text and "lambda_environments" in text
