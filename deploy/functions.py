"""The functions Stellaris deploys, and an idempotent create-or-update of them via boto3."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from deploy.errors import DeployError
from deploy.execute import execute
from deploy.function_plan import ZipCode, plan_function
from deploy.plan import Plan

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
    *,
    evaluator_memory_mb: int | None = None,
    reserved_concurrency: dict[str, int] | None = None,
) -> list[FunctionSpec]:
    """One spec per handler; ``reserved_concurrency`` maps actor/learner/evaluator to a limit."""
    mem = {"actor": actor_memory_mb, "learner": learner_memory_mb,
           "evaluator": evaluator_memory_mb or actor_memory_mb}
    reserved = reserved_concurrency or {}
    return [
        FunctionSpec(fn, f"{prefix}-{fn}", handler, mem[fn], timeout_s, dict(environment or {}),
                     reserved.get(fn))
        for fn, handler in HANDLERS.items()
    ]


def deploy_zip(client: Any, specs: list[FunctionSpec], zip_bytes: bytes, role: str = LOCAL_ROLE,
               runtime: str = "python3.11") -> list[str]:
    """Create each function, or update its code and configuration; returns the actions taken
    (``create <name>``, ``update-code <name>``, ``update-config <name>`` …; empty when
    everything was already up to date)."""
    actions: list[str] = []
    for spec in specs:
        steps, problems = plan_function(client, spec, ZipCode(zip_bytes, runtime), role,
                                        managed_tags=False)
        if problems:
            raise DeployError(problems[0])
        execute(Plan("local", "deploy", steps), {"lambda": client})
        for s in steps:
            if s.changes:
                kind = {"function": "", "function-code": "-code", "function-config": "-config",
                        "concurrency": "-concurrency"}[s.kind]
                actions.append(f"{s.action}{kind} {s.target}")
    return actions
