"""``stellaris deploy --env-package``: a custom env's package ships at the root of the
functions' zip. The zip's contents and the refused packages; then a deploy to a running local
runtime, which unpacks that zip as Lambda does, and an actor there that samples the custom env
(its package on no path of the runtime's but the zip's), beside one deployed without it."""

from __future__ import annotations

import io
import json
import os
import uuid
import zipfile
from collections.abc import Iterator
from pathlib import Path

import boto3
import pytest

from deploy.package import BadEnvPackage, build_function_zip, check_env_package, code_sha256
from functions.hyper import PolicySpec
from functions.policy import init_policy, policy_meta
from orchestrator.cli import main as stellaris
from runtime.launcher import LocalRuntime
from store import RunStore, Store

REPO = Path(__file__).resolve().parents[2]
ENVPKG = REPO / "tests" / "envpkg" / "stellaris_testenvs"
LINE = "stellaris_testenvs.line:StellarisLine-v0"


def _names(zip_bytes: bytes) -> list[str]:
    return zipfile.ZipFile(io.BytesIO(zip_bytes)).namelist()


def _package(root: Path, name: str, files: dict[str, str] | None = None) -> Path:
    pkg = root / name
    pkg.mkdir(parents=True)
    for rel, text in {"__init__.py": "", **(files or {})}.items():
        (pkg / rel).parent.mkdir(parents=True, exist_ok=True)
        (pkg / rel).write_text(text)
    return pkg


def _touch(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("")
    return path


def test_the_package_sits_at_the_zip_root_beside_ours(tmp_path: Path) -> None:
    plain = _names(build_function_zip())
    names = _names(build_function_zip(env_packages=[ENVPKG]))
    assert {"stellaris_testenvs/__init__.py", "stellaris_testenvs/line.py"} <= set(names)
    assert set(names) - set(plain) == {n for n in names if n.startswith("stellaris_testenvs/")}
    assert "functions/actor.py" in names and "store/__init__.py" in names
    # its assets go too; bytecode caches and hidden files do not
    pkg = _package(tmp_path, "my_envs", {"assets/walker.xml": "<mujoco/>", "envs.py": "",
                                         "__pycache__/envs.cpython-311.pyc": "x",
                                         ".hidden": "x", "stale.pyc": "x"})
    got = {n for n in _names(build_function_zip(env_packages=[pkg])) if n.startswith("my_envs/")}
    assert got == {"my_envs/__init__.py", "my_envs/assets/walker.xml", "my_envs/envs.py"}
    # deterministic: the same packages in any order give the same CodeSha256
    both = [build_function_zip(env_packages=order) for order in ([ENVPKG, pkg], [pkg, ENVPKG])]
    assert code_sha256(both[0]) == code_sha256(both[1])


@pytest.mark.parametrize("make, match", [
    (lambda t: t / "missing", "no such folder"),
    (lambda t: _touch(t / "file.py"), "not a folder"),
    (lambda t: _touch(t / "no_init" / "envs.py").parent, r"not a package \(no __init__.py"),
    (lambda t: _package(t, "my-envs"), "'my-envs' is not an importable package name"),
    (lambda t: _package(t, "store"), "would shadow Stellaris's own package"),
    (lambda t: _package(t, "runtime"), "would shadow Stellaris's own package"),
    (lambda t: _package(t, "json"), "would shadow the standard library's module"),
    (lambda t: _package(t, "gymnasium"), "from gymnasium, which the functions use"),
    (lambda t: _package(t, "numpy"), "from numpy, which the functions use"),
])
def test_a_package_that_cannot_ship_is_named(tmp_path: Path, make, match: str) -> None:
    with pytest.raises(BadEnvPackage, match=match):
        check_env_package(make(tmp_path))


def test_two_packages_of_one_name_are_refused(tmp_path: Path) -> None:
    twin = _package(tmp_path, "stellaris_testenvs")
    with pytest.raises(BadEnvPackage, match="two packages named 'stellaris_testenvs'"):
        build_function_zip(env_packages=[ENVPKG, twin])


def test_the_cli_names_a_bad_package_and_sends_the_aws_target_to_the_image(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # the package is checked before any endpoint is tried (this one has no runtime)
    rc = stellaris(["deploy", "--target", "local", "--endpoint-url", "http://127.0.0.1:9",
                    "--env-package", str(tmp_path / "missing")])
    assert rc == 2
    assert capsys.readouterr().err.strip() == f"error: --env-package {tmp_path / 'missing'}: no such folder"
    for extra in (["--image-uri", "123456789012.dkr.ecr.us-east-1.amazonaws.com/s:1"],
                  ["--export", str(tmp_path / "stack")]):
        rc = stellaris(["deploy", "--target", "aws", *extra, "--env-package", str(ENVPKG)])
        err = capsys.readouterr().err
        assert rc == 2 and "COPY <pkg>/ ${LAMBDA_TASK_ROOT}/<pkg>/" in err, err
    assert not (tmp_path / "stack").exists()


# -- on a running local runtime ---------------------------------------------------------------
@pytest.fixture(scope="module")
def runtime() -> Iterator[LocalRuntime]:
    # the runtime's processes must not find the package anywhere but in the zip
    assert "envpkg" not in os.environ.get("PYTHONPATH", "")
    rt = LocalRuntime(account_concurrency=4).start()
    yield rt
    rt.stop()


def _lambda(endpoint: str):
    return boto3.client("lambda", endpoint_url=endpoint, region_name="us-east-1",
                        aws_access_key_id="local", aws_secret_access_key="local")


@pytest.mark.timeout(240)
def test_an_actor_deployed_with_the_package_samples_the_custom_env(
        runtime: LocalRuntime, redis_url: str, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    base = ["deploy", "--target", "local", "--endpoint-url", runtime.endpoint,
            "--redis-url", redis_url]
    monkeypatch.chdir(REPO)  # the path as a user in a checkout gives it
    assert stellaris([*base, "--prefix", "envpkg",
                      "--env-package", "tests/envpkg/stellaris_testenvs"]) == 0
    assert stellaris([*base, "--prefix", "plain"]) == 0
    capsys.readouterr()
    lam = _lambda(runtime.endpoint)
    want = code_sha256(build_function_zip(env_packages=[ENVPKG]))
    assert lam.get_function(FunctionName="envpkg-actor")["Configuration"]["CodeSha256"] == want

    # the run's first policy, built here where the package is importable as a user's is
    monkeypatch.syspath_prepend(str(ENVPKG.parent))
    store = Store(redis_url)
    rs = RunStore(store, f"envpkg-{uuid.uuid4().hex[:8]}")
    try:
        model, tensors = init_policy(LINE, PolicySpec(hidden_sizes=[8, 8]), 0)
        rs.params.publish(0, tensors, policy_meta(model))
        event = {"run_id": rs.run_id, "redis_url": redis_url, "env_id": LINE, "n_envs": 2,
                 "steps": 64, "invocation_id": "envpkg-1"}
        resp = lam.invoke(FunctionName="envpkg-actor", Payload=json.dumps(event).encode())
        out = json.loads(resp["Payload"].read())
        assert "FunctionError" not in resp, out
        assert out["steps"] == 128 and out["behaviour_version"] == 0 and out["trajectory_id"]
        assert rs.traj.get([out["trajectory_id"]])[0] is not None

        resp = lam.invoke(FunctionName="plain-actor",
                          Payload=json.dumps({**event, "invocation_id": "plain-1"}).encode())
        out = json.loads(resp["Payload"].read())
        assert resp.get("FunctionError") and out["errorType"] == "UnknownEnv", out
        assert "cannot import module 'stellaris_testenvs.line'" in out["errorMessage"]
    finally:
        rs.clear()
        store.close()
        for prefix in ("envpkg", "plain"):
            stellaris(["destroy", "--target", "local", "--endpoint-url", runtime.endpoint,
                       "--prefix", prefix])
