"""Throttling (429 for RequestResponse, never more than the limit at once) and the Event queue."""

from __future__ import annotations

import json
import os
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
from botocore.exceptions import ClientError

TRACKED = {"app.py": (
    "import json, os, time, uuid\n"
    "def handler(event, context):\n"
    "    out = os.environ['OUT_DIR']\n"
    "    t0 = time.time()\n"
    "    time.sleep(event.get('sleep', 0.5))\n"
    "    if event.get('fail'):\n"
    "        open(os.path.join(out, 'attempt-' + uuid.uuid4().hex), 'w').close()\n"
    "        raise RuntimeError('always fails')\n"
    "    path = os.path.join(out, f\"{event.get('i', 0)}-{uuid.uuid4().hex}.json\")\n"
    "    with open(path + '.tmp', 'w') as f:\n"  # renamed once whole: a reader never sees it half
    "        json.dump({'start': t0, 'end': time.time(), 'i': event.get('i')}, f)\n"
    "    os.replace(path + '.tmp', path)\n"
    "    return event.get('i')\n")}


def _max_overlap(out_dir) -> int:
    spans = [json.loads(p.read_text()) for p in Path(out_dir).glob("*.json")]
    edges = sorted([(s["start"], 1) for s in spans] + [(s["end"], -1) for s in spans])
    cur = best = 0
    for _, d in edges:
        cur += d
        best = max(best, cur)
    return best


def test_sync_throttled_beyond_reserved(client, deploy, tmp_path) -> None:
    name = deploy(TRACKED, Timeout=5, Environment={"Variables": {"OUT_DIR": str(tmp_path)}})
    client.put_function_concurrency(FunctionName=name, ReservedConcurrentExecutions=2)

    def call(i: int) -> str:
        try:
            client.invoke(FunctionName=name, Payload=json.dumps({"i": i, "sleep": 0.6}))
            return "ok"
        except ClientError as exc:
            err = exc.response
            assert err["ResponseMetadata"]["HTTPStatusCode"] == 429
            assert err["Error"]["Code"] == "TooManyRequestsException"
            assert err["Reason"] == "ReservedFunctionConcurrentInvocationLimitExceeded"
            return "throttled"

    with ThreadPoolExecutor(6) as pool:
        outcomes = list(pool.map(call, range(6)))
    assert outcomes.count("ok") >= 2 and outcomes.count("throttled") >= 1
    assert _max_overlap(tmp_path) <= 2
    assert len([f for f in os.listdir(tmp_path) if f.endswith(".json")]) == outcomes.count("ok")


def test_zero_reserved_throttles_everything(client, deploy) -> None:
    name = deploy({"app.py": "def handler(e, c):\n    return 1\n"})
    client.put_function_concurrency(FunctionName=name, ReservedConcurrentExecutions=0)
    try:
        client.invoke(FunctionName=name)
        raise AssertionError("expected a throttle")
    except ClientError as exc:
        assert exc.response["Error"]["Code"] == "TooManyRequestsException"


def test_events_beyond_limit_all_run(client, deploy, server, tmp_path) -> None:
    name = deploy(TRACKED, Timeout=5, Environment={"Variables": {"OUT_DIR": str(tmp_path)}})
    client.put_function_concurrency(FunctionName=name, ReservedConcurrentExecutions=2)
    for i in range(10):
        r = client.invoke(FunctionName=name, InvocationType="Event", Payload=json.dumps({"i": i, "sleep": 0.2}))
        assert r["StatusCode"] == 202
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        done = [f for f in os.listdir(tmp_path) if f.endswith(".json")]
        if len(done) >= 10:
            break
        time.sleep(0.2)
    assert sorted(int(f.split("-")[0]) for f in done) == list(range(10))  # none lost, none twice
    assert _max_overlap(tmp_path) <= 2
    doc = httpx.get(f"{server.endpoint}/stellaris/v1/functions/{name}/event-failures").json()
    assert doc["Failures"] == [] and doc["Stats"]["succeeded"] == 10 and doc["Pending"] == 0


def test_failing_event_retried_twice_then_recorded(client, deploy, server, tmp_path) -> None:
    name = deploy(TRACKED, Timeout=5, Environment={"Variables": {"OUT_DIR": str(tmp_path)}})
    rid = client.invoke(FunctionName=name, InvocationType="Event",
                        Payload=json.dumps({"fail": True, "sleep": 0}))["ResponseMetadata"]["RequestId"]
    url = f"{server.endpoint}/stellaris/v1/functions/{name}/event-failures"
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and not httpx.get(url).json()["Failures"]:
        time.sleep(0.2)
    failure, = httpx.get(url).json()["Failures"]
    assert failure["requestId"] == rid and failure["condition"] == "RetriesExhausted"
    assert failure["approximateInvokeCount"] == 3
    assert json.loads(failure["error"]["body"])["errorType"] == "RuntimeError"
    assert len([f for f in os.listdir(tmp_path) if f.startswith("attempt-")]) == 3


def test_event_retries_follow_event_invoke_config(client, deploy, server, tmp_path) -> None:
    name = deploy(TRACKED, Timeout=5, Environment={"Variables": {"OUT_DIR": str(tmp_path)}})
    client.put_function_event_invoke_config(FunctionName=name, MaximumRetryAttempts=0)
    client.invoke(FunctionName=name, InvocationType="Event", Payload=json.dumps({"fail": True, "sleep": 0}))
    url = f"{server.endpoint}/stellaris/v1/functions/{name}/event-failures"
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and not httpx.get(url).json()["Failures"]:
        time.sleep(0.1)
    assert httpx.get(url).json()["Failures"][0]["approximateInvokeCount"] == 1
