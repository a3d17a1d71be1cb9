"""Run the handlers as Ray tasks: a local Ray, or a cluster (``ray://head:10001``, a GCS
address such as ``head:6379``, or ``RAY_ADDRESS`` as set inside a Ray Job and on KubeRay pods).

On a cluster the workers get our code through Ray's ``runtime_env``: the ``functions``,
``store`` and ``orchestrator`` packages, and the package of a custom env
(``package.module:EnvId``), are uploaded as ``py_modules`` (the third-party dependencies —
torch, gymnasium, redis … — must be installed on the nodes: ``deploy/Dockerfile.orchestrator``
or its CUDA variant, or ``deploy/k8s/Dockerfile.ray-node`` on KubeRay). Inside a Ray Job the job's own
``runtime_env`` wins where both set a field. The learner asks for ``learner_gpus`` of a GPU
(default: a whole one when the cluster has any, so it lands on a GPU node there; 0.25 lets four
learners share one); actors and the evaluator ask for one CPU each. The Redis URL in the events
must be reachable from the worker nodes.
"""

from __future__ import annotations

import json
import os
import sys
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


def code_runtime_env(extra_env: dict[str, str] | None = None,
                     extra_modules: tuple[str, ...] = ()) -> dict[str, Any]:
    """``runtime_env`` that ships our packages (and ``extra_modules``: a custom env's package
    folder or module file) to the cluster's workers."""
    import importlib

    modules = []
    for name in CODE_PACKAGES:
        pkg = importlib.import_module(name)
        if not getattr(pkg, "__file__", None):  # pragma: no cover - namespace package
            raise RuntimeError(f"cannot locate package {name!r} to ship to the Ray cluster")
        modules.append(str(Path(pkg.__file__).resolve().parent))
    modules += [str(Path(m).resolve()) for m in extra_modules]
    return {
        "py_modules": modules,
        "excludes": list(_EXCLUDES),
        "env_vars": {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", **(extra_env or {})},
    }


def cluster_address(address: str | None) -> str | None:
    """The cluster to join: the config's address, else ``RAY_ADDRESS`` (set for the driver of a
    Ray Job and on KubeRay's pods), else None for a Ray of our own."""
    found = address or os.environ.get("RAY_ADDRESS") or None
    if found and found.startswith(("http://", "https://")):
        raise RuntimeError(
            f"Ray address {found!r} is a dashboard (job submission) address, not one a driver "
            f"joins: submit the run as a job (ray job submit --address {found} -- stellaris "
            "train --backend ray ...) or give the cluster's GCS address (head:6379) or "
            "ray://head:10001")
    return found


def fit_to_job(ours: dict[str, Any], job: dict[str, Any] | None) -> dict[str, Any]:
    """Our ``runtime_env`` less what the Ray Job's already sets: Ray merges a driver's
    ``runtime_env`` into its job's and refuses any field (or env var) both set. The job's
    wins; its ``working_dir``, ``py_modules`` or image then has to carry our code."""
    if not job:
        return ours
    fitted = {k: v for k, v in ours.items() if k not in job or k == "env_vars"}
    job_vars = job.get("env_vars") or {}
    fitted["env_vars"] = {k: v for k, v in ours.get("env_vars", {}).items() if k not in job_vars}
    dropped = sorted(k for k in ours if k not in fitted)
    if dropped:
        print(f"note: the Ray Job's runtime_env sets {', '.join(dropped)}; using the job's",
              file=sys.stderr)
    return fitted


def job_runtime_env() -> dict[str, Any] | None:
    """The ``runtime_env`` of the Ray Job this driver runs in (None outside a job)."""
    raw = os.environ.get("RAY_JOB_CONFIG_JSON_ENV_VAR")
    return (json.loads(raw).get("runtime_env") or None) if raw else None


def learner_gpu_share(cluster_resources: dict[str, float], asked: float | None) -> float:
    """GPUs a learner task asks for: ``asked`` (unset: one when the cluster has a GPU), never
    any on a cluster without GPUs (a task asking for one would wait forever)."""
    have = float(cluster_resources.get("GPU", 0))
    if asked is None:
        return 1.0 if have >= 1 else 0.0
    if have <= 0:
        return 0.0
    if asked > have:
        raise RuntimeError(f"learner_gpus = {asked} but the Ray cluster has {have:g} GPU(s)")
    return float(asked)


def task_options(gpu_share: float) -> dict[str, dict[str, Any]]:
    """Ray task options per function: one CPU each, the learner's GPU share, no Ray retries
    (the loops resubmit failed invocations themselves)."""
    learner: dict[str, Any] = {"num_cpus": 1, "max_retries": 0}
    if gpu_share > 0:
        learner["num_gpus"] = gpu_share
    return {"actor": {"num_cpus": 1, "max_retries": 0},
            "evaluator": {"num_cpus": 1, "max_retries": 0},
            "learner": learner}


class RayInvoker(Invoker):
    name = "ray"

    def __init__(self, address: str | None, max_in_flight: int,
                 runtime_env: dict[str, Any] | None = None, learner_gpus: float | None = None,
                 extra_modules: tuple[str, ...] = ()) -> None:
        self.address = address
        self.max_in_flight = max_in_flight
        self.runtime_env = runtime_env
        self.learner_gpus = learner_gpus
        self.extra_modules = extra_modules
        self._remote: dict[str, Any] = {}
        self._owns_connection = False
        self.gpus = 0.0

    def start(self) -> None:
        import ray

        if not ray.is_initialized():
            address = cluster_address(self.address)
            if address:
                env = self.runtime_env or fit_to_job(
                    code_runtime_env(extra_modules=self.extra_modules), job_runtime_env())
                try:
                    ray.init(address=address, runtime_env=env, log_to_driver=False)
                except (ConnectionError, TimeoutError) as exc:
                    raise RuntimeError(f"Ray cluster at {address} unreachable: {exc}") from None
            else:
                # Functions are processes that share the machine, as on the other backends:
                # give Ray as many logical CPUs as invocations in flight. Workers of a local Ray
                # import our packages from this checkout (same interpreter, same sys.path); a
                # custom env's package may live anywhere, so it is shipped.
                env = self.runtime_env
                if env is None and self.extra_modules:
                    env = {"py_modules": [str(Path(m).resolve()) for m in self.extra_modules],
                           "excludes": list(_EXCLUDES)}
                ray.init(num_cpus=self.max_in_flight + 1, include_dashboard=False,
                         log_to_driver=False, configure_logging=False, runtime_env=env)
            self._owns_connection = True
        self.gpus = learner_gpu_share(ray.cluster_resources(), self.learner_gpus)
        if self.learner_gpus and not self.gpus:
            print(f"warning: learner_gpus = {self.learner_gpus} but the Ray cluster has no GPU: "
                  "learners run on CPU", file=sys.stderr)
        base = ray.remote(_remote_call)
        self._remote = {fn: base.options(**opts) for fn, opts in task_options(self.gpus).items()}

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
