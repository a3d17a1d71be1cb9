"""How worker processes come to life: spawned fresh (``--no-zygote``) or forked by the zygote."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
import sys
from pathlib import Path

log = logging.getLogger("runtime.spawner")
_HERE = Path(__file__).resolve().parent
WORKER = _HERE / "worker.py"
ZYGOTE = _HERE / "zygote.py"

# What the zygote imports before it forks: the libraries the functions import, so a cold start
# forks them in milliseconds instead of importing them (like a Lambda layer in a SnapStart
# snapshot). torch's compiler stack is one of them: a compiled learner imports dynamo and
# inductor on its first step, which alone took 3.3-4.0 s after torch, gymnasium and numpy
# (`python -c "import time, torch, gymnasium, numpy; t = time.perf_counter();
# import torch._inductor.compile_fx; print(time.perf_counter() - t)"`, 2026-12-06, commit
# 680523f, two shared cores). Importing them starts no thread or process.
# Caveat, as for any snapshot: modules that read the environment at import (torch's
# ``TORCHINDUCTOR_*`` settings among them) read the runtime's, not a function's own.
DEFAULT_PRELOAD: tuple[str, ...] = ("torch", "torch._inductor.compile_fx", "gymnasium", "numpy")


def kill_group(pid: int) -> None:
    """SIGKILL a worker's whole process group (it is a session leader: pgid == pid)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


class SpawnLauncher:
    """``sys.executable worker.py SOCK ID`` in a new session: a cold start pays the full import."""

    name = "spawn"
    discount_bytes = 0

    def __init__(self) -> None:
        self._procs: dict[int, asyncio.subprocess.Process] = {}

    async def launch(self, sock: str, env_id: str, env: dict[str, str], log_path: Path) -> int:
        with open(log_path, "ab") as logf:
            proc = await asyncio.create_subprocess_exec(
                sys.executable, str(WORKER), sock, env_id, env=env, cwd=env["LAMBDA_TASK_ROOT"],
                stdin=asyncio.subprocess.DEVNULL, stdout=logf, stderr=logf, start_new_session=True,
            )
        self._procs[proc.pid] = proc
        # Reap it when it exits, so no zombie outlives its environment.
        asyncio.get_running_loop().create_task(self._reap(proc))
        return proc.pid

    async def _reap(self, proc: asyncio.subprocess.Process) -> None:
        await proc.wait()
        self._procs.pop(proc.pid, None)

    async def close(self) -> None:
        for pid in list(self._procs):
            kill_group(pid)


class ZygoteLauncher:
    """Asks the zygote (which has the heavy modules imported) to fork an environment."""

    name = "zygote"

    def __init__(self, preload: list[str], log_path: Path) -> None:
        self.preload = preload
        self.log_path = log_path
        self.proc: asyncio.subprocess.Process | None = None
        self.info: dict[str, object] = {}
        self.discount_bytes = 0
        self.state = "starting"  # -> "ready" (forks environments) or "failed" (see its log)
        self._settled = asyncio.Event()  # set when it leaves "starting"
        self._lock = asyncio.Lock()  # one fork request on the pipe at a time

    async def start(self, timeout: float = 180.0) -> None:
        try:
            await self._preload(timeout)
        except BaseException:
            self.state = "failed"
            raise
        else:
            self.state = "ready"
        finally:
            self._settled.set()

    async def ready(self) -> bool:
        """Wait out the preload; True when environments can be forked from it."""
        await self._settled.wait()
        return self.alive

    async def _preload(self, timeout: float) -> None:
        with open(self.log_path, "ab") as logf:
            self.proc = await asyncio.create_subprocess_exec(
                sys.executable, str(ZYGOTE), ",".join(self.preload),
                stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=logf,
                start_new_session=True, env={**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")},
            )
        assert self.proc.stdout is not None
        line = await asyncio.wait_for(self.proc.stdout.readline(), timeout)
        if not line:
            raise RuntimeError("zygote exited during preload; see its log")
        self.info = json.loads(line)
        self.discount_bytes = int(self.info.get("preload_rss", 0))
        if self.info.get("failed"):
            log.warning("zygote could not preload: %s", self.info["failed"])
        log.info("zygote ready in %.0f ms with %s", self.info.get("ms", 0), self.info.get("loaded"))

    @property
    def alive(self) -> bool:
        return self.state == "ready" and self.proc is not None and self.proc.returncode is None

    async def launch(self, sock: str, env_id: str, env: dict[str, str], log_path: Path) -> int:
        assert self.proc is not None and self.proc.stdin is not None and self.proc.stdout is not None
        req = json.dumps({"sock": sock, "env_id": env_id, "env": env, "log": str(log_path)})
        async with self._lock:
            self.proc.stdin.write(req.encode() + b"\n")
            await self.proc.stdin.drain()
            line = await asyncio.wait_for(self.proc.stdout.readline(), 30.0)
        if not line:
            raise RuntimeError("zygote died")
        reply = json.loads(line)
        if "pid" not in reply:
            raise RuntimeError(f"zygote could not fork: {reply.get('error')}")
        return int(reply["pid"])

    async def close(self) -> None:
        if self.proc is None:
            return
        if self.proc.stdin is not None:
            self.proc.stdin.close()  # EOF: the zygote kills the children it forked, then exits
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.proc.wait(), 2.0)
        kill_group(self.proc.pid)
