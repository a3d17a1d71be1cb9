"""Helpers to run `stellaris` commands as processes (the compose services, `stellaris up`)."""

from __future__ import annotations

import contextlib
import os
import selectors
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def stellaris_argv(command: list[str]) -> list[str]:
    """``["stellaris", ...]`` -> the installed console script (or ``python -m orchestrator.cli``)."""
    assert command[0] == "stellaris", command
    script = Path(sys.executable).with_name("stellaris")
    head = [str(script)] if script.exists() else [sys.executable, "-m", "orchestrator.cli"]
    return head + command[1:]


def process_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("STELLARIS_")}
    env.update({"OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"})
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
    env.update(extra or {})
    return env


def start(argv: list[str], env: dict[str, str], cwd: Path | None = None,
          capture: bool = True) -> subprocess.Popen[str]:
    """Start in its own session so that stop() can signal the whole group."""
    return subprocess.Popen(argv, env=env, cwd=cwd, text=True, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE if capture else subprocess.DEVNULL,
                            stderr=subprocess.STDOUT, start_new_session=True)


def read_until(proc: subprocess.Popen[str], marker: str, timeout: float) -> str:
    """``proc``'s output up to and including the line with ``marker`` (blocking reads of the
    raw pipe: a buffered readline could hold lines that select() no longer reports)."""
    assert proc.stdout is not None
    fd = proc.stdout.fileno()
    sel = selectors.DefaultSelector()
    sel.register(fd, selectors.EVENT_READ)
    buf = b""
    deadline = time.monotonic() + timeout
    try:
        while True:
            text = buf.decode(errors="replace")
            if marker in text:
                return text
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"no {marker!r} after {timeout} s; output so far:\n{text}")
            if not sel.select(timeout=left):
                continue
            chunk = os.read(fd, 65536)
            if not chunk:
                raise RuntimeError(f"process exited ({proc.poll()}) before {marker!r}:\n{text}")
            buf += chunk
    finally:
        sel.close()


def wait_healthy(check: list[str], env: dict[str, str], proc: subprocess.Popen[str],
                 timeout: float = 90.0) -> None:
    """Run a health-check command until it exits 0 (every 0.5 s), like Docker does."""
    deadline = time.monotonic() + timeout
    while True:
        assert proc.poll() is None, f"service exited with {proc.returncode} before it was healthy"
        r = subprocess.run(check, env=env, capture_output=True, text=True, timeout=30)
        if r.returncode == 0:
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"{check} still failing after {timeout} s: {r.stdout}{r.stderr}")
        time.sleep(0.5)


def stop(proc: subprocess.Popen[str], sig: int = signal.SIGTERM, timeout: float = 20.0) -> int:
    """Signal the process (it cleans up its children), then kill its group if it lingers."""
    if proc.poll() is None:
        proc.send_signal(sig)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    if proc.stdout is not None:
        proc.stdout.close()
    return proc.returncode


RAY_CLI = str(Path(sys.executable).parent / "ray")  # the venv's, whatever PATH holds


@contextlib.contextmanager
def ray_head(cwd: Path) -> Iterator[tuple[int, dict[str, str]]]:
    """A throwaway loopback Ray head as its own process group: yields (port, the env to join it
    with). Token auth is Ray's default for new clusters; this one opts out (docs/clusters.md
    shows a real cluster's token). Stopped by its group — `ray stop` would stop every Ray of
    this user on the machine, other runs' included — and checked to leave nothing behind."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = process_env({"RAY_AUTH_MODE": "disabled"})
    env.pop("RAY_ADDRESS", None)
    temp = tempfile.mkdtemp(prefix="ray-", dir="/tmp")  # Ray's socket paths must stay short
    head = start([RAY_CLI, "start", "--head", "--node-ip-address=127.0.0.1", f"--port={port}",
                  "--num-cpus=2", "--num-gpus=0", "--include-dashboard=false",
                  f"--temp-dir={temp}", "--block"], env, cwd=cwd)
    try:
        read_until(head, "will now block", timeout=90)
        yield port, env
        assert head.poll() is None  # drivers come and go; the cluster stays
    finally:
        stop(head, timeout=15)
        shutil.rmtree(temp, ignore_errors=True)
    leftovers = subprocess.run(["pgrep", "-g", str(head.pid)], capture_output=True, text=True)
    assert leftovers.stdout.strip() == "", "ray head left processes behind"
