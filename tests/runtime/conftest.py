"""Runtime fixtures: real runtime servers (subprocess + uvicorn on a free loopback port)
and real boto3 Lambda clients."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from rt_helpers import deployer, lambda_client

from runtime import LocalRuntime


@pytest.fixture(scope="session")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalRuntime]:
    """The shared server: zygote with torch preloaded, small account limit, fast retries."""
    log = tmp_path_factory.mktemp("runtime") / "server.log"
    rt = LocalRuntime(zygote=True, preload=("torch",), account_concurrency=12,
                      event_retry_delays=(0.2, 0.4), log_file=log,
                      extra_args=["--unreserved-min", "2"])
    rt.start(timeout=120)
    yield rt
    rt.stop()


@pytest.fixture(scope="session")
def client(server: LocalRuntime) -> object:
    return lambda_client(server.endpoint)


@pytest.fixture()
def deploy(client: object) -> Iterator[Callable[..., str]]:
    """Create a function from a dict of files; deleted after the test."""
    yield from deployer(client, "fn")
