"""Auth and secrets.

* ``--auth sigv4`` answers 403 with AWS's error codes to unsigned, malformed, wrongly signed,
  unknown-key, wrong-service and stale-clock (> 5 min either way) requests, on the control
  plane and on Invoke (tests/runtime/test_auth.py covers ListFunctions, a tampered body and
  the skew check as a unit; this adds the rest, over HTTP).
* The runtime, the CLI and the embedded Redis bind 127.0.0.1 unless told otherwise, and the
  server really listens on loopback only.
* Secrets (the runtime's SigV4 secret key, a function's secret environment variable, the
  Redis password of a training run) never appear in logs, billing, /metrics, the
  environment listing, worker environments or run folders.
"""

from __future__ import annotations

import argparse
import datetime as dt
import inspect
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from unittest import mock

import httpx
import psutil
import pytest
import redis
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
from botocore.exceptions import ClientError
from rt_helpers import ROLE, lambda_client, make_zip

from runtime import LocalRuntime
from store import EmbeddedRedis

AKID = "AKIDRELIABILITY"
SECRET_KEY = "sk-RELIABILITY-9f3a7c1e-do-not-log"
FN_SECRET = "fn-secret-77e1d4b0-do-not-log"
REDIS_PW = "redis-pw-5ab2c9d8-do-not-log"
F = "/2015-03-31/functions"
APP = {"app.py": (
    "import os\n"
    "def handler(event, context):\n"
    "    print('handling', event.get('n'))\n"
    "    if event.get('fail'):\n"
    "        raise ValueError('failing on purpose')\n"
    "    if event.get('env'):\n"
    "        return dict(os.environ)\n"
    "    return {'ok': True}\n")}


@pytest.fixture(scope="module")
def signed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    base = tmp_path_factory.mktemp("auth")
    rt = LocalRuntime(zygote=False, auth="sigv4", credentials={AKID: SECRET_KEY},
                      log_file=base / "server.log", state_dir=base / "state",
                      extra_args=["--log-level", "debug", "--access-log"])
    rt.start(timeout=60)
    client = lambda_client(rt.endpoint, AKID, SECRET_KEY)
    name = "auth-fn"
    client.create_function(FunctionName=name, Runtime="python3.11", Role=ROLE, Handler="app.handler",
                           Code={"ZipFile": make_zip(APP)},
                           Environment={"Variables": {"API_TOKEN": FN_SECRET}})
    yield {"rt": rt, "client": client, "name": name, "base": base}
    rt.stop()


def _signed_headers(url: str, method: str = "GET", body: bytes = b"", key: str = AKID,
                    secret: str = SECRET_KEY, service: str = "lambda",
                    skew: dt.timedelta = dt.timedelta(0)) -> dict[str, str]:
    req = AWSRequest(method=method, url=url, data=body)
    now = dt.datetime.now(dt.UTC).replace(tzinfo=None) + skew
    with mock.patch("botocore.auth.get_current_datetime", return_value=now):
        SigV4Auth(Credentials(key, secret), service, "us-east-1").add_auth(req)
    return dict(req.headers.items())


def _assert_403(r: httpx.Response, code: str, fragment: str = "") -> None:
    assert r.status_code == 403, (r.status_code, r.text)
    assert r.headers["x-amzn-errortype"] == code, r.headers
    assert fragment in r.text


def test_every_route_refuses_unsigned_requests(signed) -> None:
    base, name = signed["rt"].endpoint, signed["name"]
    routes = [("GET", F), ("POST", F), ("GET", f"{F}/{name}"), ("DELETE", f"{F}/{name}"),
              ("POST", f"{F}/{name}/invocations"), ("PUT", f"{F}/{name}/configuration"),
              ("PUT", f"{F}/{name}/code"), ("PUT", f"/2017-10-31/functions/{name}/concurrency"),
              ("GET", "/stellaris/v1/billing"), ("GET", "/stellaris/v1/environments"),
              ("GET", f"/stellaris/v1/functions/{name}/logs"), ("GET", "/stellaris/v1/openapi.json"),
              ("GET", f"/stellaris/v1/functions/{name}/code.zip"), ("GET", "/no/such/route")]
    with httpx.Client(base_url=base, timeout=10) as c:
        for method, path in routes:
            _assert_403(c.request(method, path, content=b"{}"), "MissingAuthenticationTokenException")
            r = c.request(method, path, content=b"{}",
                          headers={"Authorization": "AWS4-HMAC-SHA256 Credential=garbage"})
            _assert_403(r, "IncompleteSignatureException")
    assert signed["client"].get_function(FunctionName=name)["Configuration"]["FunctionName"] == name


@pytest.mark.parametrize(("kw", "code", "fragment"), [
    ({"secret": "wrong-secret"}, "InvalidSignatureException", "does not match"),
    ({"key": "AKIDUNKNOWN"}, "UnrecognizedClientException", "security token"),
    ({"service": "s3"}, "InvalidSignatureException", "scoped to correct service"),
    ({"skew": dt.timedelta(minutes=-6)}, "InvalidSignatureException", "Signature expired"),
    ({"skew": dt.timedelta(minutes=6)}, "InvalidSignatureException", "Signature expired"),
    ({"skew": dt.timedelta(hours=-30)}, "InvalidSignatureException", "Signature expired"),
])
def test_bad_signatures_on_invoke_and_create(signed, kw, code, fragment) -> None:
    base, name = signed["rt"].endpoint, signed["name"]
    before = signed["rt"].billing()["functions"].get(name, {}).get("invocations", 0)
    url = f"{base}{F}/{name}/invocations"
    body = b'{"n": 1}'
    _assert_403(httpx.post(url, content=body, headers=_signed_headers(url, "POST", body, **kw)), code, fragment)
    create = json.dumps({"FunctionName": "intruder", "Runtime": "python3.11", "Role": ROLE,
                         "Handler": "app.handler", "Code": {"ZipFile": ""}}).encode()
    _assert_403(httpx.post(f"{base}{F}", content=create,
                           headers=_signed_headers(f"{base}{F}", "POST", create, **kw)), code, fragment)
    assert signed["rt"].billing()["functions"].get(name, {}).get("invocations", 0) == before  # nothing ran
    with pytest.raises(ClientError):
        signed["client"].get_function(FunctionName="intruder")


def test_clock_skew_inside_five_minutes_is_accepted(signed) -> None:
    base, name = signed["rt"].endpoint, signed["name"]
    url = f"{base}{F}/{name}/invocations"
    for minutes in (-4, 4):
        h = _signed_headers(url, "POST", b"{}", skew=dt.timedelta(minutes=minutes))
        assert httpx.post(url, content=b"{}", headers=h).json() == {"ok": True}


def test_signature_does_not_carry_over_to_another_path(signed) -> None:
    base, name = signed["rt"].endpoint, signed["name"]
    h = _signed_headers(f"{base}{F}/{name}", "GET")
    assert httpx.get(f"{base}{F}/{name}", headers=h).status_code == 200
    _assert_403(httpx.delete(f"{base}{F}/{name}", headers=h), "InvalidSignatureException")
    _assert_403(httpx.get(f"{base}{F}/other", headers=h), "InvalidSignatureException")


# -- loopback by default ---------------------------------------------------------------------
def test_default_bind_is_loopback(signed) -> None:
    from runtime.cli import _parser

    assert inspect.signature(LocalRuntime).parameters["host"].default == "127.0.0.1"
    assert inspect.signature(EmbeddedRedis).parameters["host"].default == "127.0.0.1"
    args = _parser().parse_args(["serve"])
    assert isinstance(args, argparse.Namespace) and args.host == "127.0.0.1"
    from deploy import services

    assert "127.0.0.1" in inspect.getsource(services)
    # the running server listens on loopback only
    listening = [c.laddr for c in psutil.Process(signed["rt"].proc.pid).net_connections("inet")
                 if c.status == psutil.CONN_LISTEN]
    assert listening and all(a.ip == "127.0.0.1" for a in listening), listening
    with EmbeddedRedis() as r:
        bound = [c.laddr.ip for c in psutil.Process(r.process.pid).net_connections("inet")
                 if c.status == psutil.CONN_LISTEN]
        assert bound and set(bound) == {"127.0.0.1"}, bound


# -- secrets ---------------------------------------------------------------------------------
def _files_containing(root: Path, secrets: tuple[str, ...]) -> list[str]:
    hits = []
    for p in root.rglob("*"):
        if p.is_file():
            data = p.read_bytes()
            hits += [f"{p.relative_to(root)}: {s[:12]}..." for s in secrets if s.encode() in data]
    return hits


def test_secrets_never_in_logs_metrics_or_worker_environment(signed) -> None:
    rt, client, name, base = signed["rt"], signed["client"], signed["name"], signed["base"]
    client.invoke(FunctionName=name, Payload=json.dumps({"n": 1}), LogType="Tail")
    client.invoke(FunctionName=name, Payload=json.dumps({"n": 2, "fail": True}), LogType="Tail")
    client.invoke(FunctionName=name, InvocationType="Event", Payload=json.dumps({"n": 3, "fail": True}))
    env = json.loads(client.invoke(FunctionName=name, Payload=json.dumps({"env": True}))["Payload"].read())
    # the function gets its own variable, never the runtime's credentials
    assert env["API_TOKEN"] == FN_SECRET
    assert "STELLARIS_RUNTIME_CREDENTIALS" not in env
    assert not any(SECRET_KEY in v for v in env.values())
    # bad signatures were logged too (previous tests): nothing echoes the keys
    secrets = (SECRET_KEY, FN_SECRET)
    url = rt.endpoint
    views = {
        "billing": json.dumps(rt.billing()),
        "health": json.dumps(rt.health()),
        "metrics": httpx.get(f"{url}/metrics").text,
        "environments": httpx.get(f"{url}/stellaris/v1/environments",
                                  headers=_signed_headers(f"{url}/stellaris/v1/environments")).text,
        "logs": httpx.get(f"{url}/stellaris/v1/functions/{name}/logs",
                          headers=_signed_headers(f"{url}/stellaris/v1/functions/{name}/logs")).text,
        "list": json.dumps(client.list_functions()["Functions"][0].get("FunctionName")),
    }
    for label, text in views.items():
        assert text and not any(s in text for s in secrets), label
    # the server's command line carries no secret (credentials travel in its environment)
    cmdline = " ".join(psutil.Process(rt.proc.pid).cmdline())
    assert SECRET_KEY not in cmdline
    time.sleep(0.5)  # let the Event retry land in the logs too
    assert _files_containing(base, secrets) == []  # server.log (debug + access log), state dir


def test_redis_password_never_in_run_folder(tmp_path) -> None:
    with EmbeddedRedis() as server:
        r = redis.Redis(host=server.host, port=server.port)
        r.config_set("requirepass", REDIS_PW)
        r.close()
        url = f"redis://:{REDIS_PW}@127.0.0.1:{server.port}/0"
        with pytest.raises(redis.AuthenticationError):  # the password is really required
            redis.Redis(host=server.host, port=server.port).ping()
        run_dir = tmp_path / "run"
        env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
        proc = subprocess.run(
            [sys.executable, "-m", "orchestrator.cli", "train", "--backend", "inline",
             "--env", "CartPole-v1", "--total-steps", "1024", "--redis-url", url,
             "--run-dir", str(run_dir), "--progress", "plain"],
            capture_output=True, timeout=240, env=env, cwd=tmp_path)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out.decode(errors="replace")[-3000:]
    files = [p for p in run_dir.rglob("*") if p.is_file()]
    assert any(p.name == "config.json" for p in files) and any(p.suffix == ".safetensors" for p in files)
    assert _files_containing(run_dir, (REDIS_PW,)) == []
    assert REDIS_PW.encode() not in out
