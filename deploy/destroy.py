"""The destroy plan: the prefix's functions deploy created and, on AWS, the role and the
repository when named and tagged as deploy's."""

from __future__ import annotations

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
        try:
            tags = call(iam, "list_role_tags", RoleName=role_name).get("Tags") or []
            if MANAGED_TAG_ENTRY in tags:
                attached = call(iam, "list_attached_role_policies", RoleName=role_name)
                arns = [p["PolicyArn"] for p in attached.get("AttachedPolicies", [])]
                plan.steps.append(Step("iam-role", "delete", role_name, "",
                                       {"RoleName": role_name, "DetachPolicies": arns}))
            else:
                plan.steps.append(Step("iam-role", "noop", role_name, KEPT))
        except ClientError as exc:
            if error_code(exc) != "NoSuchEntity":
                raise
    if target == "aws" and repository:
        ecr = clients["ecr"]
        try:
            found = call(ecr, "describe_repositories", repositoryNames=[repository])
            arn = found["repositories"][0]["repositoryArn"]
            tags = call(ecr, "list_tags_for_resource", resourceArn=arn).get("tags") or []
            if MANAGED_TAG_ENTRY in tags:
                plan.steps.append(Step("ecr-repository", "delete", repository, "with its images",
                                       {"repositoryName": repository, "force": True}))
            else:
                plan.steps.append(Step("ecr-repository", "noop", repository, KEPT))
        except ClientError as exc:
            if error_code(exc) != "RepositoryNotFoundException":
                raise
    return plan
