"""Invocations under load at reserved concurrency 4.

* 1,000 ``Event`` invokes: never more than 4 run at once (measured inside the handler), every
  event completes exactly once, or is recorded as failed after its 2 retries.
* 1,000 ``RequestResponse`` invokes from 16 client threads: the excess gets 429
  TooManyRequestsException, nothing hangs (every client call has a 15 s timeout), never more
  than 4 at once, every 200 ran exactly once.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import httpx
from rel_helpers import (
    TRACKED_APP,
    max_overlap,
    records,
    tracked_dirs,
    wait_events_settled,
    write_result,
)

N_EVENTS = 1000
N_SYNC = 1000
RESERVED = 4


def _events(i: int) -> dict:
    ev: dict = {"i": i, "sleep": 0.005}
    if i % 100 == 7:
        ev["fail"] = "always"  # 10 events: 3 attempts each, then recorded as failed
    elif i % 100 == 13:
        ev["fail"] = "once"  # 10 events: fail, then succeed on the first retry
    return ev


def test_event_storm_at_reserved_concurrency(rel_server, rel_client, rel_deploy, tmp_path) -> None:
    out = tracked_dirs(tmp_path)
    name = rel_deploy({"app.py": TRACKED_APP}, Timeout=10,
                      Environment={"Variables": {"OUT_DIR": str(out)}})
    rel_client.put_function_concurrency(FunctionName=name, ReservedConcurrentExecutions=RESERVED)
    url = f"{rel_server.endpoint}/2015-03-31/functions/{name}/invocations"

    def submit(chunk: range) -> list[int]:
        with httpx.Client(timeout=15.0) as c:
            return [c.post(url, content=json.dumps(_events(i)),
                           headers={"X-Amz-Invocation-Type": "Event"}).status_code for i in chunk]

    t0 = time.monotonic()
    with ThreadPoolExecutor(4) as pool:
        codes = [s for part in pool.map(submit, [range(k, N_EVENTS, 4) for k in range(4)]) for s in part]
    t_submit = time.monotonic() - t0
    assert codes == [202] * N_EVENTS
    doc = wait_events_settled(rel_server.endpoint, name, timeout=150)
    t_all = time.monotonic() - t0

    attempts = records(out, "attempts")
    done = records(out, "done")
    always = {i for i in range(N_EVENTS) if _events(i).get("fail") == "always"}
    once = {i for i in range(N_EVENTS) if _events(i).get("fail") == "once"}
    # exactly once: one success per event that can succeed, none for the others
    succeeded = Counter(r["i"] for r in done)
    assert set(succeeded) == set(range(N_EVENTS)) - always
    assert max(succeeded.values()) == 1, [i for i, n in succeeded.items() if n > 1]
    # retries: 1 + 2 attempts for the hopeless events, 2 for the flaky ones, 1 for the rest
    tries = Counter(r["i"] for r in attempts)
    assert {i: tries[i] for i in always} == dict.fromkeys(always, 3)
    assert {i: tries[i] for i in once} == dict.fromkeys(once, 2)
    assert len(attempts) == N_EVENTS + 2 * len(always) + len(once)
    # ... and the hopeless ones are recorded as failed, each once, after 3 attempts
    failures = doc["Failures"]
    assert sorted(json.loads(f["requestPayload"])["i"] for f in failures) == sorted(always)
    assert {(f["condition"], f["approximateInvokeCount"]) for f in failures} == {("RetriesExhausted", 3)}
    assert all("always fails" in f["error"]["body"] for f in failures)
    stats = doc["Stats"]
    assert (stats["accepted"], stats["succeeded"], stats["failed"]) == (N_EVENTS, N_EVENTS - 10, 10)
    assert stats["retries"] == 2 * len(always) + len(once)
    # concurrency, measured from inside the handler, two ways
    overlap = max_overlap(attempts)
    seen = max(r["seen"] for r in attempts)
    assert overlap <= RESERVED and seen <= RESERVED
    assert overlap >= 3, "the queue never filled the reserved slots: the test proves nothing"
    write_result("event_storm", {
        "events": N_EVENTS, "reserved": RESERVED, "attempts": len(attempts),
        "succeeded_once": len(succeeded), "failed_after_retries": len(failures),
        "retries": stats["retries"], "max_overlap_spans": overlap, "max_seen_markers": seen,
        "submit_s": round(t_submit, 2), "settle_s": round(t_all, 2)})


def test_request_response_burst_throttles_excess(rel_server, rel_client, rel_deploy, tmp_path) -> None:
    out = tracked_dirs(tmp_path)
    name = rel_deploy({"app.py": TRACKED_APP}, Timeout=10,
                      Environment={"Variables": {"OUT_DIR": str(out)}})
    rel_client.put_function_concurrency(FunctionName=name, ReservedConcurrentExecutions=RESERVED)
    url = f"{rel_server.endpoint}/2015-03-31/functions/{name}/invocations"
    before = rel_server.billing()["functions"].get(name, {}).get("throttles", 0)

    def call(chunk: range) -> list[tuple[int, int, str, float]]:
        rows = []
        with httpx.Client(timeout=httpx.Timeout(15.0)) as c:  # a hang fails the test
            for i in chunk:
                t = time.monotonic()
                r = c.post(url, content=json.dumps({"i": i, "sleep": 0.02}))
                kind = r.headers.get("x-amzn-errortype", "")
                if r.status_code == 200:
                    assert r.json() == {"i": i} and "x-amz-function-error" not in r.headers
                elif r.status_code == 429:
                    doc = r.json()
                    assert kind == "TooManyRequestsException"
                    assert doc["Reason"] == "ReservedFunctionConcurrentInvocationLimitExceeded"
                rows.append((i, r.status_code, kind, time.monotonic() - t))
        return rows

    t0 = time.monotonic()
    with ThreadPoolExecutor(16) as pool:
        rows = [row for part in pool.map(call, [range(k, N_SYNC, 16) for k in range(16)]) for row in part]
    wall = time.monotonic() - t0
    status = Counter(s for _, s, _, _ in rows)
    assert set(status) <= {200, 429}, status
    assert len(rows) == N_SYNC and status[429] > 0 and status[200] > 0
    done = records(out, "done")
    assert sorted(r["i"] for r in done) == sorted(i for i, s, _, _ in rows if s == 200)
    overlap = max_overlap(records(out, "attempts"))
    seen = max(r["seen"] for r in done)
    assert overlap <= RESERVED and seen <= RESERVED
    throttles = rel_server.billing()["functions"][name]["throttles"] - before
    assert throttles == status[429]
    slowest = max(t for *_, t in rows)
    write_result("request_response_burst", {
        "requests": N_SYNC, "client_threads": 16, "reserved": RESERVED, "ok": status[200],
        "throttled_429": status[429], "max_overlap_spans": overlap, "max_seen_markers": seen,
        "slowest_call_s": round(slowest, 3), "wall_s": round(wall, 2)})
