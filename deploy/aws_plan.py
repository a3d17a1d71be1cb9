"""The AWS target's plan: the Lambda execution role, the ECR repository and its image, then
each function as an image function. The partition and account come from the caller's identity
(STS), so the same plan works in aws, aws-cn and aws-us-gov."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from botocore.exceptions import ClientError

from deploy.aws import MANAGED_TAG_ENTRY, call, error_code
from deploy.errors import DeployError
from deploy.function_plan import ImageCode, plan_function
from deploy.iam import LAMBDA_TRUST_POLICY, check_role, managed_policy_arns, needs
from deploy.plan import Plan, Step

_ECR_URI = re.compile(
    r"^(?P<account>\d{12})\.dkr\.ecr\.(?P<region>[a-z0-9-]+)\.amazonaws\.com(?:\.cn)?/"
    r"(?P<repo>[a-z0-9][a-z0-9._/-]*?)"
    r"(?::(?P<tag>[A-Za-z0-9_.-]+)|@(?P<digest>sha256:[0-9a-f]{64}))?$"
)


def parse_image_uri(uri: str) -> dict[str, str | None]:
    """``<acct>.dkr.ecr.<region>.amazonaws.com/<repo>[:tag|@digest]`` -> its parts."""
    m = _ECR_URI.match(uri)
    if not m:
        raise DeployError(
            f"--image-uri {uri!r} is not an ECR image URI "
            "(<account>.dkr.ecr.<region>.amazonaws.com/"
            "<repository>:<tag>): Lambda runs images from ECR only"
        )
    parts = m.groupdict()
    if not parts["tag"] and not parts["digest"]:
        parts["tag"] = "latest"
    return parts


@dataclass
class AwsSettings:
    image_uri: str
    specs: list[Any]
    role_arn: str | None = None  # None: deploy ensures a role named role_name
    role_name: str = "stellaris-lambda"
    vpc: dict[str, list[str]] | None = None
    architecture: str | None = None  # x86_64 | arm64 (default: Lambda's, x86_64)
    repository_only: bool = False


def _role_name(arn: str) -> str:
    if not re.match(r"^arn:aws[a-z-]*:iam::\d{12}:role/.+", arn):
        raise DeployError(
            f"--role {arn!r} is not an IAM role ARN (arn:<partition>:iam::<account>:role/<name>)")
    return arn.rsplit("/", 1)[1]


def caller_identity(sts: Any) -> tuple[str, str]:
    """``(partition, account)`` of the credentials in use: ``arn:<partition>:...``."""
    ident = call(sts, "get_caller_identity")
    return str(ident["Arn"]).split(":")[1], str(ident["Account"])


def plan_aws(clients: dict[str, Any], s: AwsSettings, region: str | None) -> Plan:
    """IAM role, ECR repository (and image check), then each function."""
    iam, ecr, lam = clients["iam"], clients["ecr"], clients["lambda"]
    plan = Plan("aws", "deploy", region=region)
    img = parse_image_uri(s.image_uri)
    if region and img["region"] != region:
        plan.problems.append(f"image is in region {img['region']} but functions deploy to "
                             f"{region}: "
                             "Lambda pulls images from its own region")
    partition, account = caller_identity(clients["sts"])
    wanted = needs(partition, region or str(img["region"]), account,
                   [spec.name for spec in s.specs], vpc=bool(s.vpc))

    # -- IAM role: an existing one must trust Lambda and allow what the functions do
    role_arn = s.role_arn
    if not s.repository_only:
        if s.role_arn:
            name = _role_name(s.role_arn)
            try:
                role = call(iam, "get_role", RoleName=name)["Role"]
            except ClientError as exc:
                if error_code(exc) != "NoSuchEntity":
                    raise
                raise DeployError(f"IAM role {s.role_arn} does not exist: create it or omit --role "
                                  "to let deploy create one") from None
            check_role(iam, role, wanted)
            plan.steps.append(Step("iam-role", "noop", name, "exists (--role), allows what "
                                                             "the functions need"))
        else:
            name = s.role_name
            try:
                role = call(iam, "get_role", RoleName=name)["Role"]
                plan.steps.append(_own_role(iam, role, wanted, partition, vpc=bool(s.vpc)))
                role_arn = role["Arn"]
            except ClientError as exc:
                if error_code(exc) != "NoSuchEntity":
                    raise
                plan.steps.append(Step(
                    "iam-role", "create", name, "Lambda execution role",
                    {"RoleName": name, "AssumeRolePolicyDocument": json.dumps(LAMBDA_TRUST_POLICY),
                     "Description": "Stellaris functions (created by stellaris deploy)",
                     "Tags": [dict(MANAGED_TAG_ENTRY)],
                     "AttachPolicies": managed_policy_arns(partition, vpc=bool(s.vpc))},
                ))
                role_arn = f"arn:{partition}:iam::{account}:role/{name}"

    # -- ECR repository and the image
    repo = str(img["repo"])
    digest: str | None = None
    try:
        call(ecr, "describe_repositories", repositoryNames=[repo])
        plan.steps.append(Step("ecr-repository", "noop", repo, "exists"))
        image_id = {"imageTag": img["tag"]} if img["tag"] else {"imageDigest": img["digest"]}
        try:
            found = call(ecr, "describe_images", repositoryName=repo, imageIds=[image_id])
            details = found.get("imageDetails") or []
            digest = details[0].get("imageDigest") if details else None
            if not details and not s.repository_only:
                plan.problems.append(_missing_image(s.image_uri, repo))
        except ClientError as exc:
            if error_code(exc) != "ImageNotFoundException":
                raise
            if not s.repository_only:
                plan.problems.append(_missing_image(s.image_uri, repo))
    except ClientError as exc:
        if error_code(exc) != "RepositoryNotFoundException":
            raise
        plan.steps.append(Step("ecr-repository", "create", repo, "for the function image",
                               {"repositoryName": repo,
                                "imageScanningConfiguration": {"scanOnPush": True},
                                "tags": [dict(MANAGED_TAG_ENTRY)]}))
        if not s.repository_only:
            plan.problems.append(_missing_image(s.image_uri, repo))
    if s.repository_only:
        return plan

    # -- functions
    code = ImageCode(s.image_uri, digest)
    for spec in s.specs:
        steps, problems = plan_function(lam, spec, code, str(role_arn), managed_tags=True,
                                        vpc=s.vpc, architecture=s.architecture)
        plan.steps += steps
        plan.problems += problems
    return plan


def _own_role(iam: Any, role: dict[str, Any], wanted: list[tuple[str, str]], partition: str,
              vpc: bool) -> Step:
    """The role named ``<prefix>-lambda``: when deploy created it (tagged), attach the managed
    policies it lacks (VPC settings added since); whoever made it, it must then pass the check."""
    name = role["RoleName"]
    if MANAGED_TAG_ENTRY in (call(iam, "list_role_tags", RoleName=name).get("Tags") or []):
        found = call(iam, "list_attached_role_policies", RoleName=name).get("AttachedPolicies", [])
        attached = {p["PolicyArn"] for p in found}
        lacking = [arn for arn in managed_policy_arns(partition, vpc) if arn not in attached]
        if lacking:
            return Step("iam-role", "update", name,
                        "attach " + ", ".join(arn.rsplit("/", 1)[1] for arn in lacking),
                        {"RoleName": name, "AttachPolicies": lacking})
    check_role(iam, role, wanted)
    return Step("iam-role", "noop", name, "exists")


def _missing_image(uri: str, repo: str) -> str:
    return (f"image {uri} not found in ECR repository {repo}: build and push it first "
            "(docker buildx build --platform linux/amd64 --provenance=false "
            f"-f deploy/Dockerfile.function -t {uri} --push .); "
            "`stellaris deploy --repository-only` creates the repository")
