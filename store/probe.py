"""One cheap look at a run's store from wherever this code runs (a function, the orchestrator).

Connect and PING, then write, read back and delete a scratch key in the run's hash slot in one
transaction: on a cluster that is the node the run will use. One attempt, short timeouts; a
failure is classified (``dns``, ``refused``, ``timeout``, ``tls``, ``auth``, ``cluster``,
``protocol``, ``url``, ``error``) so the caller can say what to fix. Returns plain JSON.
"""

from __future__ import annotations

import socket
import ssl
import time
import uuid
from typing import Any

import redis

from store.connection import Store
from store.errors import ClusterUrlNeeded, InvalidStoreUrl, StoreUnavailable
from store.keys import RunKeys
from store.urls import redact

# Fallbacks by message: a cluster client reports a node's failure as text only.
_MESSAGES = (
    ("Name or service not known", "dns"), ("nodename nor servname", "dns"),
    ("Temporary failure in name resolution", "dns"), ("getaddrinfo", "dns"),
    ("Connection refused", "refused"), ("Timeout", "timeout"), ("timed out", "timeout"),
    ("certificate", "tls"), ("SSL", "tls"), ("TLS", "tls"),
    ("NOAUTH", "auth"), ("WRONGPASS", "auth"), ("invalid password", "auth"),
    ("Authentication", "auth"), ("Protocol error", "protocol"), ("MOVED", "cluster"),
)


def classify(exc: BaseException) -> str:
    """What kind of failure ``exc`` (or anything in its cause chain) is."""
    seen: list[BaseException] = []
    e: BaseException | None = exc
    while e is not None and e not in seen:
        seen.append(e)
        e = e.__cause__ or e.__context__
    for e in seen:
        if isinstance(e, InvalidStoreUrl):
            return "url"
        if isinstance(e, ClusterUrlNeeded):
            return "cluster"
        if isinstance(e, socket.gaierror):
            return "dns"
        if isinstance(e, ConnectionRefusedError):
            return "refused"
        if isinstance(e, (socket.timeout, TimeoutError, redis.TimeoutError)):
            return "timeout"
        if isinstance(e, ssl.SSLError):
            return "tls"
        if isinstance(e, redis.AuthenticationError):
            return "auth"
        if isinstance(e, redis.exceptions.InvalidResponse):
            return "protocol"
    text = " ".join(str(e) for e in seen)
    for needle, kind in _MESSAGES:
        if needle in text:
            return kind
    return "error"


def probe(url: str, run_id: str, timeout_s: float = 3.0) -> dict[str, Any]:
    """Check that ``url`` is a Redis this process can use for run ``run_id``.

    ``{"ok", "url" (redacted), "stage" (url, connect, write: where it stopped), "kind",
    "error", "elapsed_ms", "server"}``: never raises for a store problem.
    """
    t0 = time.monotonic()
    report: dict[str, Any] = {"ok": False, "url": redact(url), "stage": "url", "kind": None,
                              "error": None, "server": None}
    store: Store | None = None
    try:
        store = Store(url, retry_seconds=0, socket_timeout=timeout_s, connect_timeout=timeout_s)
        report["stage"] = "connect"
        store.call(lambda r: r.ping())
        report["stage"] = "write"
        token = uuid.uuid4().hex
        key = RunKeys(run_id).scratch(token)

        def write_read_delete(r: Any) -> list[Any]:
            pipe = r.pipeline(transaction=True)
            pipe.set(key, token, px=60_000)  # gone by itself should the DEL never run
            pipe.get(key)
            pipe.delete(key)
            return pipe.execute()

        _, got, _ = store.call(write_read_delete)
        if got != token.encode():
            raise RuntimeError(f"wrote {token!r} to {key}, read back {got!r}")
        info = store.call(lambda r: r.info("server"))
        report["server"] = {"redis_version": info.get("redis_version"),
                            "cluster": store.cluster}
        report["ok"] = True
    except Exception as exc:  # noqa: BLE001 - the report is the answer, whatever went wrong
        report["kind"] = classify(exc)
        # StoreUnavailable repeats the URL the report already has: keep what it wraps
        shown = exc.__cause__ if isinstance(exc, StoreUnavailable) and exc.__cause__ else exc
        report["error"] = f"{type(shown).__name__}: {shown}"
    finally:
        if store is not None:
            store.close()
    report["elapsed_ms"] = round((time.monotonic() - t0) * 1000.0, 1)
    return report
