"""Handlers called in-process on threads: no isolation, easiest to debug."""

from __future__ import annotations

import importlib
import time
import traceback
import uuid
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from orchestrator.invokers.base import FUNCTIONS, InvocationResult, Invoker


class InlineContext:
    """The subset of Lambda's context object the handlers use."""

    def __init__(self, function_name: str, timeout_s: float, memory_mb: int) -> None:
        self.aws_request_id = uuid.uuid4().hex
        self.function_name = function_name
        self.function_version = "$LATEST"
        self.invoked_function_arn = f"arn:aws:lambda:local:000000000000:function:{function_name}"
        self.memory_limit_in_mb = str(memory_mb)
        self.log_group_name = f"/aws/lambda/{function_name}"
        self.log_stream_name = "inline"
        self._deadline = time.monotonic() + timeout_s

    def get_remaining_time_in_millis(self) -> int:
        return max(0, int((self._deadline - time.monotonic()) * 1000))


def call_handler(function: str, event: dict[str, Any], timeout_s: float = 900, memory_mb: int = 1769,
                 fault_prob: float = 0.0) -> InvocationResult:
    """Import ``functions.<function>`` and run its handler, turning exceptions into results."""
    if function not in FUNCTIONS:
        raise ValueError(f"unknown function {function!r}; expected one of {FUNCTIONS}")
    t0 = time.perf_counter()
    try:
        module = importlib.import_module(f"functions.{function}")
        context = InlineContext(function, timeout_s, memory_mb)
        if fault_prob > 0 and function != "evaluator":
            from functions.faults import run_with_faults

            payload = run_with_faults(module.handler, event, context, fault_prob, in_process=True)
        else:
            payload = module.handler(event, context)
        return InvocationResult(function, True, payload, duration_ms=(time.perf_counter() - t0) * 1e3)
    except Exception as exc:  # noqa: BLE001 - a function error is a result, as on Lambda
        return InvocationResult(
            function, False, None, type(exc).__name__, f"{exc}\n{traceback.format_exc(limit=3)}",
            duration_ms=(time.perf_counter() - t0) * 1e3,
        )


class InlineInvoker(Invoker):
    name = "inline"

    def __init__(self, max_workers: int, timeout_s: float = 900, fault_prob: float = 0.0) -> None:
        self.pool = ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="inline-fn")
        self.timeout_s = timeout_s
        self.fault_prob = fault_prob

    def submit(self, function: str, event: dict[str, Any]) -> Future[InvocationResult]:
        return self.pool.submit(call_handler, function, event, self.timeout_s, 1769, self.fault_prob)

    def close(self) -> None:
        self.pool.shutdown(wait=True, cancel_futures=True)
