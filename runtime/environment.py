"""One execution environment = one worker process, one invocation at a time.

State machine (anything else raises ``InvalidTransition``)::

    STARTING -> READY <-> BUSY
        \\         \\        \\
         +---------+--------+--> STOPPING -> DEAD     (any state may also drop to DEAD)
"""

from __future__ import annotations

import asyncio
import enum
import json
import time
import uuid
from typing import Any

from runtime import protocol
from runtime.functions import FunctionConfig
from runtime.spawner import kill_group


class EnvState(enum.Enum):
    STARTING = "starting"
    READY = "ready"
    BUSY = "busy"
    STOPPING = "stopping"
    DEAD = "dead"


_ALLOWED: dict[EnvState, set[EnvState]] = {
    EnvState.STARTING: {EnvState.READY, EnvState.STOPPING, EnvState.DEAD},
    EnvState.READY: {EnvState.BUSY, EnvState.STOPPING, EnvState.DEAD},
    EnvState.BUSY: {EnvState.READY, EnvState.STOPPING, EnvState.DEAD},
    EnvState.STOPPING: {EnvState.DEAD},
    EnvState.DEAD: set(),
}


class ExecutionEnvironmentError(Exception):
    """Base of the named ways an environment can fail an invocation."""


class InvalidTransition(ExecutionEnvironmentError):
    pass


class InitFailed(ExecutionEnvironmentError):
    """The handler could not be loaded; ``doc`` is Lambda's error document."""

    def __init__(self, doc: dict[str, Any], logs: str = "") -> None:
        super().__init__(doc.get("errorMessage", ""))
        self.doc = doc
        self.logs = logs


class InitTimedOut(ExecutionEnvironmentError):
    pass


class InvocationTimedOut(ExecutionEnvironmentError):
    pass


class WorkerExited(ExecutionEnvironmentError):
    """The process died (crash, os._exit, signal) while starting or invoking."""


class OutOfMemory(WorkerExited):
    """Killed by the memory monitor for exceeding the function's MemorySize."""


class ExecutionEnvironment:
    def __init__(self, config: FunctionConfig) -> None:
        self.id = uuid.uuid4().hex  # also the secret a worker presents on connect
        self.config = config
        self.state = EnvState.STARTING
        self.pid: int | None = None
        self.created = time.monotonic()
        self.last_used = self.created
        self.init_ms = 0.0
        self.invocations = 0
        self.peak_rss = 0  # bytes charged to the function (see MemoryMonitor)
        self.discount = 0  # preloaded zygote pages not charged to this environment
        self.children_rss = 0
        self.kill_reason: str | None = None
        self.init_logs = ""
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._connected: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._died: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def __repr__(self) -> str:
        return f"<env {self.id[:8]} {self.config.name}#{self.config.generation} {self.state.value} pid={self.pid}>"

    # -- state machine ---------------------------------------------------------------------
    def transition(self, new: EnvState) -> None:
        if new not in _ALLOWED[self.state]:
            raise InvalidTransition(f"{self!r}: {self.state.value} -> {new.value}")
        self.state = new

    @property
    def alive(self) -> bool:
        return self.state not in (EnvState.STOPPING, EnvState.DEAD)

    # -- wiring ----------------------------------------------------------------------------
    def attach(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """The worker connected to the server socket and presented our id."""
        self._reader, self._writer = reader, writer
        if not self._connected.done():
            self._connected.set_result(None)

    async def _read(self) -> dict[str, Any]:
        assert self._reader is not None
        header = await self._reader.readexactly(protocol.HEADER.size)
        (length,) = protocol.HEADER.unpack(header)
        return json.loads(await self._reader.readexactly(length))

    async def _race_death(self, coro: Any, timeout: float) -> Any:
        """Await ``coro`` unless the process dies first or ``timeout`` passes."""
        task = asyncio.ensure_future(coro)
        done, _ = await asyncio.wait({task, self._died}, timeout=timeout,
                                     return_when=asyncio.FIRST_COMPLETED)
        if task in done:
            return task.result()
        task.cancel()
        if self._died in done:
            # The monitor saw the process go before the socket did: make the environment
            # DEAD here too, or it would go back to the warm pool and fail every invocation.
            error = self._death_error()
            self.kill(self.kill_reason or "exited")
            raise error
        raise TimeoutError

    def _death_error(self) -> WorkerExited:
        if self.kill_reason == "oom":
            return OutOfMemory("out of memory")
        return WorkerExited(self.kill_reason or "exited")

    # -- lifecycle -------------------------------------------------------------------------
    async def wait_ready(self, timeout: float) -> None:
        """INIT: wait for the worker to connect and import the handler."""
        t0 = time.perf_counter()
        try:
            await self._race_death(asyncio.shield(self._connected), timeout)
            frame = await self._race_death(self._read(), max(0.0, timeout - (time.perf_counter() - t0)))
        except TimeoutError:
            self.kill("init-timeout")
            raise InitTimedOut(f"init did not finish in {timeout:.2f} s") from None
        except (asyncio.IncompleteReadError, ConnectionError):
            self.kill(self.kill_reason or "exited")
            raise self._death_error() from None
        if frame.get("type") == "init_error":
            self.kill("init-error")
            raise InitFailed(frame["error"], frame.get("logs", ""))
        self.init_logs = frame.get("logs", "")
        self.note_rss(int(frame.get("rss", 0)))
        self.transition(EnvState.READY)

    async def invoke(self, frame: dict[str, Any], timeout: float) -> dict[str, Any]:
        """Run one invocation; the caller has already moved us to BUSY."""
        if self.state is not EnvState.BUSY:
            raise InvalidTransition(f"{self!r}: invoke while {self.state.value}")
        assert self._writer is not None
        try:
            self._writer.write(protocol.encode(frame))
            reply = await self._race_death(self._read(), timeout)
        except TimeoutError:
            self.kill("timeout")
            raise InvocationTimedOut() from None
        except (asyncio.IncompleteReadError, ConnectionError):
            # The socket closing is how a crash shows itself; the monitor may have said why.
            self.kill(self.kill_reason or "exited")
            raise self._death_error() from None
        self.invocations += 1
        self.last_used = time.monotonic()
        self.note_rss(int(reply.get("rss", 0)))
        return reply

    def note_rss(self, rss: int) -> None:
        """The worker's own RSS report (catches short invocations the monitor never saw)."""
        self.peak_rss = max(self.peak_rss, rss + self.children_rss - self.discount)

    def mark_died(self, reason: str) -> None:
        """Called by the monitor when the process is gone (or must go, for OOM)."""
        if self.kill_reason is None:
            self.kill_reason = reason
        if not self._died.done():
            self._died.set_result(None)

    def kill(self, reason: str) -> None:
        """Stop the environment now: SIGKILL its process group and drop the socket."""
        if self.kill_reason is None:
            self.kill_reason = reason
        if self.state is not EnvState.DEAD:
            if self.state is not EnvState.STOPPING:
                self.transition(EnvState.STOPPING)
            if self.pid is not None:
                kill_group(self.pid)
            if self._writer is not None:
                self._writer.close()
            self.transition(EnvState.DEAD)
        if not self._died.done():
            self._died.set_result(None)
