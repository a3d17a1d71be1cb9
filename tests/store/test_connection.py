"""Connection handling: URL resolution, embedded default, Redis killed and restarted."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import redis
from store_servers import TlsFront, self_signed_cert

from store import (
    EmbeddedRedis,
    InvalidStoreUrl,
    ParamStore,
    RunStore,
    Store,
    StoreUnavailable,
    parse_store_url,
    redact,
    resolve_url,
)
from store.keys import validate_run_id


def test_resolve_url_rejects_unknown_scheme() -> None:
    with pytest.raises(ValueError, match="unsupported Redis URL scheme"):
        resolve_url("http://localhost:6379")
    assert resolve_url("unix:///tmp/r.sock") == "unix:///tmp/r.sock"


def test_store_urls_are_checked_before_use() -> None:
    tls = parse_store_url("rediss+cluster://u:pw@cfg.example.com:6379/0?ssl_cert_reqs=required"
                          "&ssl_ca_certs=/etc/ca.pem&ssl_check_hostname=false")
    assert (tls.tls, tls.cluster, tls.base) == (True, True, "rediss://u:pw@cfg.example.com:6379/0")
    assert tls.options == {"ssl_cert_reqs": "required", "ssl_ca_certs": "/etc/ca.pem",
                           "ssl_check_hostname": False}
    assert not tls.loopback
    assert parse_store_url("redis://localhost:1").loopback
    assert parse_store_url("redis://[::1]:1").loopback and parse_store_url("unix:///s").loopback
    bad = {
        "redis://h:1/0?ssl_ca_certs=/x": "TLS options need rediss://",
        "rediss://h:1/0?sslmode=on": "unknown option 'sslmode'",
        "rediss://h:1/0?ssl_cert_reqs=maybe": "expected none, optional or required",
        "redis+cluster://h:1/3": "only database 0",
        "redis+cluster://h:1/0?db=2": "only database 0",
        "redis://:pw@/0": "names no host",
        "redis://h:99999/0": "malformed",
        "redis://h:1/zero": "database number",
    }
    for url, message in bad.items():
        with pytest.raises(InvalidStoreUrl, match=message) as info:
            Store(url)
        assert "pw" not in str(info.value)


@pytest.fixture()
def tls_redis(redis_server: EmbeddedRedis, tmp_path: Path) -> Iterator[tuple[int, Path]]:
    """(port, CA file) of a real TLS listener in front of the session's redis-server."""
    cert, key = self_signed_cert(tmp_path)
    front = TlsFront(cert, key, [redis_server.port]).start()
    yield front.ports[0], cert
    front.close()


def test_rediss_verifies_the_server(tls_redis: tuple[int, Path]) -> None:
    port, ca = tls_redis
    rs = RunStore(Store(f"rediss://127.0.0.1:{port}/0?ssl_ca_certs={ca}"), "over-tls")
    rs.params.publish(0, {"w": [1.0]})
    assert rs.params.latest().tensors["w"].tolist() == [1.0]
    rs.clear()
    # no CA for a self-signed certificate: refused, named, quickly
    with pytest.raises(StoreUnavailable, match="certificate verify failed"):
        Store(f"rediss://127.0.0.1:{port}/0", retry_seconds=0.2).ping()
    # verification off on request (a URL option, as redis-py spells it)
    assert Store(f"rediss://127.0.0.1:{port}/0?ssl_cert_reqs=none").ping()
    # plain text at a TLS port is no Redis conversation
    with pytest.raises(StoreUnavailable):
        Store(f"redis://127.0.0.1:{port}/0", retry_seconds=0.2, socket_timeout=1.0).ping()


def test_redact_hides_password() -> None:
    assert redact("redis://user:s3cret@host:6380/0") == "redis://user:***@host:6380/0"
    assert "s3cret" not in str(StoreUnavailable(redact("redis://:s3cret@h:1/0")))


def test_invalid_run_ids() -> None:
    for bad in ("", "a b", "x" * 200, "../etc", "a}b", "-lead"):
        with pytest.raises(ValueError):
            validate_run_id(bad)


def test_unreachable_redis_is_store_unavailable() -> None:
    s = Store("redis://127.0.0.1:1/0", retry_seconds=0.3)
    with pytest.raises(StoreUnavailable, match="127.0.0.1:1"):
        s.ping()


def test_embedded_default_in_a_fresh_process() -> None:
    """No REDIS_URL: the store starts its own real redis-server and stops it at exit."""
    code = (
        "import os; os.environ.pop('REDIS_URL', None)\n"
        "from store import Store, ParamStore\n"
        "s = Store(); ps = ParamStore(s, 'emb')\n"
        "ps.publish(0, {'w': [1.0, 2.0]}); print(ps.latest().tensors['w'].tolist(), s.url)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "[1.0, 2.0] redis://127.0.0.1:" in out.stdout


def test_redis_killed_and_restarted(restartable_redis: EmbeddedRedis) -> None:
    store = Store(restartable_redis.url, retry_seconds=0.5)
    rs = RunStore(store, "restart")
    rs.params.publish(0, {"w": np.zeros(3)})
    rs.traj.ensure_group("g")
    acked_id = rs.traj.append({"i": 0})
    restartable_redis.kill()
    with pytest.raises(StoreUnavailable):
        rs.params.latest_version()
    restartable_redis.start()
    # Redis came back empty (no persistence): clear errors, then the owner republishes.
    assert rs.params.latest_version() is None
    rs.params.publish(0, {"w": np.ones(3)})
    assert rs.params.latest().version == 0
    assert acked_id  # the read path recreates a vanished consumer group
    assert rs.traj.read("g", "c", block_ms=10) == []


def test_retry_bridges_a_short_outage(restartable_redis: EmbeddedRedis) -> None:
    """A call made while Redis is down succeeds once it is back within retry_seconds."""
    store = Store(restartable_redis.url, retry_seconds=15)
    ps = ParamStore(store, "bridge")
    ps.publish(0, {"w": np.zeros(2)})
    restartable_redis.kill()
    restarter = threading.Timer(0.7, restartable_redis.start)
    restarter.start()
    t0 = time.monotonic()
    ps.publish(0, {"w": np.ones(2)})  # retried until the server is back
    restarter.join()
    assert time.monotonic() - t0 >= 0.5
    assert ps.latest().tensors["w"].tolist() == [1.0, 1.0]


def test_acknowledged_writes_survive_a_crash_with_persistence(tmp_path) -> None:
    """With persistence on, what Redis acknowledged before a kill -9 is there after restart."""
    server = EmbeddedRedis(data_dir=tmp_path, persist=True).start()
    try:
        store = Store(server.url, retry_seconds=0.5)
        rs = RunStore(store, "durable")
        for v in range(3):
            rs.params.publish(v, {"w": np.full(4, v, dtype=np.float32)})
        ids = [rs.grads.append({"i": i}, blob=b"g", dedupe_id=f"inv:{i}") for i in range(4)]
        server.kill()
        with pytest.raises(StoreUnavailable):
            rs.params.latest_version()
        server.start()
        assert rs.params.latest().tensors["w"].tolist() == [2.0] * 4
        assert [e.meta["i"] for e in rs.grads.get(ids)] == [0, 1, 2, 3]  # type: ignore[union-attr]
        # The de-duplication memory survived too: a retried producer still cannot re-add.
        assert rs.grads.append({"i": 0}, blob=b"g", dedupe_id="inv:0") is None
    finally:
        server.close()


def test_refused_credentials_fail_at_once_not_after_the_retries() -> None:
    with EmbeddedRedis() as server:
        redis.Redis(port=server.port).config_set("requirepass", "s3cret")
        t0 = time.monotonic()
        with pytest.raises(StoreUnavailable, match="Authentication required"):
            Store(server.url, retry_seconds=10).ping()
        assert time.monotonic() - t0 < 2.0
        assert Store(f"redis://:s3cret@127.0.0.1:{server.port}/0").ping()
