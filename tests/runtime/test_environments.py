"""Execution environments: warm reuse, timeouts, crashes, memory, updates, reaping, zygote."""

from __future__ import annotations

import base64
import contextlib
import json
import time

import httpx
from rt_helpers import lambda_client, make_zip, process_gone

from runtime import LocalRuntime

COUNTER = {"app.py": (
    "import os\nCOUNT = 0\n"
    "def handler(event, context):\n"
    "    global COUNT\n    COUNT += 1\n"
    "    if event.get('sleep'):\n        import time; time.sleep(event['sleep'])\n"
    "    if event.get('exit') is not None:\n        os._exit(event['exit'])\n"
    "    if event.get('alloc_mb'):\n"
    "        global BLOB; BLOB = bytearray(event['alloc_mb'] * 1024 * 1024)\n"
    "        import time; time.sleep(3)\n"
    "    return {'count': COUNT, 'pid': os.getpid()}\n")}


def _invoke(client, name, event=None) -> tuple[dict, object]:
    resp = client.invoke(FunctionName=name, Payload=json.dumps(event or {}))
    return resp, json.loads(resp["Payload"].read())


def _envs(server, name) -> list[dict]:
    doc = httpx.get(f"{server.endpoint}/stellaris/v1/environments").json()
    return [e for e in doc["environments"] if e["function"] == name]


def test_warm_reuse_keeps_module_state(client, deploy, server) -> None:
    name = deploy(COUNTER)
    results = [_invoke(client, name)[1] for _ in range(4)]
    assert [r["count"] for r in results] == [1, 2, 3, 4]
    assert len({r["pid"] for r in results}) == 1
    envs = _envs(server, name)
    assert len(envs) == 1 and envs[0]["state"] == "ready" and envs[0]["invocations"] == 4


def test_timeout_kills_and_replaces(client, deploy, server) -> None:
    name = deploy(COUNTER, Timeout=1)
    _, first = _invoke(client, name)
    t0 = time.monotonic()
    resp, doc = _invoke(client, name, {"sleep": 10})
    elapsed = time.monotonic() - t0
    assert resp["FunctionError"] == "Unhandled" and 0.9 < elapsed < 4
    assert doc["errorType"] == "Sandbox.Timedout"
    assert doc["errorMessage"] == (
        f"RequestId: {resp['ResponseMetadata']['RequestId']} Error: Task timed out after 1.00 seconds")
    assert process_gone(first["pid"])
    _, after = _invoke(client, name)
    assert after["count"] == 1 and after["pid"] != first["pid"]  # a fresh environment


def test_crash_fails_only_its_invocation(client, deploy) -> None:
    name = deploy(COUNTER)
    _invoke(client, name)
    resp, doc = _invoke(client, name, {"exit": 3})
    assert resp["FunctionError"] == "Unhandled" and doc["errorType"] == "Runtime.ExitError"
    assert doc["errorMessage"].endswith("Error: Runtime exited without providing a reason")
    segv = deploy({"app.py": "import ctypes\ndef handler(e, c):\n    ctypes.string_at(0)\n"})
    assert _invoke(client, segv)[1]["errorType"] == "Runtime.ExitError"
    _, doc = _invoke(client, name)
    assert doc["count"] == 1


def test_out_of_memory(client, deploy) -> None:
    name = deploy(COUNTER, MemorySize=128, Timeout=5)
    resp, doc = _invoke(client, name, {"alloc_mb": 300})
    assert resp["FunctionError"] == "Unhandled"
    assert doc["errorType"] == "Runtime.OutOfMemory"
    assert doc["errorMessage"] == (
        f"RequestId: {resp['ResponseMetadata']['RequestId']} Error: Runtime exited with error: signal: killed")
    _, doc = _invoke(client, name, {"alloc_mb": 20})  # within the limit: fine, new environment
    assert doc["count"] == 1


def test_code_update_reaches_new_invocations(client, deploy, server) -> None:
    name = deploy({"app.py": "def handler(e, c):\n    return 'v1'\n"})
    assert _invoke(client, name)[1] == "v1"
    old = _envs(server, name)
    out = client.update_function_code(FunctionName=name,
                                      ZipFile=make_zip({"app.py": "def handler(e, c):\n    return 'v2'\n"}))
    assert out["LastUpdateStatus"] == "InProgress"
    assert _invoke(client, name)[1] == "v2"
    now = _envs(server, name)
    assert len(now) == 1 and now[0]["id"] != old[0]["id"] and now[0]["generation"] == old[0]["generation"] + 1


def test_config_update_uses_new_environment(client, deploy) -> None:
    name = deploy({"app.py": "import os\ndef handler(e, c):\n    return os.environ.get('V')\n"},
                  Environment={"Variables": {"V": "a"}})
    assert _invoke(client, name)[1] == "a"
    client.update_function_configuration(FunctionName=name, Environment={"Variables": {"V": "b"}})
    assert _invoke(client, name)[1] == "b"


def test_update_drains_busy_environment(client, deploy, server) -> None:
    """An invocation in flight during an update finishes on the old code; its env is then stopped."""
    import threading

    name = deploy({"app.py": "import time\ndef handler(e, c):\n    time.sleep(e.get('s', 0))\n    return 'old'\n"})
    box: dict[str, object] = {}
    t = threading.Thread(target=lambda: box.update(r=_invoke(client, name, {"s": 0.8})[1]))
    t.start()
    time.sleep(0.3)
    client.update_function_code(FunctionName=name, ZipFile=make_zip({"app.py": "def handler(e, c):\n    return 'new'\n"}))
    assert _invoke(client, name)[1] == "new"
    t.join()
    assert box["r"] == "old"
    assert [e["generation"] for e in _envs(server, name)] == [1]


def test_parallel_invocations_overlap(client, deploy) -> None:
    from concurrent.futures import ThreadPoolExecutor

    name = deploy(COUNTER, Timeout=5)
    _invoke(client, name)  # warm one
    t0 = time.monotonic()
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda _: _invoke(client, name, {"sleep": 1.0})[1], range(4)))
    assert time.monotonic() - t0 < 3.0  # four 1 s sleeps ran side by side, not one after another
    assert len({r["pid"] for r in results}) == 4


def test_zygote_cold_start_with_torch(client, deploy) -> None:
    code = {"app.py": "import torch\ndef handler(e, c):\n    return float(torch.ones(3).sum())\n"}
    name = deploy(code, MemorySize=1024)
    resp = client.invoke(FunctionName=name, LogType="Tail")
    assert json.loads(resp["Payload"].read()) == 3.0
    report = base64.b64decode(resp["LogResult"]).decode().strip().splitlines()[-1]
    init_ms = float(report.split("Init Duration: ")[1].split(" ms")[0])
    assert init_ms < 1000  # forked from a zygote that already imported torch


def test_default_zygote_forks_torch_compiler_already_imported(tmp_path) -> None:
    """The default preload (runtime.spawner.DEFAULT_PRELOAD) includes torch's compiler stack:
    a compiled learner's cold start must not spend ~2 s importing dynamo and inductor."""
    code = {"app.py": "import sys\n"
            "AT_INIT = 'torch._inductor.compile_fx' in sys.modules  # before this module's imports\n"
            "def handler(e, c):\n    return AT_INIT\n"}
    with LocalRuntime(log_file=tmp_path / "s.log") as rt:
        c = lambda_client(rt.endpoint)
        c.create_function(FunctionName="f", Runtime="python3.11", Role="arn:aws:iam::123456789012:role/r",
                          Handler="app.handler", Code={"ZipFile": make_zip(code)})
        assert json.loads(c.invoke(FunctionName="f")["Payload"].read()) is True


def test_no_zygote_idle_reaping_and_clean_stop(tmp_path) -> None:
    """Spawn mode, idle reaping, and no process left behind by stop()."""
    with LocalRuntime(zygote=False, idle_timeout=0.5, log_file=tmp_path / "s.log") as rt:
        c = lambda_client(rt.endpoint)
        c.create_function(FunctionName="f", Runtime="python3.11", Role="arn:aws:iam::123456789012:role/r",
                          Handler="app.handler", Code={"ZipFile": make_zip(COUNTER)})
        c.create_function(FunctionName="g", Runtime="python3.11", Role="arn:aws:iam::123456789012:role/r",
                          Handler="app.handler", Code={"ZipFile": make_zip(COUNTER)}, Timeout=10)
        resp = c.invoke(FunctionName="f", LogType="Tail")
        pid = json.loads(resp["Payload"].read())["pid"]
        assert "Init Duration" in base64.b64decode(resp["LogResult"]).decode()
        deadline = time.monotonic() + 5
        while _envs(rt, "f") and time.monotonic() < deadline:
            time.sleep(0.2)
        assert _envs(rt, "f") == [] and process_gone(pid)
        assert json.loads(c.invoke(FunctionName="f")["Payload"].read())["count"] == 1  # cold again
        # leave one environment busy and one idle at shutdown
        import threading

        def busy() -> None:
            with contextlib.suppress(Exception):  # the server going away mid-call is the point
                c.invoke(FunctionName="g", Payload=b'{"sleep": 8}')

        threading.Thread(target=busy, daemon=True).start()
        time.sleep(0.8)
        pids = [e["pid"] for e in httpx.get(f"{rt.endpoint}/stellaris/v1/environments").json()["environments"]]
        assert pids
        server_pid = rt.proc.pid
    for p in [*pids, server_pid]:
        assert process_gone(p, timeout=1.0)
