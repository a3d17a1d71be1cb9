"""`stellaris up` (the compose topology as processes) and `stellaris redis serve|ping`."""

from __future__ import annotations

import re
import signal
import socket

import boto3
import httpx
import pytest
from procs import process_env, read_until, start, stellaris_argv, stop


def refused(host: str, port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(1)
        return s.connect_ex((host, port)) != 0


@pytest.mark.timeout(120)
def test_up_serves_until_ctrl_c(tmp_path) -> None:
    proc = start(stellaris_argv(["stellaris", "up", "--redis-port", "0", "--runtime-port", "0",
                                 "--no-zygote", "--log-file", str(tmp_path / "runtime.log"),
                                 "--invoke-latency-ms", "20"]),
                 process_env(), cwd=tmp_path)
    try:
        out = read_until(proc, "ready (Ctrl-C to stop)", timeout=90)
        endpoint = re.search(r"^runtime\s+(http://127\.0\.0\.1:\d+)", out, re.M).group(1)
        redis_url = re.search(r"^redis\s+(redis://127\.0\.0\.1:(\d+)/0)", out, re.M)
        assert redis_url and "stellaris train --backend lambda" in out
        health = httpx.get(f"{endpoint}/stellaris/v1/health", timeout=5)
        assert health.status_code == 200
        assert health.json()["invoke_latency"] == {"median_ms": 20.0, "sigma": 0.0}
        client = boto3.client("lambda", endpoint_url=endpoint, region_name="us-east-1",
                              aws_access_key_id="local", aws_secret_access_key="local")
        fns = {f["FunctionName"]: f for f in client.list_functions()["Functions"]}
        assert set(fns) == {"stellaris-actor", "stellaris-learner", "stellaris-evaluator"}
        assert fns["stellaris-actor"]["Environment"]["Variables"]["REDIS_URL"] == redis_url.group(1)
        ping = start(stellaris_argv(["stellaris", "redis", "ping", "--url", redis_url.group(1)]),
                     process_env())
        assert ping.wait(30) == 0
        ping.stdout.close()
    finally:
        rc = stop(proc, signal.SIGINT)
    assert rc == 0
    rport = int(redis_url.group(2))
    rtport = int(endpoint.rsplit(":", 1)[1])
    assert refused("127.0.0.1", rport) and refused("127.0.0.1", rtport)


def test_redis_serve_and_ping(tmp_path) -> None:
    from runtime.launcher import free_port

    port = free_port()
    proc = start(stellaris_argv(["stellaris", "redis", "serve", "--port", str(port)]), process_env())
    try:
        read_until(proc, "redis ready", timeout=30)
        assert not refused("127.0.0.1", port)
    finally:
        assert stop(proc) == 0
    assert refused("127.0.0.1", port)
    r = start(stellaris_argv(["stellaris", "redis", "ping", "--url", f"redis://127.0.0.1:{port}/0",
                              "--timeout", "0.5"]), process_env())
    assert r.wait(30) == 1
    assert "does not answer" in r.stdout.read()
    r.stdout.close()
