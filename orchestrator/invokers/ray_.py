"""Run the handlers as Ray tasks: a local Ray, or a cluster (``ray://head:10001`` or a GCS
address such as ``head:6379``).

On a cluster the workers get our code through Ray's ``runtime_env``: the ``functions``,
``store`` and ``orchestrator`` packages are uploaded as ``py_modules`` (the third-party
dependencies — torch, gymnasium, redis … — must be installed on the nodes, e.g. by running
them from ``deploy/Dockerfile.orchestrator`` or its CUDA variant). The learner asks for a GPU
when the cluster has one, so it lands on a GPU node there; actors and the evaluator ask for
one CPU each. The Redis URL in the events must be reachable from the worker nodes.
"""

from __future__ import annotations

import os
import time
from concurrent.futures import Future
from pathlib import Path
from typing import Any

from orchestrator.invokers.base import InvocationResult, Invoker
from orchestrator.invokers.inline import call_handler

# The packages a worker imports to run a handler (the task function lives in this module).
CODE_PACKAGES = ("functions", "store", "orchestrator")
_EXCLUDES = ["__pycache__", "*.pyc", "*.pyo", ".pytest_cache"]


def _remote_call(function: str, event: dict[str, Any]) -> dict[str, Any]:
    # Runs inside a Ray worker: one torch thread, like every other function process.
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    result = call_handler(function, event)
    # Plain JSON-able dict back: Ray moves it with its own serialiser inside the cluster.
    return {
        "ok": result.ok, "payload": result.payload, "error_type": result.error_type,
        "error_message": result.error_message, "duration_ms": result.duration_ms,
    }


def code_runtime_env(extra_env: dict[str, str] | None = None) -> dict[str, Any]:
    """``runtime_env`` that ships our packages to the cluster's workers."""
    import importlib

    modules = []
    for name in CODE_PACKAGES:
        pkg = importlib.import_module(name)
        if not getattr(pkg, "__file__", None):  # pragma: no cover - namespace package
            raise RuntimeError(f"cannot locate package {name!r} to ship to the Ray cluster")
        modules.append(str(Path(pkg.__file__).resolve().parent))
    return {
        "py_modules": modules,
        "excludes": list(_EXCLUDES),
        "env_vars": {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", **(extra_env or {})},
    }


def learner_gpus(cluster_resources: dict[str, float]) -> float:
    """One GPU per learner when the cluster has any GPU, else none."""
    return 1 if cluster_resources.get("GPU", 0) >= 1 else 0


class RayInvoker(Invoker):
    name = "ray"

    def __init__(self, address: str | None, max_in_flight: int,
                 runtime_env: dict[str, Any] | None = None) -> None:
        self.address = address
        self.max_in_flight = max_in_flight
        self.runtime_env = runtime_env
        self._remote: dict[str, Any] = {}
        self._owns_connection = False
        self.gpus = 0.0

    def start(self) -> None:
        import ray

        if not ray.is_initialized():
            if self.address:
                try:
                    ray.init(address=self.address, runtime_env=self.runtime_env or code_runtime_env(),
                             log_to_driver=False)
                except (ConnectionError, TimeoutError) as exc:
                    raise RuntimeError(f"Ray cluster at {self.address} unreachable: {exc}") from None
            else:
                # Functions are processes that share the machine, as on the other backends:
                # give Ray as many logical CPUs as invocations in flight. Workers of a local Ray
                # import our packages from this checkout (same interpreter, same sys.path).
                ray.init(num_cpus=self.max_in_flight + 1, include_dashboard=False,
                         log_to_driver=False, configure_logging=False,
                         runtime_env=self.runtime_env)
            self._owns_connection = True
        self.gpus = learner_gpus(ray.cluster_resources())
        base = ray.remote(_remote_call)
        self._remote = {
            "actor": base.options(num_cpus=1, max_retries=0),
            "evaluator": base.options(num_cpus=1, max_retries=0),
            "learner": base.options(num_cpus=1, num_gpus=self.gpus, max_retries=0),
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

        # A local Ray stops with us; on a cluster this only disconnects the driver.
        if self._owns_connection and ray.is_initialized():
            ray.shutdown()
        self._owns_connection = False
