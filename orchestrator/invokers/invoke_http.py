"""One Lambda ``Invoke`` as a signed HTTP request, without botocore's per-call machinery.

The invoker sends one request per rollout. Through ``boto3``'s ``client.invoke`` each costs
about 2.3 ms of the orchestrator's CPU (parameter validation, event hooks, the endpoint
ruleset, response parsing — benchmarks/capacity.py's profile: a third of the orchestrator's
time at 128 actors), which caps the actors one orchestrator can keep in flight
(docs/scale.md). This sends the same request — ``POST
/2015-03-31/functions/{name}/invocations`` with ``X-Amz-Invocation-Type`` and
``X-Amz-Log-Type``, SigV4-signed with the boto3 client's own credentials (refreshed as boto3
would) — over a pooled urllib3 connection, for a fraction of that. The boto3 client stays for
everything else (the preflight's GetFunction, deploys).

Retries follow botocore's ``standard`` mode for what is safe to repeat: throttles (429) and
the transient 5xx answers, and connections that could not be opened, with jittered
exponential backoff; a request whose answer was lost mid-way (a read timeout) is not
repeated here — the function may have run, and the orchestrator's own retry de-duplicates.
"""

from __future__ import annotations

import json
import random
import socket
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import urllib3
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest

RETRY_STATUS = {429, 500, 502, 503, 504}


@dataclass
class InvokeResponse:
    status: int
    headers: Any  # case-insensitive (urllib3's HTTPHeaderDict)
    body: bytes


class InvokeError(Exception):
    """The request got no answer (``code``: botocore's name for what happened)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


class HttpInvoke:
    """Signed ``Invoke`` requests to one endpoint over a connection pool of ``pool``."""

    def __init__(self, client: Any, pool: int, read_timeout: float, max_attempts: int = 3) -> None:
        self.endpoint = client.meta.endpoint_url.rstrip("/")
        self.region = client.meta.region_name
        self._client = client  # its credentials, resolved (and refreshed) by botocore
        self.max_attempts = max_attempts
        options = [*urllib3.connection.HTTPConnection.default_socket_options,
                   (socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)]
        self.http = urllib3.PoolManager(
            num_pools=2, maxsize=max(10, pool), block=False, retries=False,
            timeout=urllib3.Timeout(connect=5.0, read=read_timeout), socket_options=options)

    def _signed_headers(self, url: str, payload: bytes, log_tail: bool) -> dict[str, str]:
        headers = {"X-Amz-Invocation-Type": "RequestResponse"}
        if log_tail:
            headers["X-Amz-Log-Type"] = "Tail"
        creds = self._client._get_credentials()
        if creds is None:  # an endpoint that takes unsigned requests
            return headers
        request = AWSRequest(method="POST", url=url, data=payload, headers=headers)
        SigV4Auth(creds.get_frozen_credentials(), "lambda", self.region).add_auth(request)
        return dict(request.headers.items())

    def invoke(self, function_name: str, payload: bytes, log_tail: bool = True) -> InvokeResponse:
        url = f"{self.endpoint}/2015-03-31/functions/{quote(function_name, safe='')}/invocations"
        for attempt in range(1, self.max_attempts + 1):
            headers = self._signed_headers(url, payload, log_tail)  # fresh date each attempt
            try:
                r = self.http.request("POST", url, body=payload, headers=headers)
            except urllib3.exceptions.NewConnectionError as exc:
                if attempt == self.max_attempts:
                    raise InvokeError("EndpointConnectionError",
                                      f"Could not connect to the endpoint URL: {url!r}: {exc}") from None
            except urllib3.exceptions.HTTPError as exc:
                code = ("ReadTimeoutError" if isinstance(exc, urllib3.exceptions.ReadTimeoutError)
                        else type(exc).__name__)
                raise InvokeError(code, f"{url}: {exc}") from None
            else:
                if r.status not in RETRY_STATUS or attempt == self.max_attempts:
                    return InvokeResponse(r.status, r.headers, r.data)
            time.sleep(random.random() * min(20.0, 2.0 ** (attempt - 1)))
        raise AssertionError("unreachable")


def error_of(resp: InvokeResponse) -> tuple[str, str]:
    """(code, message) of an error answer, as botocore's ClientError would name them."""
    try:
        doc = json.loads(resp.body or b"{}")
    except ValueError:
        doc = {}
    doc = doc if isinstance(doc, dict) else {}
    code = (resp.headers.get("x-amzn-errortype") or "").split(":")[0] or \
        str(doc.get("__type") or doc.get("Type") or doc.get("code") or f"HTTP{resp.status}")
    message = str(doc.get("message") or doc.get("Message") or resp.body[:500])
    return code.rsplit("#", 1)[-1], message
