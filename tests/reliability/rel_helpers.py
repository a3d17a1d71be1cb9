"""Helpers for the reliability tests (a module name no other test folder uses)."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import httpx

# The handler that measures itself: a marker file per running attempt (the count of markers
# when it starts is the concurrency it observes), one record per attempt, one per success.
TRACKED_APP = '''
import json, os, time, uuid

def handler(event, context):
    out = os.environ["OUT_DIR"]
    i = event["i"]
    rid = context.aws_request_id
    mark = os.path.join(out, "running", rid + "-" + uuid.uuid4().hex)
    open(mark, "w").close()
    seen = len(os.listdir(os.path.join(out, "running")))
    t0 = time.time()
    ok = False
    try:
        time.sleep(event.get("sleep", 0.005))
        fail = event.get("fail")
        if fail == "always":
            raise RuntimeError(f"event {i} always fails")
        if fail == "once":
            flag = os.path.join(out, f"once-{i}")
            if not os.path.exists(flag):
                open(flag, "w").close()
                raise RuntimeError(f"event {i} fails on its first attempt")
        ok = True
        return {"i": i}
    finally:
        t1 = time.time()
        os.unlink(mark)
        rec = {"i": i, "rid": rid, "start": t0, "end": t1, "seen": seen, "ok": ok}
        with open(os.path.join(out, "attempts", uuid.uuid4().hex), "w") as f:
            json.dump(rec, f)
        if ok:
            with open(os.path.join(out, "done", f"{i}-{uuid.uuid4().hex}"), "w") as f:
                json.dump(rec, f)
'''


def tracked_dirs(root: Path) -> Path:
    for sub in ("running", "attempts", "done"):
        (root / sub).mkdir(parents=True, exist_ok=True)
    return root


def records(root: Path, sub: str) -> list[dict[str, Any]]:
    return [json.loads(p.read_text()) for p in (root / sub).iterdir()]


def max_overlap(spans: list[dict[str, Any]]) -> int:
    """Most attempts whose [start, end] intervals overlap at one instant."""
    edges = sorted([(s["start"], 1) for s in spans] + [(s["end"], -1) for s in spans],
                   key=lambda e: (e[0], e[1]))  # an end before a start at the same instant
    cur = best = 0
    for _, d in edges:
        cur += d
        best = max(best, cur)
    return best


def wait_events_settled(endpoint: str, name: str, timeout: float) -> dict[str, Any]:
    """Poll the runtime's event-failures view (4 times a second) until nothing is pending."""
    deadline = time.monotonic() + timeout
    with httpx.Client(timeout=10.0) as c:
        while True:
            doc = c.get(f"{endpoint}/stellaris/v1/functions/{name}/event-failures").json()
            if doc["Pending"] == 0 and doc["Stats"].get("accepted", 0) > 0:
                return doc
            if time.monotonic() > deadline:
                raise TimeoutError(f"events still pending after {timeout} s: {doc['Stats']}")
            time.sleep(0.25)


def snapshot(root: Path, skip: tuple[str, ...] = ()) -> set[str]:
    """Every path under ``root`` (relative), except those under the ``skip`` prefixes."""
    out: set[str] = set()
    for dirpath, dirnames, filenames in os.walk(root):
        for n in dirnames + filenames:
            rel = os.path.relpath(os.path.join(dirpath, n), root)
            if not rel.startswith(skip):
                out.add(rel)
    return out


def write_result(name: str, doc: dict[str, Any]) -> None:
    """Numbers a test measured, for docs/reliability.md (printed; kept under $RELIABILITY_OUT)."""
    print(f"RELIABILITY {name}: {json.dumps(doc, sort_keys=True)}")
    out = os.environ.get("RELIABILITY_OUT")
    if out:
        Path(out).mkdir(parents=True, exist_ok=True)
        (Path(out) / f"{name}.json").write_text(json.dumps(doc, indent=2, sort_keys=True))
