"""The destroy plan: the prefix's functions deploy created and, on AWS, the role and the
repository when named and tagged as deploy's."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from botocore.exceptions import ClientError

from deploy.aws import MANAGED_TAG, MANAGED_TAG_ENTRY, call, error_code
from deploy.plan import Plan, Step

KEPT = "not managed by stellaris: kept"


def plan_destroy(clients: dict[str, Any], prefix: str, functions: list[str], target: str, *,
                 region: str | None = None, endpoint_url: str | None = None,
                 role_name: str | None = None, repository: str | None = None) -> Plan:
    """Delete the prefix's functions that deploy created (and, on AWS, the role and repository
    when given and tagged as ours)."""
    lam = clients["lambda"]
    plan = Plan(target, "destroy", region=region, endpoint_url=endpoint_url)
    wanted = {f"{prefix}-{fn}" for fn in functions}
    marker: str | None = None
    while True:
        page = call(lam, "list_functions", **({"Marker": marker} if marker else {}))
        for fn in page.get("Functions", []):
            name = fn["FunctionName"]
            if name not in wanted:
                continue
            if target == "aws":
                tags = call(lam, "list_tags", Resource=fn["FunctionArn"]).get("Tags") or {}
                if tags.get(MANAGED_TAG[0]) != MANAGED_TAG[1]:
                    plan.steps.append(Step("function", "noop", name, KEPT))
                    continue
            plan.steps.append(Step("function", "delete", name, "", {"FunctionName": name}))
        marker = page.get("NextMarker")
        if not marker:
            break
    if target == "aws" and role_name:
        iam = clients["iam"]
        plan.steps += _ours_or_kept(
            "iam-role", role_name, "NoSuchEntity",
            lambda: call(iam, "list_role_tags", RoleName=role_name).get("Tags") or [],
            lambda: _role_deletion(iam, role_name))
    if target == "aws" and repository:
        ecr = clients["ecr"]
        plan.steps += _ours_or_kept(
            "ecr-repository", repository, "RepositoryNotFoundException",
            lambda: _repository_tags(ecr, repository),
            lambda: Step("ecr-repository", "delete", repository, "with its images",
                         {"repositoryName": repository, "force": True}))
    return plan


def _ours_or_kept(kind: str, name: str, missing: str, tags: Callable[[], list[dict[str, str]]],
                  deletion: Callable[[], Step]) -> list[Step]:
    """Delete a resource tagged as deploy's, keep any other; nothing when it does not exist
    (AWS answers with the error code ``missing``)."""
    try:
        if MANAGED_TAG_ENTRY in tags():
            return [deletion()]
        return [Step(kind, "noop", name, KEPT)]
    except ClientError as exc:
        if error_code(exc) != missing:
            raise
        return []


def _role_deletion(iam: Any, role_name: str) -> Step:
    """The role's policies are detached first: IAM refuses to delete a role that has any."""
    attached = call(iam, "list_attached_role_policies", RoleName=role_name)
    arns = [p["PolicyArn"] for p in attached.get("AttachedPolicies", [])]
    return Step("iam-role", "delete", role_name, "", {"RoleName": role_name, "DetachPolicies": arns})


def _repository_tags(ecr: Any, repository: str) -> list[dict[str, str]]:
    found = call(ecr, "describe_repositories", repositoryNames=[repository])
    arn = found["repositories"][0]["repositoryArn"]
    return call(ecr, "list_tags_for_resource", resourceArn=arn).get("tags") or []
