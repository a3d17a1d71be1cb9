"""One invocation attempt on an execution environment: cold or warm start, errors shaped as
Lambda shapes them, the START/END/REPORT log lines (the last few kept per function), and
metering."""

from __future__ import annotations

import json
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from runtime.billing import Billing
from runtime.environment import (
    InitFailed,
    InitTimedOut,
    InvocationTimedOut,
    OutOfMemory,
    WorkerExited,
)
from runtime.functions import FunctionConfig, FunctionEntry, Registry
from runtime.pool import EnvironmentPool

MAX_SYNC_RESPONSE = 6 * 1024 * 1024 + 100  # RIE's MaxPayloadSize; AWS reports the same number
LOG_TAIL_BYTES = 4096
CPU_WAIT_HEADER = "X-Stellaris-Cpu-Wait-Ms"  # the emulator's one extra response header
INIT_TIMEOUT_FLOOR = 10.0  # Lambda's INIT limit; a longer function timeout extends it
RECENT_LOGS_KEPT = 50  # per function, for GET /stellaris/v1/functions/{name}/logs


@dataclass
class Outcome:
    body: bytes
    function_error: bool
    error_type: str | None = None
    logs: str = ""
    duration_ms: float = 0.0
    billed_ms: int = 0
    init_ms: float | None = None
    timed_out: bool = False
    # Of duration_ms, the time the handler waited for a CPU of the shared host (None: unknown).
    cpu_wait_ms: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)


def _doc(error_type: str, message: str) -> dict[str, Any]:
    return {"errorType": error_type, "errorMessage": message}


def _timed_out(request_id: str, seconds: float) -> dict[str, Any]:
    return _doc("Sandbox.Timedout",
                f"RequestId: {request_id} Error: Task timed out after {seconds:.2f} seconds")


def _out_of_memory(request_id: str) -> dict[str, Any]:
    return _doc("Runtime.OutOfMemory",
                f"RequestId: {request_id} Error: Runtime exited with error: signal: killed")


def _exited(request_id: str) -> dict[str, Any]:
    return _doc("Runtime.ExitError",
                f"RequestId: {request_id} Error: Runtime exited without providing a reason")


class Invoker:
    """Runs invocation attempts (synchronous ones and queued events alike) and keeps the
    last few log texts of each function."""

    def __init__(self, pool: EnvironmentPool, registry: Registry, billing: Billing) -> None:
        self.pool = pool
        self.registry = registry
        self.billing = billing
        self.recent_logs: dict[str, deque[str]] = {}

    def _current_config(self, name: str) -> FunctionConfig | None:
        entry = self.registry.entries.get(name)
        return entry.config if entry else None

    async def run_once(self, entry: FunctionEntry, payload: str, request_id: str,
                       client_context: Any = None) -> Outcome:
        """Run one attempt; the caller holds a concurrency slot for it."""
        config = entry.config
        pool = self.pool
        env = pool.take_warm(config)
        init_ms: float | None = None
        logs: list[str] = []
        error: dict[str, Any] | None = None
        body = b""
        duration_ms = 0.0
        cpu_wait_ms: float | None = None
        timed_out = False
        if env is None:
            t_init = time.perf_counter()
            try:
                env = await pool.start_env(config,
                                           max(INIT_TIMEOUT_FLOOR, float(config.timeout)))
                init_ms = env.init_ms
                logs.append(env.init_logs)
            except InitFailed as exc:
                init_ms = (time.perf_counter() - t_init) * 1000.0
                logs.append(exc.logs)
                error = exc.doc
                logs.append(f"[ERROR] {error['errorType']}: {error['errorMessage']}\n")
            except InitTimedOut:
                init_ms = (time.perf_counter() - t_init) * 1000.0
                error = _timed_out(request_id, max(INIT_TIMEOUT_FLOOR, float(config.timeout)))
                timed_out = True
            except OutOfMemory:
                init_ms = (time.perf_counter() - t_init) * 1000.0
                error = _out_of_memory(request_id)
            except WorkerExited:
                init_ms = (time.perf_counter() - t_init) * 1000.0
                error = _exited(request_id)
        if env is not None and error is None:
            frame = {
                "type": "invoke", "request_id": request_id, "payload": payload,
                "deadline_ms": int(time.time() * 1000) + config.timeout * 1000,
                "invoked_arn": config.arn, "client_context": client_context,
            }
            t0 = time.perf_counter()
            try:
                reply = await env.invoke(frame, float(config.timeout))
                duration_ms = float(reply.get("duration_ms",
                                              (time.perf_counter() - t0) * 1000.0))
                if reply.get("cpu_wait_ms") is not None:
                    cpu_wait_ms = min(duration_ms, max(0.0, float(reply["cpu_wait_ms"])))
                logs.append(reply.get("logs", ""))
                if reply.get("ok"):
                    body = reply["body"].encode()
                    if len(body) > MAX_SYNC_RESPONSE:
                        body = b""
                        error = _doc("Function.ResponseSizeTooLarge",
                                     "Response payload size exceeded maximum allowed payload size "
                                     f"({MAX_SYNC_RESPONSE} bytes).")
                else:
                    error = reply["error"]
            except InvocationTimedOut:
                duration_ms = config.timeout * 1000.0
                timed_out = True
                error = _timed_out(request_id, config.timeout)
                stamp = (time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime())
                         + f".{int(time.time() % 1 * 1000):03d}Z")
                logs.append(
                    f"{stamp} {request_id} Task timed out after {config.timeout:.2f} seconds\n")
            except OutOfMemory:
                duration_ms = (time.perf_counter() - t0) * 1000.0
                error = _out_of_memory(request_id)
                logs.append(f"{error['errorMessage']}\nRuntime.OutOfMemory\n")
            except WorkerExited:
                duration_ms = (time.perf_counter() - t0) * 1000.0
                error = _exited(request_id)
                logs.append(f"{error['errorMessage']}\nRuntime.ExitError\n")
            finally:
                pool.release(env, self._current_config(config.name))
        if error is not None:
            body = json.dumps(error).encode()
        peak_mb = max(1, (env.peak_rss if env else 0) // (1024 * 1024))
        billed = self.billing.record(config.name, config.memory_mb, duration_ms, init_ms,
                                     error=error is not None, timeout=timed_out,
                                     cpu_wait_ms=cpu_wait_ms)
        report = (f"REPORT RequestId: {request_id}\tDuration: {duration_ms:.2f} ms\t"
                  f"Billed Duration: {billed} ms\tMemory Size: {config.memory_mb} MB\t"
                  f"Max Memory Used: {peak_mb} MB\t")
        if init_ms is not None:
            report += f"Init Duration: {init_ms:.2f} ms\t"
        text = (f"START RequestId: {request_id} Version: $LATEST\n" + "".join(logs)
                + f"END RequestId: {request_id}\n{report}\n")
        self.recent_logs.setdefault(config.name, deque(maxlen=RECENT_LOGS_KEPT)).append(text)
        return Outcome(body=body, function_error=error is not None,
                       error_type=error["errorType"] if error else None, logs=text,
                       duration_ms=duration_ms, billed_ms=billed, init_ms=init_ms,
                       timed_out=timed_out, cpu_wait_ms=cpu_wait_ms)


def log_tail(text: str) -> str:
    """The last 4 KB of the log, as X-Amz-Log-Result carries it (before base64)."""
    data = text.encode()[-LOG_TAIL_BYTES:]
    return data.decode(errors="ignore")
