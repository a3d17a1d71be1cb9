"""The preflight: one actor invocation that only checks the run's store, from where functions
run, before a run spends anything on them (orchestrator/preflight.py sends it).

Event: ``{"preflight": PreflightEvent}``. Answers ``{"preflight": report}`` with
:func:`store.probe.probe`'s report plus where it ran; a store problem is the answer, not an
error, so the orchestrator can say what failed and how to fix it.
"""

from __future__ import annotations

import os
import socket
from typing import Any, Literal

from pydantic import Field

from functions.events import _Event, parse_event
from store.probe import probe


class PreflightEvent(_Event):
    schema_: Literal["stellaris.preflight/1"] = Field("stellaris.preflight/1", alias="schema")
    timeout_s: float = Field(
        3.0, gt=0, le=30, description="Connect and read timeout of the probe, seconds.")


def where() -> str:
    """Where this function runs, for the orchestrator's message."""
    name = os.environ.get("AWS_LAMBDA_FUNCTION_NAME")
    region = os.environ.get("AWS_REGION")
    if name:
        return f"function {name}" + (f" ({region})" if region else "")
    return f"host {socket.gethostname()}"


def handler(event: Any, context: Any = None) -> dict[str, Any]:
    ev = parse_event(PreflightEvent, event, context)
    url = ev.redis_url or os.environ.get("REDIS_URL")
    if not url:
        report: dict[str, Any] = {
            "ok": False, "url": None, "stage": "url", "kind": "url", "server": None,
            "error": "no Redis URL: the event names none and REDIS_URL is unset"}
    else:
        report = probe(url, ev.run_id, ev.timeout_s)
    report["where"] = where()
    return {"preflight": report}
