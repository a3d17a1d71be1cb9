"""Resource limits.

* An environment that exceeds its MemorySize is killed and reported as
  ``Runtime.OutOfMemory`` — also when the memory is held by a child process the handler
  started, and for ``Event`` invocations (retried, then recorded as failed). The killed
  processes are gone and the function keeps working (tests/runtime covers the plain sync
  case).
* The runtime's own memory stays bounded over a long run: N_LONG mixed invocations
  (successes, function errors, Events, 404s, 400s) with the server's RSS sampled; the mean of
  the last quarter of samples must be within RSS_SLACK_MB of the second quarter's, and the
  least-squares slope over the second half must stay under SLOPE_LIMIT_KB per 1,000 calls.
"""

from __future__ import annotations

import json
import statistics
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import psutil
from rel_helpers import wait_events_settled, write_result
from rt_helpers import process_gone

N_LONG = 10_000
SAMPLE_EVERY = 250
RSS_SLACK_MB = 4.0
SLOPE_LIMIT_KB = 300.0  # per 1,000 invocations (a 1 KB-per-call leak is 1,000 KB)

HOG = {"app.py": (
    "import os, subprocess, sys, time\n"
    "def handler(event, context):\n"
    "    out = os.environ['OUT_DIR']\n"
    "    mb = event['mb']\n"
    "    if event.get('child'):\n"
    "        code = f\"x = b'\\\\x01' * ({mb} << 20); import time; time.sleep(60)\"\n"
    "        p = subprocess.Popen([sys.executable, '-c', code])\n"
    "        open(os.path.join(out, f'child-{p.pid}'), 'w').close()\n"
    "        time.sleep(20)\n"
    "        return 'child survived'\n"
    "    open(os.path.join(out, f'worker-{os.getpid()}'), 'w').close()\n"
    "    x = b'\\x01' * (mb << 20)\n"
    "    time.sleep(2)\n"
    "    return len(x)\n")}


def _pids(out: Path, prefix: str) -> list[int]:
    return [int(p.name.split("-")[1]) for p in out.glob(f"{prefix}-*")]


def test_memory_limit_kills_child_processes_and_event_invocations(rel_server, rel_client, rel_deploy,
                                                                   tmp_path) -> None:
    name = rel_deploy(HOG, MemorySize=128, Timeout=25,
                      Environment={"Variables": {"OUT_DIR": str(tmp_path)}})
    # memory held by a child process counts against the environment
    t0 = time.monotonic()
    resp = rel_client.invoke(FunctionName=name, Payload=json.dumps({"mb": 300, "child": True}))
    doc = json.loads(resp["Payload"].read())
    assert resp.get("FunctionError") == "Unhandled" and doc["errorType"] == "Runtime.OutOfMemory", doc
    assert time.monotonic() - t0 < 15, "killed long before the handler's 20 s sleep ends"
    assert all(process_gone(pid, timeout=5.0) for pid in _pids(tmp_path, "child")) and _pids(tmp_path, "child")
    # an Event that runs out of memory is retried, then recorded as failed with the reason
    r = rel_client.invoke(FunctionName=name, InvocationType="Event", Payload=json.dumps({"mb": 300}))
    assert r["StatusCode"] == 202
    failures = wait_events_settled(rel_server.endpoint, name, timeout=60)["Failures"]
    assert len(failures) == 1 and failures[0]["approximateInvokeCount"] == 3
    assert failures[0]["error"]["errorType"] == "Runtime.OutOfMemory"
    workers = _pids(tmp_path, "worker")
    assert len(workers) == 3 and all(process_gone(pid, timeout=5.0) for pid in workers)
    # within the limit it still works, and the meter counted every failure
    resp = rel_client.invoke(FunctionName=name, Payload=json.dumps({"mb": 16}))
    assert "FunctionError" not in resp and json.loads(resp["Payload"].read()) == 16 << 20
    meter = rel_server.billing()["functions"][name]
    assert (meter["invocations"], meter["errors"]) == (5, 4)


NOOP = {"app.py": (
    "def handler(event, context):\n"
    "    if event.get('fail'):\n"
    "        raise ValueError('nope')\n"
    "    return event.get('i')\n")}


def test_runtime_memory_bounded_over_a_long_run(rel_server, rel_deploy) -> None:
    name = rel_deploy(NOOP, Timeout=5)
    base = f"{rel_server.endpoint}/2015-03-31/functions"
    server = psutil.Process(rel_server.proc.pid)
    samples: list[tuple[int, float]] = []

    def one(c: httpx.Client, i: int) -> None:
        kind = i % 10
        if kind == 9:  # Event
            r = c.post(f"{base}/{name}/invocations", content=json.dumps({"i": i}),
                       headers={"X-Amz-Invocation-Type": "Event"})
            assert r.status_code == 202
        elif kind == 8:  # function error (with a log tail)
            r = c.post(f"{base}/{name}/invocations", content=json.dumps({"fail": True}),
                       headers={"X-Amz-Log-Type": "Tail"})
            assert r.headers.get("x-amz-function-error") == "Unhandled"
        elif kind == 7:  # unknown function, a fresh name each time
            assert c.post(f"{base}/missing-{i}/invocations", content=b"{}").status_code == 404
        elif kind == 6:  # not JSON
            assert c.post(f"{base}/{name}/invocations", content=b"{nope").status_code == 400
        else:
            r = c.post(f"{base}/{name}/invocations", content=json.dumps({"i": i}))
            assert r.status_code == 200 and r.json() == i

    def worker(k: int) -> None:
        with httpx.Client(timeout=15.0) as c:
            for i in range(k, N_LONG, 4):
                one(c, i)
                if i % SAMPLE_EVERY == 0:
                    samples.append((i, server.memory_info().rss / 2**20))

    t0 = time.monotonic()
    with ThreadPoolExecutor(4) as pool:
        list(pool.map(worker, range(4)))
    wall = time.monotonic() - t0
    wait_events_settled(rel_server.endpoint, name, timeout=60)
    samples.append((N_LONG, server.memory_info().rss / 2**20))
    samples.sort()
    rss = [m for _, m in samples]
    q = len(rss) // 4
    second, last = statistics.mean(rss[q:2 * q]), statistics.mean(rss[3 * q:])
    half = samples[len(samples) // 2:]
    slope = statistics.linear_regression([i for i, _ in half], [m for _, m in half]).slope
    slope_kb = slope * 1000 * 1024  # KB per 1,000 invocations
    # bounded bookkeeping: the per-function log ring and the failure list do not grow
    logs = httpx.get(f"{rel_server.endpoint}/stellaris/v1/functions/{name}/logs").json()["Logs"]
    assert len(logs) <= 50
    write_result("runtime_rss", {
        "invocations": N_LONG, "samples": len(rss), "wall_s": round(wall, 1),
        "rss_first_mb": round(rss[0], 1), "rss_second_quarter_mean_mb": round(second, 1),
        "rss_last_quarter_mean_mb": round(last, 1), "rss_max_mb": round(max(rss), 1),
        "slope_kb_per_1000": round(slope_kb, 1)})
    assert last - second < RSS_SLACK_MB, (second, last, rss)
    assert slope_kb < SLOPE_LIMIT_KB, (slope_kb, rss)
