"""The functions Stellaris deploys, and an idempotent create-or-update of them via boto3."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from botocore.exceptions import ClientError

HANDLERS = {
    "actor": "functions.actor.handler",
    "learner": "functions.learner.handler",
    "evaluator": "functions.evaluator.handler",
}
LOCAL_ROLE = "arn:aws:iam::000000000000:role/stellaris-local"


@dataclass(frozen=True)
class FunctionSpec:
    logical: str  # actor | learner | evaluator
    name: str
    handler: str
    memory_mb: int
    timeout_s: int
    environment: dict[str, str] = field(default_factory=dict)
    reserved_concurrency: int | None = None


def function_specs(
    prefix: str,
    actor_memory_mb: int,
    learner_memory_mb: int,
    timeout_s: int,
    environment: dict[str, str] | None = None,
) -> list[FunctionSpec]:
    mem = {"actor": actor_memory_mb, "learner": learner_memory_mb, "evaluator": actor_memory_mb}
    return [
        FunctionSpec(fn, f"{prefix}-{fn}", handler, mem[fn], timeout_s, dict(environment or {}))
        for fn, handler in HANDLERS.items()
    ]


def _wait_active(client: Any, name: str, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        cfg = client.get_function_configuration(FunctionName=name)
        if cfg.get("State", "Active") == "Active" and cfg.get("LastUpdateStatus", "Successful") != "InProgress":
            return
        time.sleep(0.1)
    raise TimeoutError(f"function {name} did not become Active in {timeout_s:.0f}s")


def deploy_zip(client: Any, specs: list[FunctionSpec], zip_bytes: bytes, role: str = LOCAL_ROLE,
               runtime: str = "python3.11") -> list[str]:
    """Create each function, or update its code and configuration; returns the actions taken."""
    actions: list[str] = []
    for spec in specs:
        config = {
            "Handler": spec.handler,
            "MemorySize": spec.memory_mb,
            "Timeout": spec.timeout_s,
            "Environment": {"Variables": spec.environment},
        }
        try:
            current = client.get_function(FunctionName=spec.name)["Configuration"]
        except ClientError as exc:
            if exc.response["Error"]["Code"] != "ResourceNotFoundException":
                raise
            client.create_function(
                FunctionName=spec.name, Runtime=runtime, Role=role, Code={"ZipFile": zip_bytes},
                PackageType="Zip", **config,
            )
            actions.append(f"create {spec.name}")
            _wait_active(client, spec.name)
            continue
        from deploy.package import code_sha256

        if current.get("CodeSha256") != code_sha256(zip_bytes):
            client.update_function_code(FunctionName=spec.name, ZipFile=zip_bytes)
            _wait_active(client, spec.name)
            actions.append(f"update-code {spec.name}")
        want_env = spec.environment
        have_env = (current.get("Environment") or {}).get("Variables", {})
        if (current.get("Handler"), current.get("MemorySize"), current.get("Timeout"), have_env) != (
            spec.handler, spec.memory_mb, spec.timeout_s, want_env
        ):
            client.update_function_configuration(FunctionName=spec.name, **config)
            _wait_active(client, spec.name)
            actions.append(f"update-config {spec.name}")
    return actions
