"""Control plane through a real boto3 client: shapes, status codes and AWS error codes."""

from __future__ import annotations

import io
import zipfile

import httpx
import pytest
from botocore.exceptions import ClientError
from rt_helpers import ROLE, make_zip

OK = {"app.py": "def handler(event, context):\n    return event\n"}


def _err(exc: pytest.ExceptionInfo[ClientError]) -> tuple[int, str, str]:
    r = exc.value.response
    return r["ResponseMetadata"]["HTTPStatusCode"], r["Error"]["Code"], r["Error"]["Message"]


def test_create_get_list_delete(client, deploy) -> None:
    name = deploy(OK, MemorySize=256, Timeout=7, Environment={"Variables": {"A": "1"}})
    cfg = client.get_function_configuration(FunctionName=name)
    assert cfg["FunctionName"] == name and cfg["MemorySize"] == 256 and cfg["Timeout"] == 7
    assert cfg["FunctionArn"] == f"arn:aws:lambda:us-east-1:000000000000:function:{name}"
    assert cfg["State"] == "Active" and cfg["Environment"]["Variables"] == {"A": "1"}
    assert cfg["Handler"] == "app.handler" and cfg["Version"] == "$LATEST"
    got = client.get_function(FunctionName=cfg["FunctionArn"])
    assert got["Configuration"]["CodeSha256"] == cfg["CodeSha256"]
    assert httpx.get(got["Code"]["Location"]).content == make_zip(OK) or got["Code"]["Location"]
    client.get_waiter("function_active_v2").wait(FunctionName=name)
    client.delete_function(FunctionName=name)
    with pytest.raises(ClientError) as exc:
        client.get_function(FunctionName=name)
    status, code, msg = _err(exc)
    assert (status, code) == (404, "ResourceNotFoundException")
    assert msg == f"Function not found: arn:aws:lambda:us-east-1:000000000000:function:{name}"


def test_create_defaults_and_duplicate(client, deploy) -> None:
    name = deploy(OK)
    cfg = client.get_function_configuration(FunctionName=name)
    assert (cfg["Timeout"], cfg["MemorySize"], cfg["Architectures"]) == (3, 128, ["x86_64"])
    with pytest.raises(ClientError) as exc:
        client.create_function(FunctionName=name, Runtime="python3.11", Role=ROLE,
                               Handler="app.handler", Code={"ZipFile": make_zip(OK)})
    assert _err(exc)[:2] == (409, "ResourceConflictException")
    assert _err(exc)[2] == f"Function already exist: {name}"


def test_list_pagination(client, deploy) -> None:
    names = {deploy(OK) for _ in range(3)}
    seen, marker = [], None
    while True:
        kw = {"MaxItems": 2} | ({"Marker": marker} if marker else {})
        page = client.list_functions(**kw)
        assert len(page["Functions"]) <= 2
        seen += [f["FunctionName"] for f in page["Functions"]]
        marker = page.get("NextMarker")
        if not marker:
            break
    assert names <= set(seen) and len(seen) == len(set(seen))
    paginated = [f["FunctionName"] for p in client.get_paginator("list_functions").paginate()
                 for f in p["Functions"]]
    assert names <= set(paginated)


@pytest.mark.parametrize(("kwargs", "status", "code"), [
    ({"Runtime": "python3.7"}, 400, "InvalidParameterValueException"),
    ({"Runtime": "cobol85"}, 400, "InvalidParameterValueException"),
    ({"Role": "not-a-role"}, 400, "ValidationException"),
    ({"Timeout": 901}, 400, "ValidationException"),
    ({"MemorySize": 20000}, 400, "ValidationException"),
    ({"Environment": {"Variables": {"AWS_REGION": "x"}}}, 400, "InvalidParameterValueException"),
    ({"Environment": {"Variables": {"BIG": "x" * 5000}}}, 400, "InvalidParameterValueException"),
    ({"Code": {"ZipFile": b"not a zip"}}, 400, "InvalidParameterValueException"),
    ({"FunctionName": "bad name!"}, 400, "InvalidParameterValueException"),
])
def test_create_rejects_bad_input(client, kwargs, status, code) -> None:
    args = {"FunctionName": "bad-input-fn", "Runtime": "python3.11", "Role": ROLE,
            "Handler": "app.handler", "Code": {"ZipFile": make_zip(OK)}} | kwargs
    with pytest.raises(ClientError) as exc:
        client.create_function(**args)
    assert _err(exc)[:2] == (status, code)


def _raw_zip(name: str, data: bytes = b"x") -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr(zipfile.ZipInfo(name), data)
    return buf.getvalue()


@pytest.mark.parametrize("member", ["../evil.py", "/etc/evil.py", "a/../../evil.py"])
def test_zip_path_escape_rejected(client, member, tmp_path) -> None:
    with pytest.raises(ClientError) as exc:
        client.create_function(FunctionName="zipslip", Runtime="python3.11", Role=ROLE,
                               Handler="app.handler", Code={"ZipFile": _raw_zip(member)})
    assert _err(exc)[:2] == (400, "InvalidParameterValueException")
    with pytest.raises(ClientError):
        client.get_function(FunctionName="zipslip")


def test_zip_bomb_rejected(client) -> None:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED, compresslevel=1) as z:
        with z.open("bomb.bin", "w", force_zip64=True) as f:
            chunk = bytes(8 << 20)
            for _ in range(32):  # 256 MiB of zeros, ~250 KB compressed
                f.write(chunk)
        z.writestr("app.py", OK["app.py"])
    assert len(buf.getvalue()) < 2_000_000
    with pytest.raises(ClientError) as exc:
        client.create_function(FunctionName="bomb", Runtime="python3.11", Role=ROLE,
                               Handler="app.handler", Code={"ZipFile": buf.getvalue()})
    assert _err(exc) == (400, "InvalidParameterValueException",
                         "Unzipped size must be smaller than 262144000 bytes")


def test_update_configuration_and_revision(client, deploy) -> None:
    name = deploy(OK)
    rev = client.get_function_configuration(FunctionName=name)["RevisionId"]
    out = client.update_function_configuration(FunctionName=name, MemorySize=512, Timeout=9,
                                               RevisionId=rev)
    assert out["MemorySize"] == 512 and out["LastUpdateStatus"] == "InProgress"
    client.get_waiter("function_updated_v2").wait(FunctionName=name)
    with pytest.raises(ClientError) as exc:
        client.update_function_configuration(FunctionName=name, Timeout=5, RevisionId=rev)
    assert _err(exc)[:2] == (412, "PreconditionFailedException")
    with pytest.raises(ClientError) as exc:
        client.update_function_configuration(FunctionName="no-such-fn", Timeout=5)
    assert _err(exc)[:2] == (404, "ResourceNotFoundException")


def test_reserved_concurrency_api(client, deploy) -> None:
    name = deploy(OK)
    assert client.put_function_concurrency(
        FunctionName=name, ReservedConcurrentExecutions=3)["ReservedConcurrentExecutions"] == 3
    assert client.get_function_concurrency(FunctionName=name)["ReservedConcurrentExecutions"] == 3
    assert client.get_function(FunctionName=name)["Concurrency"] == {"ReservedConcurrentExecutions": 3}
    with pytest.raises(ClientError) as exc:  # 12 total, 2 must stay unreserved
        client.put_function_concurrency(FunctionName=name, ReservedConcurrentExecutions=11)
    assert _err(exc)[:2] == (400, "InvalidParameterValueException")
    assert "below its minimum value of [2]" in _err(exc)[2]
    client.delete_function_concurrency(FunctionName=name)
    assert "ReservedConcurrentExecutions" not in client.get_function_concurrency(FunctionName=name)
    settings = client.get_account_settings()
    assert settings["AccountLimit"]["ConcurrentExecutions"] == 12
