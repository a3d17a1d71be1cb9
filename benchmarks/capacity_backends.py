"""The capacity benchmark's orchestrator on Ray: ``stellaris train`` with the synthetic handlers
(benchmarks/synthetic_functions.py) as the Ray tasks.

    python benchmarks/capacity_backends.py <stellaris train flags> --backend ray [--ray-address A]

benchmarks/capacity.py starts it for ``--backend ray``. It is the real command line and the real
:class:`~orchestrator.async_loop.AsyncTrainer`; only the invoker's task function differs from
:class:`~orchestrator.invokers.ray_.RayInvoker`'s (which imports ``functions.<name>``): it calls
the synthetic handler of the same name, and the ``benchmarks`` package travels to a cluster's
workers with the others. On a cluster the functions' Redis URL (``--function-redis-url``) must
be reachable from the workers, and the emulated latency is not added: Ray's own is measured.
The synthetic functions' store timings stay in the workers; the record then has the stream
counters, the orchestrator's CPU and Redis's (when it runs on the orchestrator's machine).
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from orchestrator.invokers.ray_ import (  # noqa: E402
    RayInvoker,
    cluster_address,
    code_runtime_env,
    fit_to_job,
    job_runtime_env,
)


def _synthetic_call(function: str, event: dict[str, Any]) -> dict[str, Any]:
    """Runs in a Ray worker: the synthetic handler, its result as the Ray invoker returns it."""
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    from benchmarks.synthetic_functions import HANDLERS

    t0 = time.perf_counter()
    try:
        payload = HANDLERS[function](event, None)
        return {"ok": True, "payload": payload, "error_type": None, "error_message": None,
                "duration_ms": (time.perf_counter() - t0) * 1e3}
    except Exception as exc:  # noqa: BLE001 - a function error is a result
        return {"ok": False, "payload": None, "error_type": type(exc).__name__,
                "error_message": str(exc), "duration_ms": (time.perf_counter() - t0) * 1e3}


class SyntheticRayInvoker(RayInvoker):
    """:class:`RayInvoker` whose tasks run the synthetic handlers."""

    def __init__(self, address: str | None, max_in_flight: int) -> None:
        env = None
        # a cluster's workers (--ray-address, or RAY_ADDRESS as a Ray Job's driver has it) get
        # the benchmarks package too; a local Ray's import it from this checkout
        if cluster_address(address):
            env = code_runtime_env()
            env["py_modules"] = [*env["py_modules"], str(REPO / "benchmarks")]
            # its code only: benchmarks/out holds the capacity points' own run folders (this
            # run's among them) and records/ the results, neither of which a worker reads
            env["excludes"] = [*env["excludes"], "/out", "/records"]
            env = fit_to_job(env, job_runtime_env())
        super().__init__(address, max_in_flight, runtime_env=env)

    def start(self) -> None:
        import ray

        super().start()
        base = ray.remote(_synthetic_call)
        self._remote = {fn: base.options(num_cpus=1, max_retries=0)
                        for fn in ("actor", "learner", "evaluator")}


def main(argv: list[str] | None = None) -> int:
    import orchestrator.run as run
    from orchestrator.cli import main as cli_main

    real = run.build_invoker

    def build_invoker(cfg: Any, function_redis_url: str, run_dir: Path) -> Any:
        if cfg.backend != "ray":
            return real(cfg, function_redis_url, run_dir)
        in_flight = (cfg.max_actors if cfg.autoscale else cfg.actors) + cfg.learners + 1
        return SyntheticRayInvoker(cfg.ray_address, in_flight)

    run.build_invoker = build_invoker  # the one difference from `stellaris train`
    return cli_main(["train", *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    raise SystemExit(main())
