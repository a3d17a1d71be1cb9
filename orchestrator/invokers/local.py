"""The local backend: start the local Lambda runtime, deploy the functions to it with boto3 and
invoke them over HTTP — exactly the calls that would go to AWS Lambda."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from deploy.functions import deploy_zip, function_specs
from deploy.package import build_function_zip
from orchestrator.invokers.lambda_ import LambdaInvoker, lambda_client


class LocalRuntimeInvoker(LambdaInvoker):
    name = "local"

    def __init__(
        self,
        prefix: str,
        actor_memory_mb: int,
        learner_memory_mb: int,
        timeout_s: int,
        max_in_flight: int,
        environment: dict[str, str] | None = None,
        zygote: bool = True,
        log_file: str | None = None,
        fault_prob: float = 0.0,
        invoke_latency_ms: float = 0.0,
        invoke_latency_sigma: float = 0.0,
    ) -> None:
        from runtime.launcher import LocalRuntime  # the runtime is only needed for this backend

        self.specs = function_specs(prefix, actor_memory_mb, learner_memory_mb, timeout_s, environment)
        if fault_prob > 0:  # reliability drills: deploy the fault-injecting wrappers instead
            from functions.faults import PROB_ENV

            self.specs = [
                replace(s, handler=f"functions.faults.{s.logical}",
                        environment={**s.environment, PROB_ENV: str(fault_prob)})
                if s.logical != "evaluator" else s
                for s in self.specs
            ]
        self.runtime = LocalRuntime(
            zygote=zygote, account_concurrency=max(10, max_in_flight * 2), log_file=log_file,
            invoke_latency_ms=invoke_latency_ms, invoke_latency_sigma=invoke_latency_sigma,
        )
        self._max_in_flight = max_in_flight
        self._timeout_s = timeout_s
        self.deploy_actions: list[str] = []

    def launch(self) -> None:
        self.runtime.launch()  # its zygote imports torch on one core while we import ours

    def start(self) -> None:
        self.runtime.launch()
        self.runtime.wait_healthy(zygote=False)  # deploy while the zygote preloads
        names = {s.logical: s.name for s in self.specs}
        super().__init__(names, self.runtime.endpoint, "us-east-1", self._max_in_flight, self._timeout_s)
        admin = lambda_client(self.runtime.endpoint, "us-east-1", 2, 60)
        self.deploy_actions = deploy_zip(admin, self.specs, build_function_zip())
        admin.close()
        super().start()

    def billing(self) -> dict[str, Any] | None:
        try:
            return self.runtime.billing()
        except Exception:  # noqa: BLE001 - billing is a report, never fatal
            return None

    def close(self) -> None:
        try:
            if hasattr(self, "pool"):
                super().close()
        finally:
            self.runtime.stop()
