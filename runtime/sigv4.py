"""Opt-in AWS Signature V4 verification (``--auth sigv4``), as boto3 signs Lambda requests.

The canonical request is rebuilt with botocore's own SigV4Auth from the raw (still
percent-encoded) path, which reproduces botocore's double encoding of the URI. Only the
health probe and ``/metrics`` are reachable unsigned.
"""

from __future__ import annotations

import datetime as dt
import hmac
import re
from typing import Any

from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from runtime.errors import (
    IncompleteSignatureException,
    InvalidSignatureException,
    LambdaAPIError,
    MissingAuthenticationTokenException,
    UnrecognizedClientException,
)

OPEN_PATHS = frozenset({"/stellaris/v1/health", "/metrics"})
MAX_SKEW = dt.timedelta(minutes=5)
_AUTH_RE = re.compile(
    r"^AWS4-HMAC-SHA256\s+Credential=([^/,\s]+)/(\d{8})/([^/,\s]+)/([^/,\s]+)/aws4_request\s*,\s*"
    r"SignedHeaders=([a-z0-9;\-]+)\s*,\s*Signature=([0-9a-f]{64})\s*$"
)


def load_credentials(text: str) -> dict[str, str]:
    """``AKID:SECRET`` pairs separated by commas or newlines (``#`` comments allowed)."""
    creds: dict[str, str] = {}
    for item in re.split(r"[,\n]", text):
        item = item.split("#", 1)[0].strip()
        if not item:
            continue
        akid, sep, secret = item.partition(":")
        if not sep or not akid or not secret:
            raise ValueError("credentials must be AKID:SECRET pairs")
        creds[akid.strip()] = secret.strip()
    return creds


def verify(scope: dict[str, Any], body: bytes, credentials: dict[str, str],
           now: dt.datetime | None = None) -> str:
    """Check one request; returns the access key id or raises an AWS-shaped 403."""
    headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
    auth = headers.get("authorization")
    if not auth:
        raise MissingAuthenticationTokenException("Missing Authentication Token")
    m = _AUTH_RE.match(auth)
    if not m:
        raise IncompleteSignatureException(
            "Authorization header requires 'Credential', 'Signature' and 'SignedHeaders' parameters.")
    akid, day, region, service, signed, signature = m.groups()
    if service != "lambda":  # a signature made for another service is not one for Lambda
        raise InvalidSignatureException("Credential should be scoped to correct service: 'lambda'. ")
    secret = credentials.get(akid)
    if secret is None:
        raise UnrecognizedClientException("The security token included in the request is invalid.")
    amz_date = headers.get("x-amz-date", "")
    try:
        when = dt.datetime.strptime(amz_date, "%Y%m%dT%H%M%SZ").replace(tzinfo=dt.UTC)
    except ValueError:
        raise IncompleteSignatureException("Date must be in ISO-8601 'basic format'.") from None
    now = now or dt.datetime.now(dt.UTC)
    if abs(now - when) > MAX_SKEW or not amz_date.startswith(day):
        fmt = "%Y%m%dT%H%M%SZ"
        raise InvalidSignatureException(
            f"Signature expired: {amz_date} is now earlier than {(now - MAX_SKEW).strftime(fmt)} "
            f"({now.strftime(fmt)} - 5 min.)")
    names = signed.split(";")
    if "host" not in names:
        raise InvalidSignatureException("'Host' must be a signed header.")
    raw_path = scope.get("raw_path") or scope["path"].encode()
    query = scope.get("query_string", b"").decode("latin-1")
    url = f"http://{headers.get('host', '')}{raw_path.decode('latin-1')}" + (f"?{query}" if query else "")
    request = AWSRequest(method=scope["method"], url=url,
                         headers={n: headers.get(n, "") for n in names}, data=body)
    request.context["timestamp"] = amz_date
    signer = SigV4Auth(Credentials(akid, secret), service, region)
    canonical = signer.canonical_request(request)
    expected = signer.signature(signer.string_to_sign(request, canonical), request)
    if not hmac.compare_digest(expected, signature):
        raise InvalidSignatureException(
            "The request signature we calculated does not match the signature you provided. "
            "Check your AWS Secret Access Key and signing method. Consult the service "
            "documentation for details.")
    return akid


class SigV4Middleware:
    """Pure ASGI (no BaseHTTPMiddleware overhead): buffer the body, verify, replay it."""

    def __init__(self, app: Any, credentials: dict[str, str]) -> None:
        self.app = app
        self.credentials = credentials

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["path"] in OPEN_PATHS:
            await self.app(scope, receive, send)
            return
        chunks: list[bytes] = []
        more = True
        while more:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunks.append(message.get("body", b""))
            more = message.get("more_body", False)
        body = b"".join(chunks)
        try:
            verify(scope, body, self.credentials)
        except LambdaAPIError as exc:
            await exc.to_response()(scope, receive, send)
            return
        replayed = False

        async def replay() -> dict[str, Any]:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)
