"""deploy/k8s: the RayCluster example and its node image carry what KubeRay needs (no cluster
here: the manifest and the Dockerfile are read and checked; hadolint lints the Dockerfile)."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import yaml
from procs import REPO

K8S = REPO / "deploy" / "k8s"


def _docs() -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all((K8S / "raycluster.yaml").read_text()) if d]


def _ray_pin() -> str:
    extra = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    (pin,) = [r for r in extra["ray"] if r.startswith("ray==")]
    return pin.split("==")[1]


def test_the_node_image_has_what_kuberay_probes_and_the_driver_need() -> None:
    text = (K8S / "Dockerfile.ray-node").read_text()
    # Ray and Python as the driver's: a driver of another version is refused
    assert re.search(rf"^ARG RAY_VERSION={re.escape(_ray_pin())}$", text, re.M)
    assert re.search(rf"^FROM python:{sys.version_info[0]}\.{sys.version_info[1]}-", text, re.M)
    # the dashboard and its agent answer the probes; the probes run wget in bash
    assert '"ray[default]==${RAY_VERSION}"' in text
    assert re.search(r"apt-get install -y --no-install-recommends .*\bwget\b", text)
    for src in re.findall(r"^COPY (\S+) ", text, re.M):
        assert (REPO / src).exists(), src
    assert (K8S / "Dockerfile.ray-node.dockerignore").exists()
    exe = Path(sys.executable).with_name("hadolint")
    out = subprocess.run([str(exe), "--no-color", "--failure-threshold", "info",
                          str(K8S / "Dockerfile.ray-node")], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr


def test_the_raycluster_example() -> None:
    docs = _docs()
    (cluster,) = [d for d in docs if d["kind"] == "RayCluster"]
    spec = cluster["spec"]
    assert cluster["apiVersion"] == "ray.io/v1" and spec["rayVersion"] == _ray_pin()
    head = spec["headGroupSpec"]
    assert head["rayStartParams"]["dashboard-host"] == "0.0.0.0"  # job submission, probes
    assert head["rayStartParams"]["num-cpus"] == "0"  # the driver's pod runs no functions
    pods = [head["template"]["spec"]] + [g["template"]["spec"] for g in spec["workerGroupSpecs"]]
    for pod in pods:
        (c,) = pod["containers"]
        assert c["image"].startswith("stellaris-ray:")
        env = {e["name"]: e for e in c["env"]}
        assert env["RAY_AUTH_TOKEN"]["valueFrom"]["secretKeyRef"]["name"] == "stellaris-ray-token"
        assert c["resources"]["requests"] == c["resources"]["limits"]  # guaranteed QoS
    groups = {g["groupName"]: g for g in spec["workerGroupSpecs"]}
    gpu = groups["gpu"]["template"]["spec"]["containers"][0]
    assert gpu["resources"]["limits"]["nvidia.com/gpu"] == "1" and gpu["image"].endswith(":cuda")
    assert groups["gpu"]["minReplicas"] >= 1  # learner_gpus is sized by the GPUs Ray sees
    # the Redis every pod reaches by the URL the header's command gives
    (svc,) = [d for d in docs if d["kind"] == "Service"]
    assert svc["metadata"]["name"] == "stellaris-redis"
    assert "redis://stellaris-redis:6379/0" in (K8S / "raycluster.yaml").read_text()
