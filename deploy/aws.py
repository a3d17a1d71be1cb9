"""The boto3 boundary: clients for a target, and calls whose AWS failures become one-line
``DeployError``s (credentials, permissions, connectivity)."""

from __future__ import annotations

from typing import Any

from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    EndpointConnectionError,
    NoCredentialsError,
    NoRegionError,
)

from deploy.errors import DeployError, EndpointUnreachable, PermissionDenied

# Everything deploy creates on AWS carries this tag; destroy removes only what carries it.
MANAGED_TAG = ("stellaris:managed", "true")
MANAGED_TAG_ENTRY = {"Key": MANAGED_TAG[0], "Value": MANAGED_TAG[1]}  # as IAM and ECR list tags
_DENIED = {
    "AccessDenied", "AccessDeniedException", "UnauthorizedOperation", "UnrecognizedClientException",
    "InvalidClientTokenId", "ExpiredToken", "ExpiredTokenException", "InvalidSignatureException",
    "SignatureDoesNotMatch", "AuthFailure",
}


def make_clients(target: str, region: str | None, endpoint_url: str | None) -> dict[str, Any]:
    """``{"lambda": …}`` for the local runtime at ``endpoint_url``; STS, IAM, ECR and Lambda on AWS."""
    import boto3
    from botocore.config import Config

    cfg = Config(connect_timeout=3, read_timeout=120,
                 retries={"total_max_attempts": 3, "mode": "standard"})
    if target == "local":
        session = boto3.session.Session()
        kw: dict[str, Any] = {}
        if session.get_credentials() is None:  # the local runtime accepts any credentials
            kw = {"aws_access_key_id": "local", "aws_secret_access_key": "local"}
        return {"lambda": boto3.client("lambda", endpoint_url=endpoint_url,
                                       region_name=region or "us-east-1", config=cfg, **kw)}
    session = boto3.session.Session(region_name=region) if region else boto3.session.Session()
    if session.region_name is None:
        raise DeployError("no AWS region: pass --region or set AWS_DEFAULT_REGION")
    return {svc: session.client(svc, config=cfg) for svc in ("sts", "iam", "ecr", "lambda")}


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
                f"permission denied: {service}:{action_name(operation)} ({code}): {msg}"
            ) from None
        raise
    except EndpointConnectionError as exc:
        raise EndpointUnreachable(
            f"{service} endpoint unreachable: {exc.kwargs.get('endpoint_url', exc)}") from None
    except NoCredentialsError:
        raise DeployError(
            "no AWS credentials found: configure a profile (AWS_PROFILE) or AWS_ACCESS_KEY_ID/"
            "AWS_SECRET_ACCESS_KEY"
        ) from None
    except NoRegionError:
        raise DeployError("no AWS region: pass --region or set AWS_DEFAULT_REGION") from None
    except BotoCoreError as exc:
        raise DeployError(f"{service}:{action_name(operation)} failed: {exc}") from None


def action_name(operation: str) -> str:
    """``get_role`` -> ``GetRole`` (the IAM action name in error messages)."""
    return "".join(p.capitalize() for p in operation.split("_"))


def error_code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


def error_message(exc: ClientError) -> Any:
    """The message AWS sent with the error (the exception itself when it sent none)."""
    return exc.response.get("Error", {}).get("Message", exc)
