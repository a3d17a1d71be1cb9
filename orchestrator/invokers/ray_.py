"""Run the handlers as Ray tasks: a local Ray, or a cluster (``ray://head:10001``).

The learner asks for a GPU when the cluster has one, so it lands on a GPU node there; actors
and the evaluator ask for one CPU each.
"""

from __future__ import annotations

import os
import time
from concurrent.futures import Future
from typing import Any

from orchestrator.invokers.base import InvocationResult, Invoker
from orchestrator.invokers.inline import call_handler


def _remote_call(function: str, event: dict[str, Any]) -> dict[str, Any]:
    # Runs inside a Ray worker: one torch thread, like every other function process.
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    result = call_handler(function, event)
    # Plain JSON-able dict back: Ray moves it with its own serialiser inside the cluster.
    return {
        "ok": result.ok, "payload": result.payload, "error_type": result.error_type,
        "error_message": result.error_message, "duration_ms": result.duration_ms,
    }


class RayInvoker(Invoker):
    name = "ray"

    def __init__(self, address: str | None, max_in_flight: int) -> None:
        self.address = address
        self.max_in_flight = max_in_flight
        self._remote: dict[str, Any] = {}

    def start(self) -> None:
        import ray

        if not ray.is_initialized():
            if self.address:
                ray.init(address=self.address, log_to_driver=False)
            else:
                # Functions are processes that share the machine, as on the other backends:
                # give Ray as many logical CPUs as invocations in flight.
                ray.init(num_cpus=self.max_in_flight + 1, include_dashboard=False,
                         log_to_driver=False, configure_logging=False)
        gpus = ray.cluster_resources().get("GPU", 0)
        base = ray.remote(_remote_call)
        self._remote = {
            "actor": base.options(num_cpus=1, max_retries=0),
            "evaluator": base.options(num_cpus=1, max_retries=0),
            "learner": base.options(num_cpus=1, num_gpus=1 if gpus >= 1 else 0, max_retries=0),
        }

    def submit(self, function: str, event: dict[str, Any]) -> Future[InvocationResult]:
        out: Future[InvocationResult] = Future()
        t0 = time.perf_counter()
        ref = self._remote[function].remote(function, event)
        inner = ref.future()

        def done(f: Future[Any]) -> None:
            try:
                r = f.result()
                out.set_result(InvocationResult(function, r["ok"], r["payload"], r["error_type"],
                                                r["error_message"], duration_ms=r["duration_ms"]))
            except Exception as exc:  # noqa: BLE001 - a dead worker is a failed invocation
                out.set_result(InvocationResult(function, False, None, type(exc).__name__, str(exc),
                                                duration_ms=(time.perf_counter() - t0) * 1e3))

        inner.add_done_callback(done)
        return out

    def close(self) -> None:
        import ray

        if ray.is_initialized() and not self.address:
            ray.shutdown()
