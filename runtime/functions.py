"""The function registry: configurations as Lambda describes them, code folders on disk.

A ``FunctionConfig`` is an immutable snapshot. Every code or configuration update makes a
new snapshot with a higher ``generation``; execution environments keep the snapshot they
were started with, which is how "an update means new environments" is implemented.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import dataclasses
import hashlib
import re
import shutil
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from runtime import codezip
from runtime.errors import (
    InvalidParameterValueException,
    PreconditionFailedException,
    ResourceConflictException,
    ResourceNotFoundException,
    ValidationException,
)

SUPPORTED_RUNTIMES = ("python3.9", "python3.10", "python3.11", "python3.12", "python3.13", "python3.14")
DEPRECATED_RUNTIMES = ("python2.7", "python3.6", "python3.7", "python3.8")
RESERVED_ENV_KEYS = frozenset({
    "_HANDLER", "_X_AMZN_TRACE_ID", "AWS_DEFAULT_REGION", "AWS_REGION", "AWS_EXECUTION_ENV",
    "AWS_LAMBDA_FUNCTION_NAME", "AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "AWS_LAMBDA_FUNCTION_VERSION",
    "AWS_LAMBDA_INITIALIZATION_TYPE", "AWS_LAMBDA_LOG_GROUP_NAME", "AWS_LAMBDA_LOG_STREAM_NAME",
    "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_LAMBDA_RUNTIME_API",
    "LAMBDA_TASK_ROOT", "LAMBDA_RUNTIME_DIR",
})
_NAME_RE = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
_ROLE_RE = re.compile(r"^arn:(aws[a-zA-Z-]*)?:iam::\d{12}:role/?[a-zA-Z_0-9+=,.@\-_/]+$")
_ARN_RE = re.compile(
    r"^(?:arn:aws[a-zA-Z-]*:lambda:[a-z0-9-]+:)?(?:\d{12}:)?(?:function:)?"
    r"([a-zA-Z0-9_-]+)(?::(\$LATEST|[a-zA-Z0-9_-]+))?$"
)
ENV_VARS_MAX_BYTES = 4096
# JSON types of the request members we read (botocore checks these client-side; a raw HTTP
# client may send anything, and a wrong type must be a 400, never a server error).
_MEMBER_TYPES: dict[str, tuple[type, ...]] = {
    "FunctionName": (str,), "Runtime": (str,), "Role": (str,), "Handler": (str,),
    "Description": (str,), "Timeout": (int,), "MemorySize": (int,), "Environment": (dict,),
    "Code": (dict,), "ZipFile": (str,), "Architectures": (list,), "PackageType": (str,),
    "RevisionId": (str,), "Publish": (bool,), "DryRun": (bool,),
}
_ARCHITECTURES = ("x86_64", "arm64")


def check_member_types(body: dict[str, Any], members: tuple[str, ...] | None = None) -> None:
    """400 ValidationException for a member of the wrong JSON type (``bool`` is not an int)."""
    for key in members or tuple(_MEMBER_TYPES):
        if key not in body or body[key] is None:
            continue
        value, types = body[key], _MEMBER_TYPES[key]
        if not isinstance(value, types) or (isinstance(value, bool) and bool not in types):
            raise _validation(value, key[:1].lower() + key[1:],
                              f"Member must be of type {types[0].__name__}")
    env = body.get("Environment")
    if isinstance(env, dict) and env.get("Variables") is not None:
        variables = env["Variables"]
        if not isinstance(variables, dict) or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in variables.items()):
            raise InvalidParameterValueException("Environment variables must be strings.")
    arch = body.get("Architectures")
    if arch is not None and (len(arch) != 1 or arch[0] not in _ARCHITECTURES):
        raise _validation(arch, "architectures",
                          "Member must have length less than or equal to 1, "
                          "Member must satisfy enum value set: [x86_64, arm64]")


def _now() -> str:
    t = time.time()
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t)) + f".{int(t % 1 * 1000):03d}+0000"


@dataclass(frozen=True)
class FunctionConfig:
    """One generation of a function: what an execution environment is started from."""

    name: str
    arn: str
    runtime: str
    role: str
    handler: str
    code_dir: Path
    zip_path: Path
    code_sha256: str
    code_size: int
    description: str = ""
    timeout: int = 3
    memory_mb: int = 128
    env_vars: dict[str, str] = field(default_factory=dict)
    architectures: tuple[str, ...] = ("x86_64",)
    revision_id: str = ""
    last_modified: str = ""
    generation: int = 0

    def describe(self, region: str, state: str = "Active", update: str = "Successful") -> dict[str, Any]:
        doc: dict[str, Any] = {
            "FunctionName": self.name,
            "FunctionArn": self.arn,
            "Runtime": self.runtime,
            "Role": self.role,
            "Handler": self.handler,
            "CodeSize": self.code_size,
            "Description": self.description,
            "Timeout": self.timeout,
            "MemorySize": self.memory_mb,
            "LastModified": self.last_modified,
            "CodeSha256": self.code_sha256,
            "Version": "$LATEST",
            "TracingConfig": {"Mode": "PassThrough"},
            "RevisionId": self.revision_id,
            "PackageType": "Zip",
            "Architectures": list(self.architectures),
            "EphemeralStorage": {"Size": 512},
            "SnapStart": {"ApplyOn": "None", "OptimizationStatus": "Off"},
            "LoggingConfig": {"LogFormat": "Text", "LogGroup": f"/aws/lambda/{self.name}"},
            "State": state,
            "LastUpdateStatus": update,
        }
        if self.env_vars:
            doc["Environment"] = {"Variables": dict(self.env_vars)}
        if state == "Pending":
            doc["StateReason"] = "The function is being created."
            doc["StateReasonCode"] = "Creating"
        if update == "InProgress":
            doc["LastUpdateStatusReason"] = "The function is being created."
            doc["LastUpdateStatusReasonCode"] = "Creating"
        return doc


@dataclass
class FunctionEntry:
    """A function's current generation plus its settings that do not need new environments."""

    config: FunctionConfig
    reserved_concurrency: int | None = None
    max_retry_attempts: int = 2
    max_event_age_s: int = 21600


def _validation(value: Any, member: str, constraint: str) -> ValidationException:
    return ValidationException(
        f"1 validation error detected: Value '{value}' at '{member}' failed to satisfy "
        f"constraint: {constraint}"
    )


class Registry:
    """In-memory function registry; code lives under ``state_dir/functions``."""

    def __init__(self, state_dir: Path, region: str, account_id: str) -> None:
        self.root = state_dir / "functions"
        self.root.mkdir(parents=True, exist_ok=True)
        self.region = region
        self.account_id = account_id
        self.entries: dict[str, FunctionEntry] = {}

    # -- names ---------------------------------------------------------------------------
    def arn(self, name: str, qualifier: str | None = None) -> str:
        base = f"arn:aws:lambda:{self.region}:{self.account_id}:function:{name}"
        return f"{base}:{qualifier}" if qualifier else base

    @staticmethod
    def check_name(name: str) -> None:
        """400 for anything that cannot be a function name (queries of extras routes)."""
        if not _NAME_RE.match(name):
            raise _validation(name, "functionName",
                              "Member must satisfy regular expression pattern: [a-zA-Z0-9-_]{1,64}")

    def resolve(self, function_name: str, qualifier: str | None = None) -> FunctionEntry:
        """Find a function by name, ``name:qualifier``, partial or full ARN."""
        match = _ARN_RE.match(function_name)
        if not match:
            raise _validation(function_name, "functionName",
                              "Member must satisfy regular expression pattern: "
                              "(arn:(aws[a-zA-Z-]*)?:lambda:)?([a-z]{2}(-gov)?-[a-z]+-\\d{1}:)?"
                              "(\\d{12}:)?(function:)?([a-zA-Z0-9-_\\.]+)(:(\\$LATEST|[a-zA-Z0-9-_]+))?")
        name, inline_q = match.group(1), match.group(2)
        q = qualifier or inline_q
        entry = self.entries.get(name)
        # Only $LATEST exists here (no published versions or aliases).
        if entry is None or (q is not None and q != "$LATEST"):
            raise ResourceNotFoundException(f"Function not found: {self.arn(name, q)}")
        return entry

    # -- validation ----------------------------------------------------------------------
    @staticmethod
    def _check_settings(body: dict[str, Any], creating: bool) -> None:
        check_member_types(body)
        runtime = body.get("Runtime")
        if runtime is not None or creating:
            if runtime in DEPRECATED_RUNTIMES:
                raise InvalidParameterValueException(
                    f"The runtime parameter of {runtime} is no longer supported for creating or "
                    "updating AWS Lambda functions. We recommend you use a supported runtime "
                    "while creating or updating functions."
                )
            if runtime not in SUPPORTED_RUNTIMES:
                raise InvalidParameterValueException(
                    f"Value {runtime} at 'runtime' failed to satisfy constraint: Member must "
                    f"satisfy enum value set: [{', '.join(SUPPORTED_RUNTIMES)}] or be a valid ARN"
                )
        if "Role" in body or creating:
            role = body.get("Role")
            if not isinstance(role, str) or not _ROLE_RE.match(role):
                raise _validation(role, "role", "Member must satisfy regular expression pattern: "
                                  "arn:(aws[a-zA-Z-]*)?:iam::\\d{12}:role/?[a-zA-Z_0-9+=,.@\\-_/]+")
        if "Handler" in body or creating:
            handler = body.get("Handler")
            if not isinstance(handler, str) or not handler or len(handler) > 128 or re.search(r"\s", handler):
                raise _validation(handler, "handler", "Member must satisfy regular expression pattern: [^\\s]+")
        timeout = body.get("Timeout")
        if timeout is not None and not (isinstance(timeout, int) and 1 <= timeout <= 900):
            raise _validation(timeout, "timeout", "Member must have value less than or equal to 900")
        memory = body.get("MemorySize")
        if memory is not None and not (isinstance(memory, int) and 128 <= memory <= 10240):
            raise _validation(memory, "memorySize",
                              "Member must have value less than or equal to 10240 and greater than or equal to 128")
        env = (body.get("Environment") or {}).get("Variables")
        if env is not None:
            if not isinstance(env, dict) or not all(isinstance(v, str) for v in env.values()):
                raise InvalidParameterValueException("Environment variables must be strings.")
            reserved = sorted(k for k in env if k in RESERVED_ENV_KEYS)
            if reserved:
                raise InvalidParameterValueException(
                    "Lambda was unable to configure your environment variables because the "
                    "environment variables you have provided contains reserved keys that are "
                    f"currently not supported for modification. Reserved keys used in this request: {','.join(reserved)}"
                )
            size = sum(len(k.encode()) + len(v.encode()) for k, v in env.items())
            if size > ENV_VARS_MAX_BYTES:
                raise InvalidParameterValueException(
                    "Lambda was unable to configure your environment variables because the "
                    "environment variables you have provided exceeded the 4KB limit. "
                    f"String measured: {size}"
                )

    async def _store_code(self, name: str, code: dict[str, Any]) -> tuple[Path, Path, str, int]:
        if not isinstance(code, dict) or not isinstance(code.get("ZipFile"), str):
            raise InvalidParameterValueException(
                "Please provide a source for function code (ZipFile). S3 and image code "
                "locations are not supported by the local runtime."
            )
        try:
            zip_bytes = base64.b64decode(code["ZipFile"], validate=True)
        except (ValueError, TypeError) as exc:
            raise InvalidParameterValueException("Could not decode ZipFile: not base64.") from exc
        revision = uuid.uuid4().hex[:12]
        code_dir = self.root / name / revision
        # Unzipping can take a while for big packages: keep it off the event loop.
        try:
            await asyncio.to_thread(codezip.unpack, zip_bytes, code_dir)
        except BaseException:
            # A rejected archive leaves nothing behind: not even the function's (empty) folder.
            with contextlib.suppress(OSError):
                (self.root / name).rmdir()
            raise
        zip_path = self.root / name / f"{revision}.zip"
        zip_path.write_bytes(zip_bytes)
        sha = base64.b64encode(hashlib.sha256(zip_bytes).digest()).decode()
        return code_dir, zip_path, sha, len(zip_bytes)

    # -- operations ----------------------------------------------------------------------
    async def create(self, body: dict[str, Any]) -> FunctionEntry:
        name = body.get("FunctionName")
        if not isinstance(name, str) or not _NAME_RE.match(name):
            raise InvalidParameterValueException(f"Invalid function name: {name!r}")
        if name in self.entries:
            raise ResourceConflictException(f"Function already exist: {name}")
        if body.get("PackageType", "Zip") != "Zip":
            raise InvalidParameterValueException("Only PackageType Zip is supported by the local runtime.")
        self._check_settings(body, creating=True)
        code_dir, zip_path, sha, size = await self._store_code(name, body.get("Code"))
        if name in self.entries:  # a concurrent create won while we unzipped
            shutil.rmtree(code_dir, ignore_errors=True)
            raise ResourceConflictException(f"Function already exist: {name}")
        config = FunctionConfig(
            name=name, arn=self.arn(name), runtime=body["Runtime"], role=body["Role"],
            handler=body["Handler"], code_dir=code_dir, zip_path=zip_path, code_sha256=sha,
            code_size=size, description=body.get("Description", ""),
            timeout=body.get("Timeout", 3), memory_mb=body.get("MemorySize", 128),
            env_vars=dict((body.get("Environment") or {}).get("Variables") or {}),
            architectures=tuple(body.get("Architectures") or ("x86_64",)),
            revision_id=str(uuid.uuid4()), last_modified=_now(),
        )
        entry = FunctionEntry(config)
        self.entries[name] = entry
        return entry

    def _check_revision(self, entry: FunctionEntry, body: dict[str, Any]) -> None:
        rev = body.get("RevisionId")
        if rev is not None and rev != entry.config.revision_id:
            raise PreconditionFailedException(
                "The Revision Id provided does not match the latest Revision Id. "
                "Call the GetFunction/GetAlias API to retrieve the latest Revision Id"
            )

    async def update_code(self, entry: FunctionEntry, body: dict[str, Any]) -> FunctionConfig:
        check_member_types(body, ("ZipFile", "RevisionId", "Publish", "DryRun", "Architectures"))
        self._check_revision(entry, body)
        name = entry.config.name
        code_dir, zip_path, sha, size = await self._store_code(name, body)
        entry.config = dataclasses.replace(
            entry.config, code_dir=code_dir, zip_path=zip_path, code_sha256=sha, code_size=size,
            revision_id=str(uuid.uuid4()), last_modified=_now(),
            generation=entry.config.generation + 1,
        )
        return entry.config

    def update_config(self, entry: FunctionEntry, body: dict[str, Any]) -> FunctionConfig:
        self._check_revision(entry, body)
        self._check_settings(body, creating=False)
        changes: dict[str, Any] = {}
        for key, attr in (("Runtime", "runtime"), ("Role", "role"), ("Handler", "handler"),
                          ("Description", "description"), ("Timeout", "timeout"),
                          ("MemorySize", "memory_mb")):
            if key in body:
                changes[attr] = body[key]
        if "Environment" in body:
            changes["env_vars"] = dict((body["Environment"] or {}).get("Variables") or {})
        entry.config = dataclasses.replace(
            entry.config, **changes, revision_id=str(uuid.uuid4()), last_modified=_now(),
            generation=entry.config.generation + 1,
        )
        return entry.config

    def delete(self, entry: FunctionEntry) -> None:
        self.entries.pop(entry.config.name, None)

    def remove_code(self, name: str) -> None:
        shutil.rmtree(self.root / name, ignore_errors=True)

    def list(self, marker: str | None, max_items: int | None) -> tuple[list[FunctionEntry], str | None]:
        names = sorted(self.entries)
        start = 0
        if marker:
            try:
                start = int(base64.urlsafe_b64decode(marker.encode()).decode())
            except ValueError as exc:
                raise InvalidParameterValueException("Invalid Marker") from exc
        limit = min(max_items or 50, 50)  # ListFunctions returns at most 50 per page
        page = names[start:start + limit]
        nxt = start + limit
        next_marker = base64.urlsafe_b64encode(str(nxt).encode()).decode() if nxt < len(names) else None
        return [self.entries[n] for n in page], next_marker
