"""Reliability fixtures: one real runtime server (uvicorn subprocess on 127.0.0.1) whose state
folder sits beside a sentinel folder, so tests can prove nothing is written outside it."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

# Reuse the runtime tests' helpers (boto3 client without retries, zip builder, role ARN, the
# deploy fixture's body).
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "runtime"))
from rt_helpers import ROLE, deployer, lambda_client, make_zip  # noqa: E402

from runtime import LocalRuntime  # noqa: E402


@pytest.fixture(scope="session")
def rel_dirs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("reliability")
    dirs = {"base": base, "state": base / "state", "sentinel": base / "sentinel",
            "log": base / "server.log"}
    dirs["sentinel"].mkdir()
    (dirs["sentinel"] / "canary.txt").write_text("untouched")
    return dirs


@pytest.fixture(scope="session")
def rel_server(rel_dirs: dict[str, Path]) -> Iterator[LocalRuntime]:
    """Zygote with torch preloaded (the store-input tests run the real handlers), fast
    Event retries, default account concurrency (1000, 100 unreserved)."""
    rt = LocalRuntime(zygote=True, preload=("torch",), event_retry_delays=(0.05, 0.1),
                      log_file=rel_dirs["log"], state_dir=rel_dirs["state"])
    rt.start(timeout=180)
    yield rt
    rt.stop()


@pytest.fixture(scope="session")
def rel_client(rel_server: LocalRuntime) -> object:
    return lambda_client(rel_server.endpoint)


@pytest.fixture()
def rel_deploy(rel_client: object) -> Iterator[Callable[..., str]]:
    """Create a function from a dict of files (or a ready zip); deleted after the test."""
    yield from deployer(rel_client, "rel")


__all__ = ["ROLE", "lambda_client", "make_zip"]
