"""Invoke: payloads, function errors, init errors, log tails, limits, context and env vars."""

from __future__ import annotations

import base64
import json

import httpx
import pytest
from botocore.exceptions import ClientError

ECHO = {"app.py": "def handler(event, context):\n    return event\n"}
COUNTER = {"app.py": (
    "import os\nCOUNT = 0\n"
    "def handler(event, context):\n"
    "    global COUNT\n    COUNT += 1\n"
    "    print('call', COUNT)\n"
    "    return {'count': COUNT, 'pid': os.getpid()}\n")}
CONTEXT = {"app.py": (
    "import os\n"
    "def handler(event, context):\n"
    "    keys = ['AWS_LAMBDA_FUNCTION_NAME', 'AWS_LAMBDA_FUNCTION_MEMORY_SIZE', 'AWS_REGION',\n"
    "            '_HANDLER', 'AWS_LAMBDA_FUNCTION_VERSION', 'LAMBDA_TASK_ROOT', 'MY_VAR']\n"
    "    return {'request_id': context.aws_request_id, 'name': context.function_name,\n"
    "            'version': context.function_version, 'arn': context.invoked_function_arn,\n"
    "            'memory': context.memory_limit_in_mb, 'group': context.log_group_name,\n"
    "            'stream': context.log_stream_name,\n"
    "            'remaining': context.get_remaining_time_in_millis(),\n"
    "            'env': {k: os.environ.get(k) for k in keys}, 'cwd': os.getcwd()}\n")}


def _payload(resp) -> object:
    return json.loads(resp["Payload"].read())


def test_request_response_roundtrip(client, deploy) -> None:
    name = deploy(ECHO)
    resp = client.invoke(FunctionName=name, Payload=json.dumps({"a": [1, 2, {"b": None}]}))
    assert resp["StatusCode"] == 200 and "FunctionError" not in resp
    assert resp["ExecutedVersion"] == "$LATEST"
    assert _payload(resp) == {"a": [1, 2, {"b": None}]}
    assert _payload(client.invoke(FunctionName=name)) == {}  # empty body -> {}


def test_none_result_is_null(client, deploy) -> None:
    name = deploy({"app.py": "def handler(e, c):\n    return None\n"})
    assert client.invoke(FunctionName=name)["Payload"].read() == b"null"


def test_context_and_environment(client, deploy) -> None:
    name = deploy(CONTEXT, MemorySize=256, Timeout=5, Environment={"Variables": {"MY_VAR": "hello"}})
    resp = client.invoke(FunctionName=name)
    doc = _payload(resp)
    assert doc["request_id"] == resp["ResponseMetadata"]["RequestId"]
    assert doc["name"] == name and doc["version"] == "$LATEST" and doc["memory"] == "256"
    assert doc["arn"].endswith(f":function:{name}") and doc["group"] == f"/aws/lambda/{name}"
    assert "[$LATEST]" in doc["stream"]
    assert 3000 < doc["remaining"] <= 5000
    env = doc["env"]
    assert env["AWS_LAMBDA_FUNCTION_NAME"] == name and env["AWS_LAMBDA_FUNCTION_MEMORY_SIZE"] == "256"
    assert env["AWS_REGION"] == "us-east-1" and env["_HANDLER"] == "app.handler"
    assert env["MY_VAR"] == "hello" and env["LAMBDA_TASK_ROOT"] == doc["cwd"]


def test_qualified_names(client, deploy) -> None:
    name = deploy(ECHO)
    arn = client.get_function_configuration(FunctionName=name)["FunctionArn"]
    for fn in (arn, f"000000000000:function:{name}", f"{name}:$LATEST"):
        assert client.invoke(FunctionName=fn, Payload=b"1")["Payload"].read() == b"1"
    assert client.invoke(FunctionName=name, Qualifier="$LATEST")["StatusCode"] == 200
    with pytest.raises(ClientError) as exc:
        client.invoke(FunctionName=name, Qualifier="7")
    assert exc.value.response["Error"]["Code"] == "ResourceNotFoundException"


def test_function_error_shape(client, deploy) -> None:
    name = deploy({"app.py": "def handler(e, c):\n    raise ValueError('boom ' + str(e['x']))\n"})
    resp = client.invoke(FunctionName=name, Payload=b'{"x": 42}')
    assert resp["StatusCode"] == 200 and resp["FunctionError"] == "Unhandled"
    doc = _payload(resp)
    assert doc["errorType"] == "ValueError" and doc["errorMessage"] == "boom 42"
    assert doc["requestId"] == resp["ResponseMetadata"]["RequestId"]
    assert any("app.py" in line and "handler" in line for line in doc["stackTrace"])


@pytest.mark.parametrize(("files", "handler", "etype", "msg"), [
    ({"app.py": "import no_such_module_xyz\n"}, "app.handler", "Runtime.ImportModuleError",
     "Unable to import module 'app': No module named 'no_such_module_xyz'"),
    ({"app.py": "x = 1\n"}, "app.handler", "Runtime.HandlerNotFound", "Handler 'handler' missing on module 'app'"),
    ({"app.py": "x = 1\n"}, "nohandler", "Runtime.MalformedHandlerName", None),
    ({"app.py": "raise RuntimeError('init failed')\n"}, "app.handler", "RuntimeError", "init failed"),
    ({"app.py": "def handler(:\n"}, "app.handler", "Runtime.UserCodeSyntaxError", None),
])
def test_init_errors(client, deploy, files, handler, etype, msg) -> None:
    name = deploy(files, handler=handler)
    resp = client.invoke(FunctionName=name)
    assert resp["StatusCode"] == 200 and resp["FunctionError"] == "Unhandled"
    doc = _payload(resp)
    assert doc["errorType"] == etype and doc["requestId"] == ""
    if msg:
        assert doc["errorMessage"] == msg


def test_handler_in_package(client, deploy) -> None:
    name = deploy({"pkg/__init__.py": "", "pkg/sub/__init__.py": "",
                   "pkg/sub/mod.py": "from pkg import helper\ndef run(e, c):\n    return helper.X\n",
                   "pkg/helper.py": "X = 'nested'\n"}, handler="pkg.sub.mod.run")
    assert _payload(client.invoke(FunctionName=name)) == "nested"


def test_marshal_error(client, deploy) -> None:
    name = deploy({"app.py": "def handler(e, c):\n    return b'bytes'\n"})
    resp = client.invoke(FunctionName=name)
    assert resp["FunctionError"] == "Unhandled"
    assert _payload(resp)["errorType"] == "Runtime.MarshalError"


def test_log_tail(client, deploy) -> None:
    name = deploy(COUNTER)
    first = base64.b64decode(client.invoke(FunctionName=name, LogType="Tail")["LogResult"]).decode()
    rid_line, *_ = first.splitlines()
    assert rid_line.startswith("START RequestId: ") and rid_line.endswith("Version: $LATEST")
    assert "call 1" in first and "END RequestId: " in first
    report = next(line for line in first.splitlines() if line.startswith("REPORT"))
    for field in ("Duration: ", "Billed Duration: ", "Memory Size: 128 MB", "Max Memory Used: ", "Init Duration: "):
        assert field in report
    second = base64.b64decode(client.invoke(FunctionName=name, LogType="Tail")["LogResult"]).decode()
    assert "call 2" in second and "Init Duration" not in second
    assert "LogResult" not in client.invoke(FunctionName=name)


def test_log_tail_is_last_4kb(client, deploy) -> None:
    name = deploy({"app.py": "def handler(e, c):\n    print('x' * 10000)\n    return 1\n"})
    log = base64.b64decode(client.invoke(FunctionName=name, LogType="Tail")["LogResult"])
    assert len(log) <= 4096 and log.decode().rstrip().splitlines()[-1].startswith("REPORT")


def test_error_is_logged(client, deploy) -> None:
    name = deploy({"app.py": "def handler(e, c):\n    raise KeyError('k')\n"})
    log = base64.b64decode(client.invoke(FunctionName=name, LogType="Tail")["LogResult"]).decode()
    assert "[ERROR] KeyError" in log and "Traceback" in log


def test_dry_run_and_event_status(client, deploy) -> None:
    name = deploy(ECHO)
    assert client.invoke(FunctionName=name, InvocationType="DryRun")["StatusCode"] == 204
    resp = client.invoke(FunctionName=name, InvocationType="Event", Payload=b"{}")
    assert resp["StatusCode"] == 202 and resp["Payload"].read() == b""
    for kind in ("DryRun", "Event", "RequestResponse"):
        with pytest.raises(ClientError) as exc:
            client.invoke(FunctionName="no-such-function", InvocationType=kind)
        assert exc.value.response["ResponseMetadata"]["HTTPStatusCode"] == 404


def test_malformed_json_is_400(client, deploy) -> None:
    name = deploy(ECHO)
    with pytest.raises(ClientError) as exc:
        client.invoke(FunctionName=name, Payload=b"{not json")
    err = exc.value.response["Error"]
    assert err["Code"] == "InvalidRequestContentException"
    assert err["Message"].startswith("Could not parse request body into json")


def test_payload_limits(client, deploy, server) -> None:
    name = deploy(ECHO)
    big = json.dumps("x" * 6_291_456).encode()
    with pytest.raises(ClientError) as exc:
        client.invoke(FunctionName=name, Payload=big)
    assert exc.value.response["ResponseMetadata"]["HTTPStatusCode"] == 413
    assert exc.value.response["Error"]["Code"] == "RequestEntityTooLargeException"
    event_big = json.dumps("y" * 1_048_576).encode()
    with pytest.raises(ClientError) as exc:
        client.invoke(FunctionName=name, InvocationType="Event", Payload=event_big)
    assert "too large for the Event invocation type" in exc.value.response["Error"]["Message"]
    ok = json.dumps("z" * 1_000_000).encode()  # under 6 MB: accepted and echoed
    assert client.invoke(FunctionName=name, Payload=ok)["Payload"].read() == ok
    # error wire format as botocore reads it
    r = httpx.post(f"{server.endpoint}/2015-03-31/functions/{name}/invocations", content=big)
    assert r.status_code == 413 and r.headers["x-amzn-errortype"] == "RequestEntityTooLargeException"


def test_response_too_large(client, deploy) -> None:
    name = deploy({"app.py": "def handler(e, c):\n    return 'x' * (7 * 1024 * 1024)\n"}, MemorySize=512)
    resp = client.invoke(FunctionName=name)
    assert resp["FunctionError"] == "Unhandled"
    doc = _payload(resp)
    assert doc["errorType"] == "Function.ResponseSizeTooLarge" and "6291556" in doc["errorMessage"]
    assert client.invoke(FunctionName=name)["StatusCode"] == 200  # environment still usable
