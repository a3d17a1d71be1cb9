"""Deploy plans: an ordered list of typed steps, computed from what exists, then executed.

A plan is built by reading the target (IAM, ECR, Lambda — AWS or the local runtime) and
comparing it with what is wanted; every step says what it would do (``create``, ``update``,
``put``, ``delete``) or that nothing is needed (``noop``). ``--dry-run`` prints the plan;
executing it makes exactly the calls listed. Deploying twice gives an all-``noop`` plan the
second time. Everything deploy creates on AWS carries the tag ``stellaris:managed=true``;
destroy removes only what carries it (the local runtime has no tags: there the functions of
the prefix are ours).
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import asdict, dataclass, field
from typing import Any

from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    EndpointConnectionError,
    NoCredentialsError,
    NoRegionError,
)

from deploy.package import code_sha256

MANAGED_TAG = ("stellaris:managed", "true")
LAMBDA_TRUST_POLICY = {
    "Version": "2012-10-17",
    "Statement": [{
        "Effect": "Allow",
        "Principal": {"Service": "lambda.amazonaws.com"},
        "Action": "sts:AssumeRole",
    }],
}
BASIC_EXECUTION = "arn:aws:iam::aws:policy/service-role/AWSLambdaBasicExecutionRole"
VPC_EXECUTION = "arn:aws:iam::aws:policy/service-role/AWSLambdaVPCAccessExecutionRole"
_ECR_URI = re.compile(
    r"^(?P<account>\d{12})\.dkr\.ecr\.(?P<region>[a-z0-9-]+)\.amazonaws\.com(?:\.cn)?/"
    r"(?P<repo>[a-z0-9][a-z0-9._/-]*?)(?::(?P<tag>[A-Za-z0-9_.-]+)|@(?P<digest>sha256:[0-9a-f]{64}))?$"
)
_DENIED = {
    "AccessDenied", "AccessDeniedException", "UnauthorizedOperation", "UnrecognizedClientException",
    "InvalidClientTokenId", "ExpiredToken", "ExpiredTokenException", "InvalidSignatureException",
    "SignatureDoesNotMatch", "AuthFailure",
}


class DeployError(RuntimeError):
    """A deploy problem, explained in one line (the CLI prints it and exits non-zero)."""

    exit_code = 2


class PermissionDenied(DeployError):
    exit_code = 3


class EndpointUnreachable(DeployError):
    exit_code = 4


class MissingImage(DeployError):
    exit_code = 5


def call(client: Any, operation: str, **params: Any) -> Any:
    """``client.<operation>(**params)`` with AWS's failures turned into one-line errors.

    Errors the planner handles itself (``ResourceNotFoundException`` …) pass through as
    ``ClientError``; credentials, permissions and connectivity become ``DeployError``s.
    """
    service = client.meta.service_model.service_name
    try:
        return getattr(client, operation)(**params)
    except ClientError as exc:
        err = exc.response.get("Error", {})
        code = err.get("Code", "")
        if code in _DENIED or exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode") == 403:
            msg = (err.get("Message") or "").strip().splitlines()[0] if err.get("Message") else code
            raise PermissionDenied(
                f"permission denied: {service}:{_action(operation)} ({code}): {msg}"
            ) from None
        raise
    except EndpointConnectionError as exc:
        raise EndpointUnreachable(f"{service} endpoint unreachable: {exc.kwargs.get('endpoint_url', exc)}") from None
    except NoCredentialsError:
        raise DeployError(
            "no AWS credentials found: configure a profile (AWS_PROFILE) or AWS_ACCESS_KEY_ID/"
            "AWS_SECRET_ACCESS_KEY"
        ) from None
    except NoRegionError:
        raise DeployError("no AWS region: pass --region or set AWS_DEFAULT_REGION") from None
    except BotoCoreError as exc:
        raise DeployError(f"{service}:{_action(operation)} failed: {exc}") from None


def _action(operation: str) -> str:
    """``get_role`` -> ``GetRole`` (the IAM action name in error messages)."""
    return "".join(p.capitalize() for p in operation.split("_"))


def _code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


# -- steps and plans -------------------------------------------------------------------------
@dataclass
class Step:
    """One resource and what to do about it.

    ``kind``: iam-role | ecr-repository | function | function-code | function-config |
    concurrency. ``action``: create | update | put | delete | noop. ``params`` are the
    arguments of the boto3 call the step makes (code bytes are left out of the JSON).
    """

    kind: str
    action: str
    target: str
    reason: str = ""
    params: dict[str, Any] = field(default_factory=dict)

    @property
    def changes(self) -> bool:
        return self.action != "noop"

    def line(self) -> str:
        sign = {"create": "+", "update": "~", "put": "~", "delete": "-", "noop": "="}.get(self.action, "?")
        reason = f"  ({self.reason})" if self.reason else ""
        return f"  {sign} {self.action:<7} {self.kind:<16} {self.target}{reason}"

    def to_json(self) -> dict[str, Any]:
        doc = asdict(self)
        doc["params"] = _public(self.params)
        return doc


def _public(params: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in params.items():
        if isinstance(v, bytes | bytearray):
            out[k] = f"<{len(v)} bytes, CodeSha256 {code_sha256(bytes(v))}>"
        elif isinstance(v, dict):
            out[k] = _public(v)
        else:
            out[k] = v
    return out


@dataclass
class Plan:
    target: str  # aws | local
    operation: str  # deploy | destroy
    steps: list[Step] = field(default_factory=list)
    region: str | None = None
    endpoint_url: str | None = None
    problems: list[str] = field(default_factory=list)  # blockers found while planning

    @property
    def changes(self) -> list[Step]:
        return [s for s in self.steps if s.changes]

    @property
    def is_noop(self) -> bool:
        return not self.changes

    def render(self) -> str:
        where = self.endpoint_url or f"AWS {self.region}"
        n = len(self.changes)
        head = f"{self.operation} plan for {self.target} ({where}): {n} change{'s' if n != 1 else ''}, " \
               f"{len(self.steps) - n} unchanged"
        lines = [head, *(s.line() for s in self.steps)]
        if not self.steps:
            lines.append("  (nothing to do)")
        lines += [f"  ! {p}" for p in self.problems]
        return "\n".join(lines)

    def to_json(self) -> dict[str, Any]:
        return {
            "target": self.target, "operation": self.operation, "region": self.region,
            "endpoint_url": self.endpoint_url, "changes": len(self.changes),
            "steps": [s.to_json() for s in self.steps], "problems": list(self.problems),
        }

    def dumps(self) -> str:
        return json.dumps(self.to_json(), indent=2, default=str)


# -- what a function should look like ---------------------------------------------------------
@dataclass(frozen=True)
class ZipCode:
    """Function code as a zip (the local runtime): handler and runtime in the configuration."""

    data: bytes
    runtime: str = "python3.11"

    @property
    def sha256(self) -> str:
        return code_sha256(self.data)


@dataclass(frozen=True)
class ImageCode:
    """Function code as a container image (AWS): the handler is the image command."""

    uri: str
    digest: str | None = None  # the digest the tag resolves to in ECR, when known


def _function_config(spec: Any, code: ZipCode | ImageCode, role: str,
                     vpc: dict[str, list[str]] | None) -> dict[str, Any]:
    cfg: dict[str, Any] = {
        "Role": role,
        "MemorySize": spec.memory_mb,
        "Timeout": spec.timeout_s,
        "Environment": {"Variables": dict(spec.environment)},
    }
    if isinstance(code, ZipCode):
        cfg["Handler"] = spec.handler
        cfg["Runtime"] = code.runtime
    else:
        cfg["ImageConfig"] = {"Command": [spec.handler]}
    if vpc:
        cfg["VpcConfig"] = {"SubnetIds": list(vpc.get("SubnetIds", [])),
                            "SecurityGroupIds": list(vpc.get("SecurityGroupIds", []))}
    return cfg


def _config_diff(current: dict[str, Any], want: dict[str, Any]) -> list[str]:
    """Names of the configuration fields that differ."""
    have: dict[str, Any] = {
        "Role": current.get("Role"),
        "MemorySize": current.get("MemorySize"),
        "Timeout": current.get("Timeout"),
        "Environment": {"Variables": (current.get("Environment") or {}).get("Variables", {}) or {}},
        "Handler": current.get("Handler"),
        "Runtime": current.get("Runtime"),
        "ImageConfig": {"Command": ((current.get("ImageConfigResponse") or {}).get("ImageConfig") or {})
                        .get("Command")},
    }
    vpc = current.get("VpcConfig") or {}
    have["VpcConfig"] = {"SubnetIds": sorted(vpc.get("SubnetIds") or []),
                         "SecurityGroupIds": sorted(vpc.get("SecurityGroupIds") or [])}
    diff = []
    for key, value in want.items():
        if key == "VpcConfig":
            value = {k: sorted(v) for k, v in value.items()}
        if have.get(key) != value:
            diff.append(key)
    return diff


def plan_function(lam: Any, spec: Any, code: ZipCode | ImageCode, role: str, *,
                  managed_tags: bool, vpc: dict[str, list[str]] | None = None,
                  architecture: str | None = None) -> tuple[list[Step], list[str]]:
    """Steps that make one function match ``spec`` (and problems that block them)."""
    want = _function_config(spec, code, role, vpc)
    try:
        doc = call(lam, "get_function", FunctionName=spec.name)
    except ClientError as exc:
        if _code(exc) != "ResourceNotFoundException":
            raise DeployError(f"lambda:GetFunction {spec.name}: {exc}") from None
        doc = None
    steps: list[Step] = []
    if doc is None:
        params: dict[str, Any] = {"FunctionName": spec.name, **want}
        if isinstance(code, ZipCode):
            params.update(Code={"ZipFile": code.data}, PackageType="Zip")
            what = f"zip {code.sha256[:12]}…"
        else:
            params.update(Code={"ImageUri": code.uri}, PackageType="Image")
            what = code.uri
        if architecture:
            params["Architectures"] = [architecture]
        if managed_tags:
            params["Tags"] = {MANAGED_TAG[0]: MANAGED_TAG[1]}
        steps.append(Step("function", "create", spec.name,
                          f"{what}, {spec.memory_mb} MB, {spec.timeout_s} s", params))
        if spec.reserved_concurrency is not None:
            steps.append(Step("concurrency", "put", spec.name, f"reserved {spec.reserved_concurrency}",
                              {"FunctionName": spec.name,
                               "ReservedConcurrentExecutions": spec.reserved_concurrency}))
        return steps, []

    current = doc["Configuration"]
    problems: list[str] = []
    if managed_tags and (doc.get("Tags") or {}).get(MANAGED_TAG[0]) != MANAGED_TAG[1]:
        problems.append(f"function {spec.name} exists but is not managed by stellaris "
                        f"(no tag {MANAGED_TAG[0]}={MANAGED_TAG[1]}): refusing to change it; "
                        "pick another --prefix or delete it")
        return [Step("function", "noop", spec.name, "not managed by stellaris")], problems
    # -- code
    if isinstance(code, ZipCode):
        if current.get("PackageType", "Zip") != "Zip":
            problems.append(f"function {spec.name} is an image function; cannot switch to a zip")
        elif current.get("CodeSha256") != code.sha256:
            steps.append(Step("function-code", "update", spec.name,
                              f"CodeSha256 {current.get('CodeSha256', '?')[:12]}… -> {code.sha256[:12]}…",
                              {"FunctionName": spec.name, "ZipFile": code.data}))
    else:
        if current.get("PackageType") != "Image":
            problems.append(f"function {spec.name} is a zip function; cannot switch to an image "
                            "(destroy it first)")
        else:
            have_uri = (doc.get("Code") or {}).get("ImageUri")
            resolved = (doc.get("Code") or {}).get("ResolvedImageUri") or ""
            reason = ""
            if have_uri != code.uri:
                reason = f"image {have_uri} -> {code.uri}"
            elif code.digest and "@" in resolved and resolved.rsplit("@", 1)[1] != code.digest:
                reason = f"tag now points at {code.digest[:19]}…"
            if reason:
                steps.append(Step("function-code", "update", spec.name, reason,
                                  {"FunctionName": spec.name, "ImageUri": code.uri}))
    # -- configuration
    diff = _config_diff(current, want)
    if diff:
        steps.append(Step("function-config", "update", spec.name, "changed: " + ", ".join(diff),
                          {"FunctionName": spec.name, **want}))
    # -- reserved concurrency
    have_rc = (doc.get("Concurrency") or {}).get("ReservedConcurrentExecutions")
    if spec.reserved_concurrency is not None and have_rc != spec.reserved_concurrency:
        steps.append(Step("concurrency", "put", spec.name, f"reserved {have_rc} -> {spec.reserved_concurrency}",
                          {"FunctionName": spec.name,
                           "ReservedConcurrentExecutions": spec.reserved_concurrency}))
    elif spec.reserved_concurrency is None and have_rc is not None:
        steps.append(Step("concurrency", "delete", spec.name, f"reserved {have_rc} -> unreserved",
                          {"FunctionName": spec.name}))
    if not steps and not problems:
        steps.append(Step("function", "noop", spec.name, "up to date"))
    return steps, problems


# -- local target ---------------------------------------------------------------------------
def plan_local(lam: Any, specs: list[Any], zip_bytes: bytes, role: str,
               endpoint_url: str | None = None) -> Plan:
    """The functions as zips on the local runtime (no IAM, no ECR, no tags)."""
    plan = Plan("local", "deploy", endpoint_url=endpoint_url)
    code = ZipCode(zip_bytes)
    for spec in specs:
        steps, problems = plan_function(lam, spec, code, role, managed_tags=False)
        plan.steps += steps
        plan.problems += problems
    return plan


# -- AWS target -----------------------------------------------------------------------------
def parse_image_uri(uri: str) -> dict[str, str | None]:
    """``<acct>.dkr.ecr.<region>.amazonaws.com/<repo>[:tag|@digest]`` -> its parts."""
    m = _ECR_URI.match(uri)
    if not m:
        raise DeployError(
            f"--image-uri {uri!r} is not an ECR image URI (<account>.dkr.ecr.<region>.amazonaws.com/"
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
        raise DeployError(f"--role {arn!r} is not an IAM role ARN (arn:aws:iam::<account>:role/<name>)")
    return arn.rsplit("/", 1)[1]


def plan_aws(clients: dict[str, Any], s: AwsSettings, region: str | None) -> Plan:
    """IAM role, ECR repository (and image check), then each function."""
    iam, ecr, lam = clients["iam"], clients["ecr"], clients["lambda"]
    plan = Plan("aws", "deploy", region=region)
    img = parse_image_uri(s.image_uri)
    if region and img["region"] != region:
        plan.problems.append(f"image is in region {img['region']} but functions deploy to {region}: "
                             "Lambda pulls images from its own region")

    # -- IAM role
    role_arn = s.role_arn
    if not s.repository_only:
        if s.role_arn:
            name = _role_name(s.role_arn)
            try:
                call(iam, "get_role", RoleName=name)
                plan.steps.append(Step("iam-role", "noop", name, "exists (--role)"))
            except ClientError as exc:
                if _code(exc) != "NoSuchEntity":
                    raise
                raise DeployError(f"IAM role {s.role_arn} does not exist: create it or omit --role "
                                  "to let deploy create one") from None
        else:
            name = s.role_name
            try:
                role_arn = call(iam, "get_role", RoleName=name)["Role"]["Arn"]
                plan.steps.append(Step("iam-role", "noop", name, "exists"))
            except ClientError as exc:
                if _code(exc) != "NoSuchEntity":
                    raise
                policies = [BASIC_EXECUTION] + ([VPC_EXECUTION] if s.vpc else [])
                plan.steps.append(Step(
                    "iam-role", "create", name, "Lambda execution role",
                    {"RoleName": name, "AssumeRolePolicyDocument": json.dumps(LAMBDA_TRUST_POLICY),
                     "Description": "Stellaris functions (created by stellaris deploy)",
                     "Tags": [{"Key": MANAGED_TAG[0], "Value": MANAGED_TAG[1]}],
                     "AttachPolicies": policies},
                ))
                role_arn = f"arn:aws:iam::{img['account']}:role/{name}"

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
            if _code(exc) != "ImageNotFoundException":
                raise
            if not s.repository_only:
                plan.problems.append(_missing_image(s.image_uri, repo))
    except ClientError as exc:
        if _code(exc) != "RepositoryNotFoundException":
            raise
        plan.steps.append(Step("ecr-repository", "create", repo, "for the function image",
                               {"repositoryName": repo, "imageScanningConfiguration": {"scanOnPush": True},
                                "tags": [{"Key": MANAGED_TAG[0], "Value": MANAGED_TAG[1]}]}))
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


def _missing_image(uri: str, repo: str) -> str:
    return (f"image {uri} not found in ECR repository {repo}: build and push it first "
            f"(docker build -f deploy/Dockerfile.function -t {uri} . && docker push {uri}); "
            "`stellaris deploy --repository-only` creates the repository")


# -- destroy ----------------------------------------------------------------------------------
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
                    plan.steps.append(Step("function", "noop", name, "not managed by stellaris: kept"))
                    continue
            plan.steps.append(Step("function", "delete", name, "", {"FunctionName": name}))
        marker = page.get("NextMarker")
        if not marker:
            break
    if target == "aws" and role_name:
        iam = clients["iam"]
        try:
            tags = call(iam, "list_role_tags", RoleName=role_name).get("Tags") or []
            if {"Key": MANAGED_TAG[0], "Value": MANAGED_TAG[1]} in tags:
                attached = call(iam, "list_attached_role_policies", RoleName=role_name)
                arns = [p["PolicyArn"] for p in attached.get("AttachedPolicies", [])]
                plan.steps.append(Step("iam-role", "delete", role_name, "",
                                       {"RoleName": role_name, "DetachPolicies": arns}))
            else:
                plan.steps.append(Step("iam-role", "noop", role_name, "not managed by stellaris: kept"))
        except ClientError as exc:
            if _code(exc) != "NoSuchEntity":
                raise
    if target == "aws" and repository:
        ecr = clients["ecr"]
        try:
            arn = call(ecr, "describe_repositories", repositoryNames=[repository])["repositories"][0]["repositoryArn"]
            tags = call(ecr, "list_tags_for_resource", resourceArn=arn).get("tags") or []
            if {"Key": MANAGED_TAG[0], "Value": MANAGED_TAG[1]} in tags:
                plan.steps.append(Step("ecr-repository", "delete", repository, "with its images",
                                       {"repositoryName": repository, "force": True}))
            else:
                plan.steps.append(Step("ecr-repository", "noop", repository, "not managed by stellaris: kept"))
        except ClientError as exc:
            if _code(exc) != "RepositoryNotFoundException":
                raise
    return plan


# -- execution --------------------------------------------------------------------------------
def wait_active(lam: Any, name: str, timeout_s: float = 120) -> None:
    """Wait until a function is Active and its last update finished (AWS takes seconds)."""
    deadline = time.monotonic() + timeout_s
    delay = 0.05
    while True:
        cfg = call(lam, "get_function_configuration", FunctionName=name)
        state, update = cfg.get("State", "Active"), cfg.get("LastUpdateStatus", "Successful")
        if state == "Failed" or update == "Failed":
            reason = cfg.get("StateReason") or cfg.get("LastUpdateStatusReason") or ""
            raise DeployError(f"function {name} failed to deploy: {reason}")
        if state == "Active" and update != "InProgress":
            return
        if time.monotonic() > deadline:
            raise DeployError(f"function {name} did not become Active in {timeout_s:.0f} s")
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
            if _code(exc) == "InvalidParameterValueException" and "cannot be assumed" in msg \
                    and time.monotonic() < deadline:
                time.sleep(2.0)
                continue
            if _code(exc) == "ResourceConflictException":
                raise DeployError(f"function {params['FunctionName']} appeared meanwhile: plan again") from None
            raise DeployError(f"lambda:CreateFunction {params['FunctionName']}: "
                              f"{exc.response.get('Error', {}).get('Message', exc)}") from None


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
            wait_active(clients["lambda"], step.target)
        elif step.kind == "function" and step.action == "delete":
            call(clients["lambda"], "delete_function", **p)
        elif step.kind == "function-code":
            _update(clients["lambda"], "update_function_code", p)
        elif step.kind == "function-config":
            _update(clients["lambda"], "update_function_configuration", p)
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


def _update(lam: Any, operation: str, params: dict[str, Any]) -> None:
    name = params["FunctionName"]
    wait_active(lam, name)  # AWS refuses a second update while one is in progress (409)
    try:
        call(lam, operation, **params)
    except ClientError as exc:
        raise DeployError(f"lambda:{_action(operation)} {name}: "
                          f"{exc.response.get('Error', {}).get('Message', exc)}") from None
    wait_active(lam, name)
