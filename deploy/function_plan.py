"""What one function should look like (its code and configuration), and the steps that make
an existing function match it; the local target is these steps alone (no IAM, ECR or tags)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from botocore.exceptions import ClientError

from deploy.aws import MANAGED_TAG, call, error_code
from deploy.errors import DeployError
from deploy.package import code_sha256
from deploy.plan import Plan, Step


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
        "ImageConfig": {"Command": ((current.get("ImageConfigResponse") or {})
                                    .get("ImageConfig") or {}).get("Command")},
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


def create_params(spec: Any, code: ZipCode | ImageCode, role: str, *,
                  vpc: dict[str, list[str]] | None = None, architecture: str | None = None,
                  managed_tags: bool = False) -> dict[str, Any]:
    """The CreateFunction call for ``spec`` (deploy/export.py writes the template from it)."""
    params: dict[str, Any] = {"FunctionName": spec.name, **_function_config(spec, code, role, vpc)}
    if isinstance(code, ZipCode):
        params.update(Code={"ZipFile": code.data}, PackageType="Zip")
    else:
        params.update(Code={"ImageUri": code.uri}, PackageType="Image")
    if architecture:
        params["Architectures"] = [architecture]
    if managed_tags:
        params["Tags"] = {MANAGED_TAG[0]: MANAGED_TAG[1]}
    return params


def plan_function(lam: Any, spec: Any, code: ZipCode | ImageCode, role: str, *,
                  managed_tags: bool, vpc: dict[str, list[str]] | None = None,
                  architecture: str | None = None) -> tuple[list[Step], list[str]]:
    """Steps that make one function match ``spec`` (and problems that block them)."""
    want = _function_config(spec, code, role, vpc)
    try:
        doc = call(lam, "get_function", FunctionName=spec.name)
    except ClientError as exc:
        if error_code(exc) != "ResourceNotFoundException":
            raise DeployError(f"lambda:GetFunction {spec.name}: {exc}") from None
        doc = None
    steps: list[Step] = []
    if doc is None:
        params = create_params(spec, code, role, vpc=vpc, architecture=architecture,
                               managed_tags=managed_tags)
        what = f"zip {code.sha256[:12]}…" if isinstance(code, ZipCode) else code.uri
        steps.append(Step("function", "create", spec.name,
                          f"{what}, {spec.memory_mb} MB, {spec.timeout_s} s", params))
        if spec.reserved_concurrency is not None:
            steps.append(Step("concurrency", "put", spec.name,
                              f"reserved {spec.reserved_concurrency}",
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
                              f"CodeSha256 {current.get('CodeSha256', '?')[:12]}… -> "
                              f"{code.sha256[:12]}…",
                              {"FunctionName": spec.name, "ZipFile": code.data}))
    else:
        if current.get("PackageType") != "Image":
            problems.append(f"function {spec.name} is a zip function; cannot switch to an image "
                            "(destroy it first)")
        else:
            have_uri = (doc.get("Code") or {}).get("ImageUri")
            resolved = (doc.get("Code") or {}).get("ResolvedImageUri") or ""
            reasons = []
            if have_uri != code.uri:
                reasons.append(f"image {have_uri} -> {code.uri}")
            elif code.digest and "@" in resolved and resolved.rsplit("@", 1)[1] != code.digest:
                reasons.append(f"tag now points at {code.digest[:19]}…")
            # The architecture is part of the code: only UpdateFunctionCode changes it.
            have_arch = (current.get("Architectures") or ["x86_64"])[0]
            if architecture and have_arch != architecture:
                reasons.append(f"architecture {have_arch} -> {architecture}")
            if reasons:
                params = {"FunctionName": spec.name, "ImageUri": code.uri}
                if architecture:
                    params["Architectures"] = [architecture]
                steps.append(Step("function-code", "update", spec.name, "; ".join(reasons),
                                  params))
    # -- configuration
    diff = _config_diff(current, want)
    if diff:
        steps.append(Step("function-config", "update", spec.name, "changed: " + ", ".join(diff),
                          {"FunctionName": spec.name, **want}))
    # -- reserved concurrency
    have_rc = (doc.get("Concurrency") or {}).get("ReservedConcurrentExecutions")
    if spec.reserved_concurrency is not None and have_rc != spec.reserved_concurrency:
        steps.append(Step("concurrency", "put", spec.name,
                          f"reserved {have_rc} -> {spec.reserved_concurrency}",
                          {"FunctionName": spec.name,
                           "ReservedConcurrentExecutions": spec.reserved_concurrency}))
    elif spec.reserved_concurrency is None and have_rc is not None:
        steps.append(Step("concurrency", "delete", spec.name, f"reserved {have_rc} -> unreserved",
                          {"FunctionName": spec.name}))
    if not steps and not problems:
        # An Inactive function (idle for weeks) is reactivated by its next invocation.
        state = current.get("State", "Active")
        steps.append(Step("function", "noop", spec.name,
                          "up to date" + (f" ({state})" if state != "Active" else "")))
    return steps, problems


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
