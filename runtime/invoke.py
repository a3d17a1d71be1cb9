"""One invocation attempt on an execution environment: cold or warm start, errors shaped as
Lambda shapes them, the START/END/REPORT log lines, and metering."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from runtime.environment import (
    InitFailed,
    InitTimedOut,
    InvocationTimedOut,
    OutOfMemory,
    WorkerExited,
)
from runtime.functions import FunctionEntry

if TYPE_CHECKING:
    from runtime.core import Runtime

MAX_SYNC_RESPONSE = 6 * 1024 * 1024 + 100  # RIE's MaxPayloadSize; AWS reports the same number
LOG_TAIL_BYTES = 4096
CPU_WAIT_HEADER = "X-Stellaris-Cpu-Wait-Ms"  # the emulator's one extra response header
INIT_TIMEOUT_FLOOR = 10.0  # Lambda's INIT limit; a longer function timeout extends it (INIT retried)


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


def _doc(error_type: str, message: str, request_id: str | None = None) -> dict[str, Any]:
    doc: dict[str, Any] = {"errorType": error_type, "errorMessage": message}
    if request_id is not None:
        doc["requestId"] = request_id
    return doc


async def run_once(rt: Runtime, entry: FunctionEntry, payload: str, request_id: str,
                   client_context: Any = None) -> Outcome:
    """Run one attempt; the caller holds a concurrency slot for it."""
    config = entry.config
    pool = rt.pool
    env = pool.take_warm(config)
    init_ms: float | None = None
    logs: list[str] = []
    error: dict[str, Any] | None = None
    body = b""
    duration_ms = 0.0
    cpu_wait_ms: float | None = None
    timed_out = False
    t_start = time.perf_counter()
    if env is None:
        t_init = time.perf_counter()
        try:
            env = await pool.start_env(config, max(INIT_TIMEOUT_FLOOR, float(config.timeout)))
            init_ms = env.init_ms
            logs.append(env.init_logs)
        except InitFailed as exc:
            init_ms = (time.perf_counter() - t_init) * 1000.0
            logs.append(exc.logs)
            error = exc.doc
            logs.append(f"[ERROR] {error['errorType']}: {error['errorMessage']}\n")
        except InitTimedOut:
            init_ms = (time.perf_counter() - t_init) * 1000.0
            error = _doc("Sandbox.Timedout", f"RequestId: {request_id} Error: Task timed out after "
                         f"{max(INIT_TIMEOUT_FLOOR, float(config.timeout)):.2f} seconds")
            timed_out = True
        except OutOfMemory:
            init_ms = (time.perf_counter() - t_init) * 1000.0
            error = _doc("Runtime.OutOfMemory",
                         f"RequestId: {request_id} Error: Runtime exited with error: signal: killed")
        except WorkerExited:
            init_ms = (time.perf_counter() - t_init) * 1000.0
            error = _doc("Runtime.ExitError",
                         f"RequestId: {request_id} Error: Runtime exited without providing a reason")
    if env is not None and error is None:
        frame = {
            "type": "invoke", "request_id": request_id, "payload": payload,
            "deadline_ms": int(time.time() * 1000) + config.timeout * 1000,
            "invoked_arn": config.arn, "client_context": client_context,
        }
        t0 = time.perf_counter()
        try:
            reply = await env.invoke(frame, float(config.timeout))
            duration_ms = float(reply.get("duration_ms", (time.perf_counter() - t0) * 1000.0))
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
            error = _doc("Sandbox.Timedout",
                         f"RequestId: {request_id} Error: Task timed out after {config.timeout:.2f} seconds")
            stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime()) + f".{int(time.time() % 1 * 1000):03d}Z"
            logs.append(f"{stamp} {request_id} Task timed out after {config.timeout:.2f} seconds\n")
        except OutOfMemory:
            duration_ms = (time.perf_counter() - t0) * 1000.0
            error = _doc("Runtime.OutOfMemory",
                         f"RequestId: {request_id} Error: Runtime exited with error: signal: killed")
            logs.append(f"{error['errorMessage']}\nRuntime.OutOfMemory\n")
        except WorkerExited:
            duration_ms = (time.perf_counter() - t0) * 1000.0
            error = _doc("Runtime.ExitError",
                         f"RequestId: {request_id} Error: Runtime exited without providing a reason")
            logs.append(f"{error['errorMessage']}\nRuntime.ExitError\n")
        finally:
            pool.release(env, rt.current_config(config.name))
    if error is not None:
        body = json.dumps(error).encode()
    peak_mb = max(1, (env.peak_rss if env else 0) // (1024 * 1024))
    billed = rt.billing.record(config.name, config.memory_mb, duration_ms, init_ms,
                               error=error is not None, timeout=timed_out, cpu_wait_ms=cpu_wait_ms)
    report = (f"REPORT RequestId: {request_id}\tDuration: {duration_ms:.2f} ms\t"
              f"Billed Duration: {billed} ms\tMemory Size: {config.memory_mb} MB\t"
              f"Max Memory Used: {peak_mb} MB\t")
    if init_ms is not None:
        report += f"Init Duration: {init_ms:.2f} ms\t"
    text = (f"START RequestId: {request_id} Version: $LATEST\n" + "".join(logs)
            + f"END RequestId: {request_id}\n{report}\n")
    rt.log_invocation(config.name, text, time.perf_counter() - t_start)
    return Outcome(body=body, function_error=error is not None,
                   error_type=error["errorType"] if error else None, logs=text,
                   duration_ms=duration_ms, billed_ms=billed, init_ms=init_ms, timed_out=timed_out,
                   cpu_wait_ms=cpu_wait_ms)


def log_tail(text: str) -> str:
    """The last 4 KB of the log, as X-Amz-Log-Result carries it (before base64)."""
    data = text.encode()[-LOG_TAIL_BYTES:]
    return data.decode(errors="ignore")
