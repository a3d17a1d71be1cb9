"""``LocalRuntime``: start the runtime server as a subprocess, use it, stop it cleanly.

    with LocalRuntime(account_concurrency=8) as rt:
        client = boto3.client("lambda", endpoint_url=rt.endpoint, ...)
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterable
from pathlib import Path
from typing import IO, Any

import httpx
import psutil

from runtime.spawner import DEFAULT_PRELOAD

_REPO = Path(__file__).resolve().parent.parent


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


class LocalRuntime:
    def __init__(self, host: str = "127.0.0.1", port: int | None = None, zygote: bool = True,
                 preload: Iterable[str] = DEFAULT_PRELOAD,
                 account_concurrency: int = 1000, extra_env: dict[str, str] | None = None,
                 log_file: str | os.PathLike[str] | None = None, idle_timeout: float | None = None,
                 state_dir: str | os.PathLike[str] | None = None,
                 event_retry_delays: Iterable[float] | None = None, auth: str = "none",
                 credentials: dict[str, str] | None = None, extra_args: Iterable[str] = (),
                 invoke_latency_ms: float = 0.0, invoke_latency_sigma: float = 0.0) -> None:
        self.host = host
        self.port = port
        self.zygote = zygote
        self.preload = tuple(preload)
        self.account_concurrency = account_concurrency
        self.extra_env = dict(extra_env or {})
        self.log_file = log_file
        self.idle_timeout = idle_timeout
        self.state_dir = state_dir
        self.event_retry_delays = tuple(event_retry_delays) if event_retry_delays is not None else None
        self.auth = auth
        self.credentials = dict(credentials or {})
        self.extra_args = list(extra_args)
        self.invoke_latency_ms = invoke_latency_ms
        self.invoke_latency_sigma = invoke_latency_sigma
        self.proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    @property
    def endpoint(self) -> str:
        return f"http://{self.host}:{self.port}"

    def command(self) -> list[str]:
        cmd = [sys.executable, "-m", "runtime", "serve", "--host", self.host, "--port", str(self.port),
               "--zygote" if self.zygote else "--no-zygote", "--preload", ",".join(self.preload),
               "--account-concurrency", str(self.account_concurrency), "--auth", self.auth]
        if self.idle_timeout is not None:
            cmd += ["--idle-timeout", str(self.idle_timeout)]
        if self.state_dir is not None:
            cmd += ["--state-dir", str(self.state_dir)]
        if self.event_retry_delays is not None:
            cmd += ["--event-retry-delays", ",".join(str(d) for d in self.event_retry_delays)]
        if self.invoke_latency_ms > 0:
            cmd += ["--invoke-latency-ms", str(self.invoke_latency_ms),
                    "--invoke-latency-sigma", str(self.invoke_latency_sigma)]
        return cmd + self.extra_args

    def start(self, timeout: float = 60.0) -> LocalRuntime:
        """Launch the server; wait until it answers and its zygote has preloaded."""
        self.launch()
        return self.wait_healthy(timeout)

    def launch(self) -> LocalRuntime:
        """Start the server process and return at once: its start-up (the zygote's imports)
        can overlap the caller's own."""
        if self.proc is not None:
            return self
        if self.port is None:
            self.port = free_port(self.host)
        env = {**os.environ, **self.extra_env}
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(_REPO), env.get("PYTHONPATH", "")) if p)
        if self.credentials:
            env["STELLARIS_RUNTIME_CREDENTIALS"] = ",".join(f"{k}:{v}" for k, v in self.credentials.items())
        out: Any = None
        if self.log_file is not None:
            self._log = open(self.log_file, "ab")  # noqa: SIM115 - closed in stop()
            out = self._log
        # Own session: stop() can signal the server and its zygote as one group.
        self.proc = subprocess.Popen(self.command(), env=env, stdout=out, stderr=out,
                                     stdin=subprocess.DEVNULL, start_new_session=True)
        return self

    def wait_healthy(self, timeout: float = 60.0, zygote: bool = True) -> LocalRuntime:
        """Wait until the API answers and, with ``zygote``, until the zygote has preloaded
        (or failed, and cold starts spawn): what a cold-start measurement needs. Without it,
        functions can be deployed at once and the first cold start waits for the preload."""
        if self.proc is None:
            raise RuntimeError("runtime not launched")
        deadline = time.monotonic() + timeout
        with httpx.Client(timeout=2.0) as client:
            while True:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"runtime exited with {self.proc.returncode} during start")
                try:
                    r = client.get(f"{self.endpoint}/stellaris/v1/health")
                    if r.status_code == 200 and not (
                            zygote and (r.json().get("zygote") or {}).get("state") == "starting"):
                        return self
                except httpx.HTTPError:
                    pass
                if time.monotonic() > deadline:
                    self.stop()
                    raise TimeoutError(f"runtime not healthy after {timeout} s")
                time.sleep(0.1)

    def _descendants(self) -> list[psutil.Process]:
        try:
            return psutil.Process(self.proc.pid).children(recursive=True) if self.proc else []
        except psutil.NoSuchProcess:
            return []

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM (the server kills its workers), then SIGKILL whatever is left."""
        if self.proc is None:
            return
        survivors = self._descendants()
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        # Workers live in their own sessions; anything the server missed goes now.
        for p in survivors:
            with contextlib.suppress(psutil.NoSuchProcess):
                p.kill()
        psutil.wait_procs(survivors, timeout=5)
        self.proc = None
        if self._log is not None:
            self._log.close()
            self._log = None

    def _get(self, path: str) -> Any:
        headers: dict[str, str] = {}
        url = f"{self.endpoint}{path}"
        if self.auth == "sigv4" and self.credentials:
            from botocore.auth import SigV4Auth
            from botocore.awsrequest import AWSRequest
            from botocore.credentials import Credentials

            akid, secret = next(iter(self.credentials.items()))
            req = AWSRequest(method="GET", url=url)
            SigV4Auth(Credentials(akid, secret), "lambda", "us-east-1").add_auth(req)
            headers = dict(req.headers.items())
        r = httpx.get(url, headers=headers, timeout=10.0)
        r.raise_for_status()
        return r.json()

    def billing(self) -> dict[str, Any]:
        return self._get("/stellaris/v1/billing")

    def health(self) -> dict[str, Any]:
        return self._get("/stellaris/v1/health")

    def __enter__(self) -> LocalRuntime:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
