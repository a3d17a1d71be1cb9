"""Emulated platform latency: a real runtime server with ``--invoke-latency-ms`` and a real
boto3 client. The latency is on the caller's clock, not in the function's Duration or bill."""

from __future__ import annotations

import base64
import math
import random
import re
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator

import httpx
import pytest
from rt_helpers import ROLE, lambda_client, make_zip

from orchestrator.config import ConfigError, load_config
from runtime import LocalRuntime
from runtime.latency import InvalidLatency, InvokeLatency

LATENCY_MS = 400.0


@pytest.mark.parametrize("median, sigma", [(-1.0, 0.0), (10.0, -0.5), (math.nan, 0.0), (math.inf, 0.0)])
def test_bad_latency_is_a_clear_error(median: float, sigma: float) -> None:
    with pytest.raises(InvalidLatency, match="finite number >= 0"):
        InvokeLatency(median, sigma)


def test_latency_distribution() -> None:
    assert InvokeLatency().sample_s() == 0.0 and not InvokeLatency().enabled
    assert InvokeLatency(50.0).sample_s() == pytest.approx(0.05)  # sigma 0: fixed
    lat = InvokeLatency(50.0, 1.0, rng=random.Random(7))
    xs = sorted(lat.sample_s() for _ in range(20_000))
    # Log-normal: the median is the median, one sigma up is e times it.
    assert statistics.median(xs) == pytest.approx(0.05, rel=0.05)
    assert xs[int(0.8413 * len(xs))] == pytest.approx(0.05 * math.e, rel=0.08)


def test_cli_rejects_a_negative_latency() -> None:
    proc = subprocess.run([sys.executable, "-m", "runtime", "serve", "--invoke-latency-ms", "-5"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0
    assert "error: invoke latency median_ms must be a finite number >= 0" in proc.stderr


def test_config_needs_the_local_runtime_for_latency() -> None:
    with pytest.raises(ConfigError, match="needs --backend local"):
        load_config(overrides={"minutes": 1, "backend": "inline",
                               "experimental": {"runtime_invoke_latency_ms": 50}})
    with pytest.raises(ConfigError, match="runtime_invoke_latency_ms"):
        load_config(overrides={"minutes": 1, "backend": "local",
                               "experimental": {"runtime_invoke_latency_ms": -1}})
    cfg = load_config(overrides={"minutes": 1, "backend": "local",
                                 "experimental": {"runtime_invoke_latency_ms": 50,
                                                  "runtime_invoke_latency_sigma": 0.5}})
    assert (cfg.experimental.runtime_invoke_latency_ms,
            cfg.experimental.runtime_invoke_latency_sigma) == (50, 0.5)


@pytest.fixture(scope="module")
def slow_platform(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalRuntime]:
    rt = LocalRuntime(zygote=False, account_concurrency=4, invoke_latency_ms=LATENCY_MS,
                      log_file=tmp_path_factory.mktemp("latency") / "server.log")
    rt.start(timeout=120)
    yield rt
    rt.stop()


def test_each_invoke_waits_the_latency_unbilled(slow_platform: LocalRuntime) -> None:
    health = httpx.get(f"{slow_platform.endpoint}/stellaris/v1/health").json()
    assert health["invoke_latency"] == {"median_ms": LATENCY_MS, "sigma": 0.0}
    client = lambda_client(slow_platform.endpoint)
    name = f"lat-{uuid.uuid4().hex[:8]}"
    client.create_function(FunctionName=name, Runtime="python3.11", Role=ROLE, Handler="app.handler",
                           Code={"ZipFile": make_zip({"app.py": "def handler(e, c):\n    return e\n"})})
    client.invoke(FunctionName=name, Payload=b'{"warm": 1}')  # cold start out of the way
    billing = f"{slow_platform.endpoint}/stellaris/v1/billing"
    before = httpx.get(billing).json()["functions"][name]
    walls, durations = [], []
    for i in range(3):
        t0 = time.perf_counter()
        resp = client.invoke(FunctionName=name, Payload=b'{"i": %d}' % i, LogType="Tail")
        walls.append(time.perf_counter() - t0)
        assert resp["StatusCode"] == 200 and resp["Payload"].read() == b'{"i": %d}' % i
        report = base64.b64decode(resp["LogResult"]).decode().splitlines()[-1]
        durations.append(float(re.search(r"\tDuration: ([\d.]+) ms", report).group(1)))
    assert min(walls) >= LATENCY_MS / 1000
    # The function ran for milliseconds: the latency is the platform's, not billed.
    assert max(durations) < LATENCY_MS / 4
    after = httpx.get(billing).json()["functions"][name]
    assert after["invocations"] - before["invocations"] == 3
    assert after["billed_ms"] - before["billed_ms"] < 3 * LATENCY_MS / 4
    # Event invocations are accepted at once: their latency is on nobody's critical path.
    t0 = time.perf_counter()
    assert client.invoke(FunctionName=name, InvocationType="Event", Payload=b"{}")["StatusCode"] == 202
    assert time.perf_counter() - t0 < LATENCY_MS / 1000
    client.delete_function(FunctionName=name)


def test_the_runtime_reads_its_latency_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    # docker-compose sets the runtime container's latency through these variables.
    from runtime.cli import _parser

    monkeypatch.setenv("STELLARIS_RUNTIME_LATENCY_MS", "75")
    monkeypatch.setenv("STELLARIS_RUNTIME_LATENCY_SIGMA", "0.5")
    args = _parser().parse_args(["serve"])
    assert (args.invoke_latency_ms, args.invoke_latency_sigma) == (75.0, 0.5)
    assert _parser().parse_args(["serve", "--invoke-latency-ms", "5"]).invoke_latency_ms == 5.0
    monkeypatch.setenv("STELLARIS_RUNTIME_LATENCY_MS", "fast")
    with pytest.raises(SystemExit, match=r"STELLARIS_RUNTIME_LATENCY_MS must be a number"):
        _parser()
