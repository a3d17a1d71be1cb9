"""Invoke functions through the AWS Lambda API: real AWS or the local runtime.

The same code targets both; only ``endpoint_url`` differs. A boto3 client checks the functions
and resolves the endpoint and credentials; each invocation is one signed request over a pooled
connection sized to the invocations in flight (invoke_http.py: boto3's per-call machinery cost
the orchestrator more CPU than the rest of a rollout's bookkeeping). Billed duration comes from the
``REPORT`` line of the tail log when the endpoint sends one (Lambda's own meter), else from the
client's stopwatch.
"""

from __future__ import annotations

import base64
import json
import re
import time
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from orchestrator.invokers.base import InvocationResult, Invoker
from orchestrator.invokers.invoke_http import HttpInvoke, InvokeError, error_of

_BILLED = re.compile(r"Billed Duration: (\d+) ms")
_INIT = re.compile(r"Init Duration: ([\d.]+) ms")
# The local runtime's one extra response header (runtime/invoke.py's CPU_WAIT_HEADER, which
# this package does not import: it also runs where the runtime is not installed).
CPU_WAIT_HEADER = "x-stellaris-cpu-wait-ms"


def _cpu_wait_ms(raw: str | None) -> float | None:
    """The shared-host CPU wait the local runtime reports; ``None`` from AWS (no such wait)."""
    try:
        return max(0.0, float(raw)) if raw is not None else None
    except ValueError:
        return None


def lambda_client(endpoint_url: str | None, region: str, pool: int, read_timeout: float) -> Any:
    kwargs: dict[str, Any] = {}
    if endpoint_url:
        # A local endpoint accepts any credentials; don't require an AWS profile for it.
        session = boto3.session.Session()
        if session.get_credentials() is None:
            kwargs.update(aws_access_key_id="local", aws_secret_access_key="local")
    return boto3.client(
        "lambda",
        endpoint_url=endpoint_url,
        region_name=region,
        config=Config(
            max_pool_connections=max(10, pool),
            read_timeout=read_timeout,
            connect_timeout=5,
            retries={"max_attempts": 3, "mode": "standard"},  # 429 throttles back off
            tcp_keepalive=True,
        ),
        **kwargs,
    )


class LambdaInvoker(Invoker):
    name = "lambda"

    def __init__(
        self,
        function_names: dict[str, str],
        endpoint_url: str | None,
        region: str,
        max_in_flight: int,
        timeout_s: float,
    ) -> None:
        self.function_names = function_names
        self.endpoint_url = endpoint_url
        self.region = region
        self.timeout_s = timeout_s
        self.client = lambda_client(endpoint_url, region, max_in_flight + 4, timeout_s + 30)
        # invocations go around boto3's per-call machinery (orchestrator/invokers/invoke_http.py)
        self.http = HttpInvoke(self.client, max_in_flight + 4, timeout_s + 30)
        self.pool = ThreadPoolExecutor(max_workers=max_in_flight + 2, thread_name_prefix="lambda")

    def start(self) -> None:
        """Fail fast, before anything is spent, when the endpoint or a function is missing."""
        for fn, name in self.function_names.items():
            try:
                self.client.get_function(FunctionName=name)
            except ClientError as exc:
                code = exc.response.get("Error", {}).get("Code", "")
                raise RuntimeError(
                    f"{fn} function {name!r} is not deployed at "
                    f"{self.endpoint_url or 'AWS ' + self.region} ({code}); run `stellaris deploy` first"
                ) from None
            except BotoCoreError as exc:
                raise RuntimeError(
                    f"Lambda endpoint {self.endpoint_url or 'AWS ' + self.region} unreachable: {exc}"
                ) from None

    def submit(self, function: str, event: dict[str, Any]) -> Future[InvocationResult]:
        return self.pool.submit(self._invoke, function, event)

    def _invoke(self, function: str, event: dict[str, Any]) -> InvocationResult:
        t0 = time.perf_counter()
        try:
            resp = self.http.invoke(self.function_names[function], json.dumps(event).encode())
        except (InvokeError, BotoCoreError) as exc:
            code = getattr(exc, "code", type(exc).__name__)
            return InvocationResult(function, False, None, code, str(exc),
                                    duration_ms=(time.perf_counter() - t0) * 1e3)
        if resp.status >= 400:
            code, message = error_of(resp)
            return InvocationResult(function, False, None, code, message,
                                    duration_ms=(time.perf_counter() - t0) * 1e3)
        wall_ms = (time.perf_counter() - t0) * 1e3
        body = resp.body
        log = ""
        if resp.headers.get("x-amz-log-result"):
            log = base64.b64decode(resp.headers["x-amz-log-result"]).decode(errors="replace")
        billed = _BILLED.search(log)
        duration_ms = float(billed.group(1)) if billed else wall_ms
        cold = bool(_INIT.search(log))
        cpu_wait_ms = _cpu_wait_ms(resp.headers.get(CPU_WAIT_HEADER))
        try:
            payload = json.loads(body) if body else None
        except ValueError:
            payload = None
        if resp.headers.get("x-amz-function-error"):
            doc = payload if isinstance(payload, dict) else {}
            return InvocationResult(
                function, False, None, str(doc.get("errorType", "Unhandled")),
                str(doc.get("errorMessage", body[:500])), duration_ms=duration_ms, cold_start=cold,
                cpu_wait_ms=cpu_wait_ms,
            )
        if not isinstance(payload, dict):
            return InvocationResult(function, False, None, "InvalidResponse",
                                    f"function returned {body[:200]!r}", duration_ms=duration_ms)
        return InvocationResult(function, True, payload, duration_ms=duration_ms, cold_start=cold,
                                cpu_wait_ms=cpu_wait_ms)

    def close(self) -> None:
        self.pool.shutdown(wait=True, cancel_futures=True)
        self.http.http.clear()
        self.client.close()
