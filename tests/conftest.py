"""Shared fixtures: a real redis-server on a free loopback port, a fresh run per test."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import pytest

# Every torch process shares two cores with the others: one thread each
# (docs/architecture.md#performance-on-two-cores).
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")

from store import EmbeddedRedis, RunStore, Store  # noqa: E402


@pytest.fixture(scope="session")
def redis_server() -> Iterator[EmbeddedRedis]:
    """One real redis-server for the whole session (tests use distinct run ids)."""
    server = EmbeddedRedis().start()
    yield server
    server.close()


@pytest.fixture()
def redis_url(redis_server: EmbeddedRedis) -> str:
    return redis_server.url


@pytest.fixture()
def store(redis_url: str) -> Iterator[Store]:
    s = Store(redis_url, retry_seconds=2.0)
    yield s
    s.close()


@pytest.fixture()
def run_id() -> str:
    return f"test-{uuid.uuid4().hex[:12]}"


@pytest.fixture()
def run_store(store: Store, run_id: str) -> Iterator[RunStore]:
    rs = RunStore(store, run_id)
    yield rs
    rs.clear()


@pytest.fixture()
def restartable_redis() -> Iterator[EmbeddedRedis]:
    """A private redis-server that a test may kill and restart on the same port."""
    server = EmbeddedRedis().start()
    yield server
    server.close()
