"""The Lambda invoker's signed HTTP Invoke (orchestrator/invokers/invoke_http.py) against a
real HTTP server: the request Lambda expects, SigV4-signed; throttles retried; errors named
as botocore names them; a refused connection a failed invocation, never an exception."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from orchestrator.invokers.invoke_http import HttpInvoke, error_of
from orchestrator.invokers.lambda_ import LambdaInvoker, lambda_client
from store import free_port


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, port: int, answers: list[tuple[int, dict[str, str], bytes]]) -> None:
        super().__init__(("127.0.0.1", port), _Handler)
        self.answers = answers
        self.seen: list[tuple[str, dict[str, str], bytes]] = []


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, *args: object) -> None:
        return

    def do_POST(self) -> None:  # noqa: N802
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.server.seen.append((self.path, dict(self.headers), body))
        status, headers, out = self.server.answers.pop(0) if self.server.answers else (200, {}, b"{}")
        self.send_response(status)
        for k, v in headers.items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)


@pytest.fixture()
def server() -> Iterator[_Server]:
    srv = _Server(free_port(), [])
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    yield srv
    srv.shutdown()
    srv.server_close()


def test_signed_request_and_throttles_retried(server: _Server) -> None:
    throttle = (429, {"x-amzn-ErrorType": "TooManyRequestsException"}, b'{"message": "slow"}')
    server.answers += [throttle, (200, {"X-Amz-Function-Error": "Unhandled"},
                                  b'{"errorType": "ValueError", "errorMessage": "bad"}')]
    endpoint = f"http://127.0.0.1:{server.server_address[1]}"
    inv = LambdaInvoker({"actor": "fn-actor"}, endpoint, "us-east-1", 4, 30)
    try:
        res = inv._invoke("actor", {"x": 1})
    finally:
        inv.close()
    assert not res.ok and res.error_type == "ValueError" and res.error_message == "bad"
    assert len(server.seen) == 2  # the throttled try, then the retry
    path, headers, body = server.seen[-1]
    assert path == "/2015-03-31/functions/fn-actor/invocations" and json.loads(body) == {"x": 1}
    assert headers["X-Amz-Invocation-Type"] == "RequestResponse"
    assert headers["Authorization"].startswith("AWS4-HMAC-SHA256 Credential=")
    assert "/us-east-1/lambda/aws4_request" in headers["Authorization"]


def test_errors_named_and_connection_refused(server: _Server) -> None:
    endpoint = f"http://127.0.0.1:{server.server_address[1]}"
    server.answers.append((404, {"x-amzn-ErrorType": "ResourceNotFoundException"},
                           b'{"Type": "User", "message": "Function not found: fn-x"}'))
    http = HttpInvoke(lambda_client(endpoint, "us-east-1", 2, 10), 2, 10)
    resp = http.invoke("fn-x", b"{}")
    assert resp.status == 404
    assert error_of(resp) == ("ResourceNotFoundException", "Function not found: fn-x")
    refused = LambdaInvoker({"actor": "a"}, f"http://127.0.0.1:{free_port()}", "us-east-1", 2, 5)
    refused.http.max_attempts = 1
    try:
        res = refused._invoke("actor", {})
    finally:
        refused.close()
    assert not res.ok and res.error_type == "EndpointConnectionError"
