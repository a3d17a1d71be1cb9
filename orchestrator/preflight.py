"""The store preflight: before a run spends anything on functions, check they reach its Redis.

Two steps. :func:`check_static` catches the obvious case without invoking anything: functions
that run elsewhere (AWS Lambda, a remote Lambda endpoint, a remote Ray cluster) handed a
store on the orchestrator's loopback — the embedded Redis, say. :func:`check_functions`
invokes the actor function once with a preflight event (functions/preflight.py): it connects
to the run's store from where the functions run, PINGs, writes and reads a scratch key in the
run's hash slot, and reports. A failure is :class:`StoreUnreachableFromFunctions`, one line
naming the URL, where from, what failed and the fix — not minutes of billed retries.
"""

from __future__ import annotations

import ipaddress
import os
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any
from urllib.parse import urlsplit

from orchestrator.config import TrainConfig
from orchestrator.invokers.base import InvocationResult, Invoker
from orchestrator.run import PreflightError
from store import InvalidStoreUrl, parse_store_url, redact

PROBE_TIMEOUT_S = 3.0  # the function's connect and read timeout
# The invocation's own bound: a cold start of a container image with torch takes its time.
INVOKE_BOUND_S = 90.0

FIXES = {
    "loopback": "pass --redis-url rediss://<elasticache endpoint> (or --function-redis-url): "
                "a Redis on the orchestrator's loopback (the embedded one) is not reachable "
                "from there",
    "dns": "the host name does not resolve there: use the endpoint name the functions' "
           "network resolves (ElastiCache: the primary or configuration endpoint)",
    "refused": "nothing listens on that host and port there: check the port, and that the "
               "URL names the Redis host as the functions see it (--function-redis-url)",
    "timeout": "no answer: put the functions in the Redis's VPC and subnets and let its "
               "security group accept the port from them",
    "tls": "the TLS handshake failed: rediss:// for a server with encryption in transit, "
           "redis:// for one without; a private CA goes in ?ssl_ca_certs=<file>",
    "auth": "authentication failed: put the AUTH token in the URL "
            "(rediss://:<token>@host:6379 or rediss://<user>:<password>@host:6379)",
    "cluster": "the server is a Redis Cluster node: use redis+cluster:// or rediss+cluster://",
    "protocol": "something other than Redis answered: check the host and port, and rediss:// "
                "against redis://",
    "url": "fix the URL (docs/clusters.md#redis-the-functions-can-reach)",
    "error": "see docs/clusters.md#redis-the-functions-can-reach",
}


class StoreUnreachableFromFunctions(PreflightError):
    """The functions cannot use the run's store: the message names the URL, where from, what
    failed and the fix."""

    def __init__(self, url: str, where: str, kind: str, detail: str) -> None:
        self.url, self.where, self.kind, self.detail = url, where, kind, detail
        fix = FIXES.get(kind, FIXES["error"])
        super().__init__(f"store {url} unreachable from {where} ({kind}: {detail}); fix: {fix}; "
                         "skip this check with --no-preflight")


def _loopback_host(host: str | None) -> bool:
    if not host or host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def functions_elsewhere(cfg: TrainConfig) -> str | None:
    """Where the functions run when it is not this machine (its loopback is not ours)."""
    if cfg.backend == "lambda":
        if cfg.endpoint_url is None:
            return f"AWS Lambda ({cfg.region})"
        if not _loopback_host(urlsplit(cfg.endpoint_url).hostname):
            return f"the Lambda endpoint {cfg.endpoint_url}"
    address = cfg.ray_address or os.environ.get("RAY_ADDRESS")  # as the Ray invoker reads it
    if cfg.backend == "ray" and address not in (None, "", "auto", "local"):
        address = str(address)
        host = urlsplit(address if "://" in address else f"ray://{address}").hostname
        if not _loopback_host(host):
            return f"the Ray cluster at {address}"
    return None


def check_static(cfg: TrainConfig, function_url: str) -> None:
    """Fail before invoking anything when the functions' store URL cannot work from where
    they run (no-op with ``preflight`` off)."""
    if not cfg.preflight:
        return
    shown = redact(function_url)
    try:
        parsed = parse_store_url(function_url)
    except InvalidStoreUrl as exc:
        raise StoreUnreachableFromFunctions(shown, "the functions", "url", str(exc)) from None
    elsewhere = functions_elsewhere(cfg)
    if elsewhere is not None and parsed.loopback:
        raise StoreUnreachableFromFunctions(
            shown, elsewhere, "loopback",
            f"{parsed.host or 'a local socket'} is the orchestrator's own machine")


def check_functions(cfg: TrainConfig, invoker: Invoker, run_id: str, function_url: str,
                    attempts: list[InvocationResult] | None = None) -> dict[str, Any] | None:
    """Invoke the actor function once with the preflight event; its report when the store
    works from there, else :class:`StoreUnreachableFromFunctions`. ``None``: not run (off, or
    the inline backend, whose handlers share the orchestrator's process and store). Each
    invocation's result is appended to ``attempts``: they are billed, and their failures are
    the run's, so the run books them (``Trainer.book_preflight``)."""
    if not cfg.preflight or cfg.backend == "inline":
        return None
    event = {"preflight": {"schema": "stellaris.preflight/1", "run_id": run_id,
                           "redis_url": function_url, "timeout_s": PROBE_TIMEOUT_S}}
    bound = min(INVOKE_BOUND_S, cfg.function_timeout_s + 10.0)
    # A crashed invocation is resubmitted as the run's own would be (max_retries): one dead
    # sandbox says nothing about the deployment. A bad event or a timeout is not retried.
    for attempt in range(cfg.max_retries + 1):
        future = invoker.submit("actor", event)
        try:
            result = future.result(timeout=bound)
        except FutureTimeout:
            raise PreflightError(
                f"preflight: the actor function on the {cfg.backend} backend did not answer "
                f"within {bound:.0f}s (is it deployed, and can it start?); skip with "
                "--no-preflight") from None
        if attempts is not None:
            attempts.append(result)
        if result.ok or result.error_type == "InvalidEvent" or attempt == cfg.max_retries:
            break
    if not result.ok:
        hint = ("the deployed actor function predates the preflight: redeploy it"
                if result.error_type == "InvalidEvent" else "check the deployment")
        raise PreflightError(f"preflight: invoking the actor function on the {cfg.backend} "
                             f"backend failed {attempt + 1} time(s) ({result.error}); {hint}, "
                             "or skip with --no-preflight")
    report = (result.payload or {}).get("preflight")
    if not isinstance(report, dict):
        raise PreflightError("preflight: the actor function answered without a report: "
                             "redeploy it, or skip with --no-preflight")
    if not report.get("ok"):
        raise StoreUnreachableFromFunctions(
            str(report.get("url") or redact(function_url)), str(report.get("where", "?")),
            str(report.get("kind") or "error"),
            f"{report.get('stage')}: {report.get('error')}")
    return report
