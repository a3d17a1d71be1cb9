"""A light Lambda endpoint for the capacity benchmark: the synthetic functions on threads.

    python benchmarks/capacity_host.py --port 9100 --prefix cap --invoke-latency-ms 50

The local runtime gives each execution environment a worker process; hundreds of them would
need hundreds of cores, and the runtime's own work would be measured instead of the
orchestrator's. This process speaks the part of the Lambda API the orchestrator's boto3
invoker uses — ``GetFunction`` (its preflight) and ``Invoke`` (RequestResponse, ``LogType:
Tail`` with a REPORT line, ``X-Amz-Function-Error``) — and runs each invocation on a thread:
the synthetic handlers sleep, so hundreds of invocations in flight cost little CPU, and this
process's CPU is measured apart from the orchestrator's and Redis's.

The invoke latency of a real platform is emulated as the local runtime does it
(:class:`runtime.latency.InvokeLatency`: a log-normal delay, half before the handler and half
after, unbilled). ``GET /capacity/stats`` returns the store-operation timings the handlers
recorded since the last call (:data:`benchmarks.synthetic_functions.STATS`), with the
actor and learner invocations' own durations, and starts afresh.
"""

from __future__ import annotations

import argparse
import base64
import json
import math
import os
import re
import sys
import time
import traceback
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks import synthetic_functions as syn  # noqa: E402
from runtime.latency import InvokeLatency  # noqa: E402

_INVOKE = re.compile(r"^/2015-03-31/functions/([^/]+)/invocations$")
_FUNCTION = re.compile(r"^/2015-03-31/functions/([^/?]+)")


class Host(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 2048  # every pooled connection of the invoker may open at once

    def __init__(self, port: int, prefix: str, latency: InvokeLatency) -> None:
        super().__init__(("127.0.0.1", port), _Handler)
        self.functions = {f"{prefix}-{name}": name for name in syn.HANDLERS}
        self.latency = latency


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive: boto3 pools its connections
    # Headers and body go out in two writes: with Nagle's algorithm the body would wait for
    # the client's delayed ACK of the headers (40 ms on Linux) on every invocation.
    disable_nagle_algorithm = True
    server: Host

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - quiet
        return

    def _send(self, code: int, body: bytes, headers: dict[str, str] | None = None) -> None:
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(body)

    def _not_found(self, name: str) -> None:
        self._send(404, json.dumps({"Type": "User", "message": f"Function not found: {name}"})
                   .encode(), {"X-Amzn-ErrorType": "ResourceNotFoundException"})

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        if self.path == "/capacity/stats":
            self._send(200, json.dumps(syn.STATS.take()).encode())
            return
        m = _FUNCTION.match(self.path)
        name = m.group(1) if m else ""
        if name not in self.server.functions:
            self._not_found(name)
            return
        doc = {"Configuration": {"FunctionName": name, "Runtime": "python3.11",
                                 "Handler": f"benchmarks.synthetic_functions.{self.server.functions[name]}",
                                 "State": "Active", "MemorySize": 1769, "Timeout": 900}}
        self._send(200, json.dumps(doc).encode())

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        m = _INVOKE.match(self.path.split("?")[0])
        name = m.group(1) if m else ""
        if name not in self.server.functions:
            self._not_found(name)
            return
        fn = self.server.functions[name]
        t_in = time.perf_counter()
        delay = self.server.latency.sample_s()
        time.sleep(delay / 2)  # on the way in: the handler has not started, nothing billed
        t0 = time.perf_counter()
        headers: dict[str, str] = {}
        try:
            out = syn.HANDLERS[fn](json.loads(body or b"{}"), None)
        except Exception as exc:  # noqa: BLE001 - a function error is a response, as on Lambda
            out = {"errorType": type(exc).__name__, "errorMessage": str(exc),
                   "stackTrace": traceback.format_exc(limit=3).splitlines()}
            headers["X-Amz-Function-Error"] = "Unhandled"
        ms = (time.perf_counter() - t0) * 1e3
        report = (f"REPORT RequestId: {uuid.uuid4()}\tDuration: {ms:.2f} ms\t"
                  f"Billed Duration: {max(1, math.ceil(ms))} ms\tMemory Size: 1769 MB\t"
                  "Max Memory Used: 100 MB\t\n")
        headers["X-Amz-Log-Result"] = base64.b64encode(report.encode()).decode()
        payload = json.dumps(out).encode()
        time.sleep(delay / 2)  # on the way out
        syn.STATS.record(f"{fn}_invocation", (time.perf_counter() - t_in) * 1e3)
        self._send(200, payload, headers)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--port", type=int, required=True, help="port to listen on (127.0.0.1)")
    p.add_argument("--prefix", default="cap",
                   help="function name prefix: serves <prefix>-actor, -learner, -evaluator")
    p.add_argument("--invoke-latency-ms", type=float, default=0.0,
                   help="emulated median invoke latency, ms (half in, half out)")
    p.add_argument("--invoke-latency-sigma", type=float, default=0.0,
                   help="log-normal spread of that latency (0: fixed)")
    p.add_argument("--env-steps-per-s", type=float, default=syn.DEFAULT_ENV_STEPS_PER_S,
                   help="one synthetic actor's sampling speed, env steps/s")
    p.add_argument("--minibatch-ms", type=float, default=syn.DEFAULT_MINIBATCH_MS,
                   help="one synthetic learner minibatch's compute, ms")
    a = p.parse_args(argv)
    # the functions' configuration, as Lambda passes it: environment variables
    os.environ[syn.ENV_STEPS_PER_S] = str(a.env_steps_per_s)
    os.environ[syn.MINIBATCH_MS] = str(a.minibatch_ms)
    host = Host(a.port, a.prefix, InvokeLatency(a.invoke_latency_ms, a.invoke_latency_sigma))
    print(f"capacity host on http://127.0.0.1:{a.port}", flush=True)
    try:
        host.serve_forever(poll_interval=0.5)
    except KeyboardInterrupt:
        pass
    finally:
        host.server_close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
