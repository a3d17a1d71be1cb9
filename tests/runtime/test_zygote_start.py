"""The runtime answers while its zygote preloads: deploys go through at once, the first cold
start waits for the preload (not billed as Init Duration), and a zygote that dies while
preloading leaves cold starts to the spawner."""

from __future__ import annotations

import base64
import json
import time

from rt_helpers import lambda_client, make_zip

from runtime import LocalRuntime

HANDLER = {"app.py": "import os\ndef handler(e, c):\n    return os.getpid()\n"}
PRELOAD_S = 4.0


def _slow_module(tmp_path, body: str) -> dict[str, str]:
    (tmp_path / "slowpreload.py").write_text(body)
    return {"PYTHONPATH": str(tmp_path)}


def _deploy(client) -> None:
    client.create_function(FunctionName="f", Runtime="python3.11",
                           Role="arn:aws:iam::123456789012:role/r", Handler="app.handler",
                           Code={"ZipFile": make_zip(HANDLER)})


def _init_ms(resp) -> float:
    report = base64.b64decode(resp["LogResult"]).decode().strip().splitlines()[-1]
    return float(report.split("Init Duration: ")[1].split(" ms")[0])


def test_deploy_does_not_wait_for_the_zygote_and_the_first_cold_start_does(tmp_path) -> None:
    env = _slow_module(tmp_path, f"import time\ntime.sleep({PRELOAD_S})\n")
    rt = LocalRuntime(zygote=True, preload=("slowpreload",), extra_env=env,
                      log_file=tmp_path / "s.log")
    try:
        t0 = time.monotonic()
        rt.launch().wait_healthy(timeout=60, zygote=False)
        assert rt.health()["zygote"]["state"] == "starting"
        client = lambda_client(rt.endpoint)
        _deploy(client)
        assert time.monotonic() - t0 < PRELOAD_S  # the control plane answered during the preload
        resp = client.invoke(FunctionName="f", LogType="Tail")
        assert resp["StatusCode"] == 200 and "FunctionError" not in resp
        assert time.monotonic() - t0 >= PRELOAD_S  # the cold start waited for the preload
        assert _init_ms(resp) < 1000  # ...which is the platform's start-up, not the function's
        assert rt.health()["zygote"]["state"] == "ready"
    finally:
        rt.stop()


def test_start_waits_for_the_zygote_by_default(tmp_path) -> None:
    env = _slow_module(tmp_path, "import time\ntime.sleep(2)\n")
    with LocalRuntime(zygote=True, preload=("slowpreload",), extra_env=env,
                      log_file=tmp_path / "s.log") as rt:
        assert rt.health()["zygote"]["state"] == "ready"


def test_a_zygote_that_dies_while_preloading_leaves_cold_starts_to_the_spawner(tmp_path) -> None:
    env = _slow_module(tmp_path, "import os, time\ntime.sleep(1)\nos._exit(3)\n")
    rt = LocalRuntime(zygote=True, preload=("slowpreload",), extra_env=env,
                      log_file=tmp_path / "s.log")
    try:
        rt.launch().wait_healthy(timeout=60, zygote=False)
        client = lambda_client(rt.endpoint)
        _deploy(client)
        resp = client.invoke(FunctionName="f")
        assert resp["StatusCode"] == 200 and "FunctionError" not in resp
        assert isinstance(json.loads(resp["Payload"].read()), int)
        health = rt.health()
        assert health["zygote"] is None and health["launcher"] == "spawn"
    finally:
        rt.stop()
