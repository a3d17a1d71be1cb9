"""Bad input to the runtime's HTTP API: schema-driven fuzzing (schemathesis, positive and
negative cases from ``/stellaris/v1/openapi.json``) and hand-written cases: huge,
truncated, non-JSON, wrong-type and deeply nested payloads, path traversal in function
names, zip bombs and zips with ``..``/absolute paths/symlinks/lying headers.

Every answer must be a 4xx with AWS's error shape (``x-amzn-ErrorType``), never a 500,
never a hang (every call has a client timeout), and nothing may be written outside the
function's folder (the state folder and a sentinel folder beside it are checked).
"""

from __future__ import annotations

import base64
import io
import json
import socket
import stat
import struct
import time
import zipfile
from collections import Counter
from pathlib import Path

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import Unsatisfiable
from rel_helpers import snapshot
from rt_helpers import ROLE, make_zip
from schemathesis import GenerationMode

F = "/2015-03-31/functions"
TARGET = "fuzz-target"
ECHO = {"app.py": "def handler(e, c):\n    return e\n"}
TIMEOUT = httpx.Timeout(20.0)


def assert_aws_4xx(r: httpx.Response, status: int | tuple[int, ...] | None = None) -> dict:
    assert r.status_code < 500, (r.status_code, r.text[:500])
    if status is not None:
        assert r.status_code in ((status,) if isinstance(status, int) else status), (r.status_code, r.text[:300])
    assert 400 <= r.status_code < 500, (r.status_code, r.text[:300])
    assert r.headers.get("x-amzn-errortype"), (r.status_code, dict(r.headers), r.text[:300])
    doc = r.json()
    assert doc.get("message") or doc.get("Message")
    return doc


def _create_body(name: str, zip_bytes: bytes, **kw: object) -> dict:
    return {"FunctionName": name, "Runtime": "python3.11", "Role": ROLE, "Handler": "app.handler",
            "Code": {"ZipFile": base64.b64encode(zip_bytes).decode()}, **kw}


@pytest.fixture(scope="module")
def http(rel_server):
    with httpx.Client(base_url=rel_server.endpoint, timeout=TIMEOUT) as c:
        yield c


@pytest.fixture(scope="module")
def target(http):
    def ensure() -> str:
        if http.get(f"{F}/{TARGET}").status_code == 404:
            http.post(F, json=_create_body(TARGET, make_zip(ECHO), Timeout=3))
        return TARGET

    ensure()
    yield ensure
    http.delete(f"{F}/{TARGET}")


@pytest.fixture(scope="module")
def baseline(rel_dirs, rel_server):
    """The state and sentinel folders before any test of this module wrote to the server."""
    return snapshot(rel_dirs["base"], skip=("state/logs", "state/functions", "server.log"))


# -- schema-driven fuzzing ------------------------------------------------------------------
# schemathesis' own pytest integration (parametrize/from_fixture) does not work with pytest 9
# ("'Function' object has no attribute '_nodeid'"), so the test drives its Hypothesis
# strategies directly: one @given run per operation and generation mode.
EXAMPLES = 25


@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE])
def test_fuzz_api_from_openapi_schema(rel_server, target, baseline, mode) -> None:
    """Every generated request (valid or not) gets a non-5xx answer within 20 s; errors are
    AWS-shaped. Half the cases aim at a real function so invoke/update paths run deep."""
    schema = schemathesis.openapi.from_url(f"{rel_server.endpoint}/stellaris/v1/openapi.json")
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) >= 20
    calls: list[tuple[str, int]] = []

    def fuzz(op) -> None:
        label = op.label

        @settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
                  suppress_health_check=list(HealthCheck))
        @given(case=op.as_strategy(generation_mode=mode))
        def run(case) -> None:
            name = case.path_parameters.get("name") if case.path_parameters else None
            if name is not None and (not name.isascii() or len(name) % 2 == 0):
                case.path_parameters["name"] = target()
            t0 = time.monotonic()
            response = case.call(base_url=rel_server.endpoint, timeout=20)
            assert time.monotonic() - t0 < 20
            where = (label, case.formatted_path, response.status_code, response.content[:400])
            assert response.status_code < 500, where
            if response.status_code >= 400:
                assert response.headers.get("x-amzn-errortype"), where
            calls.append((label, response.status_code))

        try:
            run()
        except Unsatisfiable:
            # an operation with nothing to violate (no parameters, no body) has no negative cases
            assert mode is GenerationMode.NEGATIVE, label
            no_negative.append(label)

    no_negative: list[str] = []
    for op in operations:
        fuzz(op)
    assert len({label for label, _ in calls}) == len(operations) - len(no_negative)
    print(f"fuzz {mode.value}: {len(calls)} requests over {len(operations)} operations, "
          f"statuses {sorted(Counter(s for _, s in calls).items())}, no negative cases for {no_negative}")


# -- hand-written payloads ------------------------------------------------------------------
@pytest.mark.parametrize(("body", "code"), [
    (b"{nope", "InvalidRequestContentException"),
    (b'{"a": [1, 2', "InvalidRequestContentException"),  # truncated
    (b"\xff\xfe\x00garbage", "InvalidRequestContentException"),  # not UTF-8
    (b"NaN", "InvalidRequestContentException"),  # not JSON (AWS's parser rejects it)
    (b"[" * 100_000 + b"]" * 100_000, "InvalidRequestContentException"),  # nested too deep
    (b"[1," * 2_200_000 + b"1" + b"]" * 1, "RequestEntityTooLargeException"),  # 6.6 MB
])
def test_invoke_bad_payloads(http, target, body, code) -> None:
    name = target()
    for kind in ("RequestResponse", "Event", "DryRun"):
        r = http.post(f"{F}/{name}/invocations", content=body, headers={"X-Amz-Invocation-Type": kind})
        assert_aws_4xx(r)
        assert r.headers["x-amzn-errortype"] == code


def test_invoke_wrong_type_payloads_reach_the_handler(http, target) -> None:
    """Any JSON value is a valid event (Lambda passes it through): 200, echoed unchanged."""
    name = target()
    for value in ([1, 2], "text", 3.5, None, True, {"deep": [[[[{"x": "y"}]]]]}):
        r = http.post(f"{F}/{name}/invocations", content=json.dumps(value))
        assert r.status_code == 200 and r.json() == value


def test_event_payload_limit_is_1mb(http, target) -> None:
    r = http.post(f"{F}/{target()}/invocations", content=json.dumps({"x": "a" * 1_100_000}),
                  headers={"X-Amz-Invocation-Type": "Event"})
    assert_aws_4xx(r, 413)


@pytest.mark.parametrize(("body", "status"), [
    (b"{nope", 400), (b"[1, 2]", 400), (b'"str"', 400), (b"null", 400), (b"[" * 50_000, 400),
    (json.dumps({"FunctionName": 5}).encode(), 400),
    (json.dumps({"FunctionName": "x", "Timeout": "3"}).encode(), 400),
    (json.dumps(_create_body("wt-1", b"", Timeout=True)).encode(), 400),
    (json.dumps(_create_body("wt-2", b"", MemorySize=[128])).encode(), 400),
    (json.dumps(_create_body("wt-3", b"", Environment="x")).encode(), 400),
    (json.dumps(_create_body("wt-4", b"", Environment={"Variables": {"A": 1}})).encode(), 400),
    (json.dumps(_create_body("wt-5", b"", Architectures="arm64")).encode(), 400),
    (json.dumps(_create_body("wt-6", b"", Code={"ZipFile": 5})).encode(), 400),
    (json.dumps(_create_body("wt-7", b"", Code="zip")).encode(), 400),
    (json.dumps(_create_body("wt-8", b"", Handler={"a": 1})).encode(), 400),
    (json.dumps(_create_body("wt-9", b"not a zip")).encode(), 400),
])
def test_create_function_bad_bodies(http, body, status) -> None:
    assert_aws_4xx(http.post(F, content=body), status)


@pytest.mark.parametrize(("method", "path", "body"), [
    ("PUT", f"{F}/{TARGET}/configuration", {"Environment": {"Variables": "x"}}),
    ("PUT", f"{F}/{TARGET}/configuration", {"Timeout": 1.5}),
    ("PUT", f"{F}/{TARGET}/configuration", {"MemorySize": False}),
    ("PUT", f"{F}/{TARGET}/code", {"ZipFile": None}),
    ("PUT", f"{F}/{TARGET}/code", {"ZipFile": "!!!not base64"}),
    ("PUT", f"{F}/{TARGET}/code", {"ZipFile": 7}),
    ("PUT", f"/2017-10-31/functions/{TARGET}/concurrency", {"ReservedConcurrentExecutions": True}),
    ("PUT", f"/2017-10-31/functions/{TARGET}/concurrency", {"ReservedConcurrentExecutions": "4"}),
    ("PUT", f"/2017-10-31/functions/{TARGET}/concurrency", {"ReservedConcurrentExecutions": 10**30}),
    ("PUT", f"/2019-09-25/functions/{TARGET}/event-invoke-config", {"MaximumRetryAttempts": True}),
    ("GET", f"{F}?MaxItems=abc", None), ("GET", f"{F}?MaxItems=-1", None),
    ("GET", f"{F}?Marker=%25%25%25", None),
])
def test_other_operations_bad_input(http, target, method, path, body) -> None:
    target()
    r = http.request(method, path, content=None if body is None else json.dumps(body))
    assert_aws_4xx(r, 400)
    assert http.get(f"{F}/{TARGET}").status_code == 200  # the function is unharmed


@pytest.mark.parametrize("name", [
    "..%2F..%2Fetc", "..%2F..%2F..%2Fetc%2Fpasswd", "../../etc", "..", "%2e%2e", "%2E%2E%2F%2E%2E",
    "f%00x", "a" * 300, "fuzz-target:..%2F..", "fuzz-target%2F..%2F..", "..%5C..%5Cwindows",
    "arn:aws:lambda:us-east-1:000000000000:function:..%2F..",
])
def test_path_traversal_in_function_names(http, target, rel_dirs, name) -> None:
    target()
    for method, suffix in (("GET", ""), ("GET", "/configuration"), ("POST", "/invocations"),
                           ("DELETE", ""), ("PUT", "/configuration"), ("PUT", "/code")):
        r = http.request(method, f"{F}/{name}{suffix}", content=b"{}")
        if r.status_code in (307, 308):  # a trailing slash the router strips: not served
            continue
        assert_aws_4xx(r)
    for extra in ("event-failures", "logs", "code.zip"):
        r = http.get(f"/stellaris/v1/functions/{name}/{extra}")
        if r.status_code not in (307, 308):
            assert_aws_4xx(r)
    assert http.get(f"{F}/{TARGET}").status_code == 200
    assert sorted(p.name for p in rel_dirs["sentinel"].iterdir()) == ["canary.txt"]


def test_truncated_request_body_does_not_wedge_the_server(rel_server, http, target) -> None:
    """A client that promises 1 MB and sends 10 bytes then hangs up: the server stays healthy."""
    name = target()
    host, port = rel_server.host, rel_server.port
    for _ in range(5):
        with socket.create_connection((host, port), timeout=5) as s:
            s.sendall(f"POST {F}/{name}/invocations HTTP/1.1\r\nHost: {host}\r\n"
                      f"Content-Type: application/json\r\nContent-Length: 1048576\r\n\r\n"
                      '{"a": 1, '.encode())
    r = http.post(f"{F}/{name}/invocations", content=b'{"ok": 1}')
    assert r.status_code == 200 and r.json() == {"ok": 1}


# -- zips -----------------------------------------------------------------------------------
def _zip(members: list[tuple[zipfile.ZipInfo | str, bytes]]) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("app.py", ECHO["app.py"])
        for info, data in members:
            z.writestr(info, data)
    return buf.getvalue()


def _symlink(name: str, target: str) -> zipfile.ZipInfo:
    info = zipfile.ZipInfo(name)
    info.external_attr = (stat.S_IFLNK | 0o777) << 16
    return info


def _lying_header(real_size: int = 1 << 20) -> bytes:
    """A member whose central directory says 10 bytes while its data inflates to 1 MiB."""
    raw = bytearray(_zip([("big.bin", bytes(real_size))]))
    cd = raw.rfind(b"PK\x01\x02")  # the last central directory entry is big.bin's
    struct.pack_into("<I", raw, cd + 24, 10)  # uncompressed size
    loc = raw.rfind(b"PK\x03\x04")
    struct.pack_into("<I", raw, loc + 22, 10)
    return bytes(raw)


def _bomb() -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED, compresslevel=1) as z:
        z.writestr("app.py", ECHO["app.py"])
        for k in range(40):  # 40 x 8 MiB = 320 MiB of zeros in ~320 KB: declared sizes too big
            z.writestr(f"zeros-{k}.bin", bytes(8 << 20))
    return buf.getvalue()


def _escape_cases(sentinel: Path) -> dict[str, bytes]:
    up = "../../../../"  # state/functions/<name>/<revision>/ -> the folder holding state/
    return {
        "dotdot": _zip([(f"{up}sentinel/pwned.py", b"x")]),
        "dotdot-dir": _zip([(f"{up}sentinel/", b""), (f"{up}sentinel/x/pwned.py", b"x")]),
        "nested-dotdot": _zip([("a/b/../../../../../../sentinel/pwned.py", b"x")]),
        "absolute": _zip([(str(sentinel / "pwned.py"), b"x")]),
        "backslash": _zip([("..\\..\\..\\..\\sentinel\\pwned.py", b"x")]),
        "drive": _zip([("C:/sentinel/pwned.py", b"x")]),
        "symlink": _zip([(_symlink("link", str(sentinel)), str(sentinel).encode())]),
        "symlink-then-write": _zip([(_symlink("esc", "../../../../sentinel"), b"../../../../sentinel"),
                                    ("esc/pwned.py", b"x")]),
        "lying-header": _lying_header(),
        "truncated-zip": make_zip(ECHO)[:-30],
        "empty": b"",
    }


def test_zip_attacks_rejected_and_nothing_escapes(http, rel_dirs, baseline) -> None:
    sentinel = rel_dirs["sentinel"]
    cases = _escape_cases(sentinel)
    for label, data in [*cases.items(), ("bomb", _bomb())]:
        name = f"zip-{label}"
        r = http.post(F, json=_create_body(name, data))
        doc = assert_aws_4xx(r, (400, 413))
        assert "unzip" in doc["message"].lower() or "size" in doc["message"].lower(), (label, doc)
        assert http.get(f"{F}/{name}").status_code == 404, label
        assert sorted(p.name for p in sentinel.iterdir()) == ["canary.txt"], label
        assert not (rel_dirs["state"] / "functions" / name).exists(), label
    # the same archives through UpdateFunctionCode of an existing function
    ok = "zip-victim"
    assert http.post(F, json=_create_body(ok, make_zip(ECHO))).status_code == 201
    try:
        before = snapshot(rel_dirs["state"] / "functions" / ok)
        for label, data in cases.items():
            r = http.put(f"{F}/{ok}/code", json={"ZipFile": base64.b64encode(data).decode()})
            assert_aws_4xx(r, (400, 413))
            assert snapshot(rel_dirs["state"] / "functions" / ok) == before, label
        assert http.post(f"{F}/{ok}/invocations", content=b'{"still": "works"}').json() == {"still": "works"}
    finally:
        http.delete(f"{F}/{ok}")
    assert (sentinel / "canary.txt").read_text() == "untouched"


def test_nothing_written_outside_function_folders(rel_dirs, baseline, http) -> None:
    """Runs last in this module: apart from function folders and logs, the state folder and
    the sentinel beside it are exactly as they were before the attacks."""
    assert snapshot(rel_dirs["base"], skip=("state/logs", "state/functions", "server.log")) == baseline
    live = {f["FunctionName"] for f in http.get(F).json()["Functions"]}
    on_disk = {p.name for p in (rel_dirs["state"] / "functions").iterdir()}
    assert on_disk <= live | {TARGET}, on_disk - live
