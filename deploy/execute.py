"""Executing a plan: its boto3 calls in order, waiting for each function to settle (AWS
applies a create or an update over seconds and refuses another meanwhile)."""

from __future__ import annotations

import time
from typing import Any

from botocore.exceptions import ClientError

from deploy.aws import action_name, call, error_code, error_message
from deploy.errors import DeployError
from deploy.plan import Plan


def wait_settled(lam: Any, name: str, *, created: bool = False, timeout_s: float = 300) -> None:
    """Wait until a function's last create or update finished (AWS takes seconds).

    A created function is settled once ``Active``. An existing one may also be ``Inactive``
    (idle for weeks): Lambda accepts updates to it and its next invocation reactivates it, so
    waiting for ``Active`` there would wait forever. ``Pending`` (or an update
    ``InProgress``) is waited out; ``Failed`` is an error with AWS's reason.
    """
    settled = {"Active"} if created else {"Active", "Inactive"}
    deadline = time.monotonic() + timeout_s
    delay = 0.05
    while True:
        cfg = call(lam, "get_function_configuration", FunctionName=name)
        state, update = cfg.get("State", "Active"), cfg.get("LastUpdateStatus", "Successful")
        if state == "Failed" or update == "Failed":
            reason = cfg.get("StateReason") or cfg.get("LastUpdateStatusReason") or ""
            raise DeployError(f"function {name} failed to deploy: {reason}")
        if state in settled and update != "InProgress":
            return
        if time.monotonic() > deadline:
            raise DeployError(f"function {name} did not settle in {timeout_s:.0f} s "
                              f"(State {state}, LastUpdateStatus {update})")
        time.sleep(delay)
        delay = min(delay * 2, 2.0)


def _create_function(lam: Any, params: dict[str, Any], retry_s: float) -> None:
    """CreateFunction, retried while a freshly created role is not yet assumable (IAM is
    eventually consistent: seconds after CreateRole, Lambda may not see it)."""
    deadline = time.monotonic() + retry_s
    while True:
        try:
            call(lam, "create_function", **params)
            return
        except ClientError as exc:
            msg = str(exc.response.get("Error", {}).get("Message", ""))
            if error_code(exc) == "InvalidParameterValueException" and "cannot be assumed" in msg \
                    and time.monotonic() < deadline:
                time.sleep(2.0)
                continue
            if error_code(exc) == "ResourceConflictException":
                raise DeployError(
                    f"function {params['FunctionName']} appeared meanwhile: plan again") from None
            raise DeployError(f"lambda:CreateFunction {params['FunctionName']}: "
                              f"{error_message(exc)}") from None


def execute(plan: Plan, clients: dict[str, Any], *, role_retry_s: float = 30.0,
            log: Any = None) -> list[str]:
    """Make the plan's calls in order; returns ``"<action> <kind> <target>"`` per change."""
    if plan.problems:
        raise DeployError(plan.problems[0])
    done: list[str] = []
    created_role = False
    for step in plan.steps:
        if not step.changes:
            continue
        p = dict(step.params)
        if step.kind == "iam-role" and step.action == "create":
            iam = clients["iam"]
            attach = p.pop("AttachPolicies", [])
            call(iam, "create_role", **p)
            for arn in attach:
                call(iam, "attach_role_policy", RoleName=p["RoleName"], PolicyArn=arn)
            created_role = True
        elif step.kind == "iam-role" and step.action == "update":  # deploy's own role
            for arn in p["AttachPolicies"]:
                call(clients["iam"], "attach_role_policy", RoleName=p["RoleName"], PolicyArn=arn)
            created_role = True  # Lambda may not see the new permissions for seconds either
        elif step.kind == "iam-role" and step.action == "delete":
            iam = clients["iam"]
            for arn in p.pop("DetachPolicies", []):
                call(iam, "detach_role_policy", RoleName=p["RoleName"], PolicyArn=arn)
            call(iam, "delete_role", RoleName=p["RoleName"])
        elif step.kind == "ecr-repository" and step.action == "create":
            call(clients["ecr"], "create_repository", **p)
        elif step.kind == "ecr-repository" and step.action == "delete":
            call(clients["ecr"], "delete_repository", **p)
        elif step.kind == "function" and step.action == "create":
            _create_function(clients["lambda"], p, role_retry_s if created_role else 0.0)
            wait_settled(clients["lambda"], step.target, created=True)
        elif step.kind == "function" and step.action == "delete":
            call(clients["lambda"], "delete_function", **p)
        elif step.kind == "function-code":
            _update(clients["lambda"], "update_function_code", p)
        elif step.kind == "function-config":
            _update(clients["lambda"], "update_function_configuration", p,
                    role_retry_s if created_role else 0.0)
        elif step.kind == "concurrency" and step.action == "put":
            call(clients["lambda"], "put_function_concurrency", **p)
        elif step.kind == "concurrency" and step.action == "delete":
            call(clients["lambda"], "delete_function_concurrency", **p)
        else:  # pragma: no cover - a planner bug
            raise DeployError(f"unknown step {step.action} {step.kind}")
        done.append(f"{step.action} {step.kind} {step.target}")
        if log is not None:
            log(step.line())
    return done


def _update(lam: Any, operation: str, params: dict[str, Any], retry_s: float = 0.0) -> None:
    """One update, once the function has settled; retried while Lambda does not yet see the
    role's new permissions (a VPC added: ENI rights attached seconds ago)."""
    name = params["FunctionName"]
    wait_settled(lam, name)  # AWS refuses a second update while one is in progress (409)
    deadline = time.monotonic() + retry_s
    while True:
        try:
            call(lam, operation, **params)
            break
        except ClientError as exc:
            if error_code(exc) == "InvalidParameterValueException" \
                    and "execution role" in str(error_message(exc)) \
                    and time.monotonic() < deadline:
                time.sleep(2.0)
                continue
            raise DeployError(f"lambda:{action_name(operation)} {name}: "
                              f"{error_message(exc)}") from None
    wait_settled(lam, name)
