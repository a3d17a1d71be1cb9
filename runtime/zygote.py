"""The zygote: a pre-initialised process that forks execution environments on request.

Importing torch and gymnasium takes seconds; forking a process that already has them
takes milliseconds, so cold starts of handlers that import them become cheap. Run as
``python zygote.py MOD1,MOD2``. Protocol on stdin/stdout, one JSON object per line:
request ``{"sock", "env_id", "env", "log"}`` -> reply ``{"pid"}`` or ``{"error"}``.
Stdlib only apart from the preloaded modules.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import time
from typing import Any

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, _HERE)
import worker  # type: ignore[import-not-found]  # noqa: E402

sys.path = [p for p in sys.path if os.path.abspath(p or ".") != _HERE]
del sys.modules["worker"]


def preload(modules: list[str]) -> tuple[list[str], dict[str, str]]:
    loaded, failed = [], {}
    for name in modules:
        try:
            mod = __import__(name)
        except Exception as exc:  # noqa: BLE001 - a missing optional module is not fatal
            failed[name] = f"{type(exc).__name__}: {exc}"
            continue
        if name == "torch":
            # One thread each: many environments share the machine's few cores, and torch's
            # default of a thread per core would have them all contend for every core.
            mod.set_num_threads(1)
        loaded.append(name)
    return loaded, failed


def _child(req: dict[str, Any], reply_fd: int) -> None:
    """In the forked child: become an independent environment and run the worker."""
    os.setsid()  # own process group, so the server can kill it and everything it starts
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # the zygote ignores it; user code must not
    os.close(reply_fd)
    log_fd = os.open(req["log"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    null_fd = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null_fd, 0)
    os.dup2(log_fd, 1)
    os.dup2(log_fd, 2)
    os.close(log_fd)
    os.close(null_fd)
    sys.stdin = open(0, closefd=False)  # noqa: SIM115 - lives as long as the process
    sys.stdout = open(1, "w", buffering=1, closefd=False)  # noqa: SIM115
    sys.stderr = open(2, "w", buffering=1, closefd=False)  # noqa: SIM115
    os.environ.clear()
    os.environ.update(req["env"])
    worker.serve(req["sock"], req["env_id"])


def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def main() -> None:
    t0 = time.perf_counter()
    modules = [m for m in (sys.argv[1] if len(sys.argv) > 1 else "").split(",") if m]
    rss_before = _rss_bytes()
    loaded, failed = preload(modules)
    rss_after = _rss_bytes()
    # Children are reaped by the kernel; the server tracks them through their sockets.
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)
    out = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # stray prints from preloaded modules must not corrupt the reply channel
    # The server discounts the preloaded modules' pages (shared with every child, like a
    # shared library) from each environment's memory, so a no-op function fits in 128 MB.
    out.write(json.dumps({"ready": True, "loaded": loaded, "failed": failed,
                          "ms": (time.perf_counter() - t0) * 1000.0,
                          "preload_rss": rss_after - rss_before}) + "\n")
    children: list[int] = []
    for line in sys.stdin:
        try:
            req = json.loads(line)
            pid = os.fork()
        except (ValueError, OSError) as exc:
            out.write(json.dumps({"error": str(exc)}) + "\n")
            continue
        if pid == 0:
            code = 0
            try:
                _child(req, out.fileno())
            except BaseException:  # noqa: BLE001 - the child must never return into this loop
                code = 1
            finally:
                os._exit(code)
        children.append(pid)
        out.write(json.dumps({"pid": pid}) + "\n")
    # stdin closed: the server is gone. Take every environment we forked down with us.
    for pid in children:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)


if __name__ == "__main__":
    main()
