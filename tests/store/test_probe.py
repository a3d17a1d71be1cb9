"""store.probe: one attempt from wherever it runs, and every failure named by its kind."""

from __future__ import annotations

import http.server
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from store_servers import TlsFront, self_signed_cert

from store import EmbeddedRedis, free_port
from store.probe import probe


@pytest.fixture()
def silent_port() -> Iterator[int]:
    """A port that accepts connections and never answers."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(0)
    yield sock.getsockname()[1]
    sock.close()


@pytest.fixture()
def http_port() -> Iterator[int]:
    """Something that is not Redis."""
    server = http.server.HTTPServer(("127.0.0.1", 0), http.server.BaseHTTPRequestHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


def test_a_working_store(redis_url: str) -> None:
    report = probe(redis_url, "probe-ok")
    assert report["ok"] and report["kind"] is None and report["stage"] == "write"
    assert report["server"] == {"redis_version": report["server"]["redis_version"],
                                "cluster": False}
    assert redis.Redis.from_url(redis_url).keys("stellaris:{probe-ok}:*") == []  # cleaned up


def test_failures_are_named(silent_port: int, http_port: int) -> None:
    cases = {
        f"redis://127.0.0.1:{free_port()}/0": ("connect", "refused"),
        "redis://no-such-host.invalid:6379/0": ("connect", "dns"),
        f"redis://127.0.0.1:{silent_port}/0": ("connect", "timeout"),
        f"redis://127.0.0.1:{http_port}/0": ("connect", "protocol"),
        "redis+cluster://no-such-host.invalid:6379/0": ("connect", "dns"),
        "rediss://h:1/0?ssl_cert_reqs=sometimes": ("url", "url"),
    }
    for url, (stage, kind) in cases.items():
        report = probe(url, "probe-bad", timeout_s=0.5)
        assert (report["ok"], report["stage"], report["kind"]) == (False, stage, kind), report
        assert report["elapsed_ms"] < 3000


def test_auth_and_tls_failures(tmp_path: Path) -> None:
    with EmbeddedRedis() as server:
        redis.Redis(port=server.port).config_set("requirepass", "s3cret")
        assert probe(server.url, "p")["kind"] == "auth"
        wrong = probe(f"redis://:nope@127.0.0.1:{server.port}/0", "p")
        assert wrong["kind"] == "auth" and "nope" not in str(wrong)
        assert probe(f"redis://:s3cret@127.0.0.1:{server.port}/0", "p")["ok"]
        cert, key = self_signed_cert(tmp_path)
        front = TlsFront(cert, key, [server.port]).start()
        try:
            tls = f"rediss://:s3cret@127.0.0.1:{front.ports[0]}/0"
            assert probe(tls, "p")["kind"] == "tls"  # self-signed, no CA given
            assert probe(f"{tls}?ssl_ca_certs={cert}", "p")["ok"]
        finally:
            front.close()
