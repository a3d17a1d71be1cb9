"""The local path for real: deploy to a running local runtime with `stellaris deploy --target
local`, redeploy (no changes), train a tiny `--backend lambda` run against it, destroy."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import boto3
import pytest

from orchestrator.cli import main as stellaris
from runtime.launcher import LocalRuntime


@pytest.fixture(scope="module")
def runtime() -> Iterator[LocalRuntime]:
    rt = LocalRuntime(account_concurrency=16).start()
    yield rt
    rt.stop()


def lambda_names(endpoint: str) -> set[str]:
    client = boto3.client("lambda", endpoint_url=endpoint, region_name="us-east-1",
                          aws_access_key_id="local", aws_secret_access_key="local")
    return {f["FunctionName"] for f in client.list_functions()["Functions"]}


@pytest.mark.timeout(200)
def test_deploy_train_destroy(runtime: LocalRuntime, redis_url: str, tmp_path: Path,
                              capsys: pytest.CaptureFixture[str]) -> None:
    ep = runtime.endpoint
    base = ["deploy", "--target", "local", "--endpoint-url", ep, "--redis-url", redis_url,
            "--prefix", "dt"]
    assert stellaris([*base, "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "3 changes" in out and "+ create  function         dt-actor" in out
    assert lambda_names(ep) == set()

    assert stellaris(base) == 0
    assert "applied 3 changes" in capsys.readouterr().out
    assert {"dt-actor", "dt-learner", "dt-evaluator"} <= lambda_names(ep)

    assert stellaris([*base, "--json"]) == 0  # idempotent: all no-ops
    doc = json.loads(capsys.readouterr().out)
    assert doc["changes"] == 0 and doc["applied"] == []
    assert {s["action"] for s in doc["steps"]} == {"noop"}

    assert stellaris([*base, "--learner-memory-mb", "2048", "--reserved", "actor=4"]) == 0
    out = capsys.readouterr().out
    assert "update  function-config  dt-learner  (changed: MemorySize)" in out
    assert "put     concurrency      dt-actor" in out

    rc = stellaris(["train", "--backend", "lambda", "--endpoint-url", ep, "--redis-url", redis_url,
                    "--set", "function_prefix=dt", "--env", "CartPole-v1", "--total-steps", "4096",
                    "--progress", "none", "--eval-interval-s", "0", "--run-dir", str(tmp_path / "run")])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "done: run" in out
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["env_steps"] >= 4096

    assert stellaris(["destroy", "--target", "local", "--endpoint-url", ep, "--prefix", "dt"]) == 0
    assert "applied 3 changes" in capsys.readouterr().out
    assert not {"dt-actor", "dt-learner", "dt-evaluator"} & lambda_names(ep)


def test_train_before_deploy_says_so(runtime: LocalRuntime, redis_url: str, tmp_path: Path,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    rc = stellaris(["train", "--backend", "lambda", "--endpoint-url", runtime.endpoint,
                    "--redis-url", redis_url, "--set", "function_prefix=never", "--env", "CartPole-v1",
                    "--total-steps", "64", "--progress", "none", "--run-dir", str(tmp_path / "r")])
    assert rc == 2 and "stellaris deploy" in capsys.readouterr().err


def test_unreachable_endpoint(capsys: pytest.CaptureFixture[str]) -> None:
    from runtime.launcher import free_port

    url = f"http://127.0.0.1:{free_port()}"
    assert stellaris(["deploy", "--target", "local", "--endpoint-url", url]) == 4
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"error: local runtime unreachable at {url}: start it with `stellaris runtime "
                   "serve` or `stellaris up`"]
