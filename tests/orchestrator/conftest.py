"""Fixtures of the orchestrator tests: moto's S3 served over real HTTP on loopback, and boto3
pointed at it by its own settings (the run folder tests, and evaluate and plot of S3 runs)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from store import free_port


@pytest.fixture(scope="module")
def s3_endpoint() -> Iterator[str]:
    from moto.server import ThreadedMotoServer  # imported by the tests that serve S3 only

    port = free_port("127.0.0.1")
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    yield f"http://127.0.0.1:{port}"
    server.stop()


@pytest.fixture()
def aws(s3_endpoint: str, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """boto3 pointed at moto by its own settings (no code path of ours knows it is a test)."""
    env = {"AWS_ENDPOINT_URL_S3": s3_endpoint, "AWS_ACCESS_KEY_ID": "testing",
           "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"}
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    return env
