"""Execution environments per function: warm reuse, cold starts, draining, idle reaping,
and the memory monitor that enforces MemorySize."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import time
from collections import defaultdict
from pathlib import Path

import psutil

from runtime import protocol
from runtime.environment import EnvState, ExecutionEnvironment
from runtime.functions import FunctionConfig
from runtime.spawner import SpawnLauncher, ZygoteLauncher

log = logging.getLogger("runtime.pool")
# Never passed to function code: the server's own secrets.
_SCRUBBED_ENV = ("STELLARIS_RUNTIME_CREDENTIALS",)


class EnvironmentPool:
    def __init__(self, state_dir: Path, sock_path: str, region: str,
                 launcher: SpawnLauncher | ZygoteLauncher, fallback: SpawnLauncher) -> None:
        self.log_dir = state_dir / "logs"
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.sock_path = sock_path
        self.region = region
        self.launcher = launcher
        self.fallback = fallback
        self.envs: dict[str, ExecutionEnvironment] = {}
        self.idle: dict[str, list[ExecutionEnvironment]] = defaultdict(list)
        self.monitor = MemoryMonitor(self)
        self._server: asyncio.AbstractServer | None = None

    async def start(self) -> None:
        self._server = await asyncio.start_unix_server(self._on_connect, self.sock_path,
                                                       limit=protocol.MAX_FRAME)
        os.chmod(self.sock_path, 0o600)

    async def _on_connect(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """A worker connected: it must present the id of an environment we are starting."""
        try:
            header = await asyncio.wait_for(reader.readexactly(protocol.HEADER.size), 10.0)
            (length,) = protocol.HEADER.unpack(header)
            if length > 4096:
                raise ValueError("hello too large")
            hello = json.loads(await reader.readexactly(length))
            env = self.envs.get(str(hello.get("env_id")))
        except (asyncio.IncompleteReadError, TimeoutError, ValueError, ConnectionError):
            env = None
        if env is None or env.state is not EnvState.STARTING:
            writer.close()
            return
        env.attach(reader, writer)

    def _worker_env(self, env: ExecutionEnvironment) -> dict[str, str]:
        c = env.config
        base = {k: v for k, v in os.environ.items() if k not in _SCRUBBED_ENV}
        day = time.strftime("%Y/%m/%d", time.gmtime())
        lambda_env = {
            "AWS_LAMBDA_FUNCTION_NAME": c.name,
            "AWS_LAMBDA_FUNCTION_MEMORY_SIZE": str(c.memory_mb),
            "AWS_LAMBDA_FUNCTION_VERSION": "$LATEST",
            "AWS_LAMBDA_LOG_GROUP_NAME": f"/aws/lambda/{c.name}",
            "AWS_LAMBDA_LOG_STREAM_NAME": f"{day}/[$LATEST]{env.id}",
            "AWS_LAMBDA_INITIALIZATION_TYPE": "on-demand",
            "AWS_REGION": self.region,
            "AWS_DEFAULT_REGION": self.region,
            "AWS_EXECUTION_ENV": f"AWS_Lambda_{c.runtime}",
            "LAMBDA_TASK_ROOT": str(c.code_dir),
            "LAMBDA_RUNTIME_DIR": str(Path(__file__).resolve().parent),
            "_HANDLER": c.handler,
            "TZ": ":UTC",
        }
        # One thread per process by default: environments share the machine's cores.
        base.setdefault("OMP_NUM_THREADS", "1")
        base.setdefault("MKL_NUM_THREADS", "1")
        return {**base, **lambda_env, **c.env_vars}

    # -- taking and returning environments ---------------------------------------------
    def take_warm(self, config: FunctionConfig) -> ExecutionEnvironment | None:
        """A READY environment of the current generation, most recently used first."""
        stack = self.idle.get(config.name)
        while stack:
            env = stack.pop()
            if env.state is not EnvState.READY:
                continue
            if env.config.generation != config.generation:
                self.stop(env, "drained")  # old code or configuration: never reused
                continue
            env.transition(EnvState.BUSY)
            self.monitor.poke()
            return env
        return None

    async def start_env(self, config: FunctionConfig, init_timeout: float) -> ExecutionEnvironment:
        """Cold start: spawn or fork a worker and wait for INIT. Returns it BUSY."""
        launcher = self.launcher
        # The zygote's preload is the platform's start-up, not this environment's Init Duration.
        if isinstance(launcher, ZygoteLauncher) and not await launcher.ready():
            log.warning("zygote is gone; spawning environments instead")
            launcher = self.fallback
        env = ExecutionEnvironment(config)
        self.envs[env.id] = env
        t0 = time.perf_counter()
        try:
            env.pid = await launcher.launch(self.sock_path, env.id, self._worker_env(env),
                                            self.log_dir / f"{config.name}-{env.id[:12]}.log")
            env.discount = launcher.discount_bytes
            self.monitor.watch(env)
            await env.wait_ready(init_timeout)
        except BaseException:
            self.forget(env)
            raise
        env.init_ms = (time.perf_counter() - t0) * 1000.0
        env.transition(EnvState.BUSY)
        return env

    def release(self, env: ExecutionEnvironment, current: FunctionConfig | None) -> None:
        """After an invocation: back to the warm stack, or stopped if stale or dead."""
        if env.state is not EnvState.BUSY:
            self.forget(env)
            return
        if current is None or current.generation != env.config.generation:
            self.stop(env, "drained")
            return
        env.transition(EnvState.READY)
        env.last_used = time.monotonic()
        self.idle[env.config.name].append(env)

    def stop(self, env: ExecutionEnvironment, reason: str) -> None:
        env.kill(reason)
        self.forget(env)

    def forget(self, env: ExecutionEnvironment) -> None:
        if env.state is not EnvState.DEAD:
            env.kill("forgotten")
        self.envs.pop(env.id, None)
        stack = self.idle.get(env.config.name)
        if stack and env in stack:
            stack.remove(env)

    def drain_function(self, name: str) -> None:
        """Stop the idle environments of a function (update or delete); busy ones stop when
        their invocation ends because their generation is no longer current."""
        for env in self.idle.pop(name, []):
            self.stop(env, "drained")

    def reap_idle(self, idle_timeout: float) -> int:
        now = time.monotonic()
        victims = [e for e in self.envs.values()
                   if e.state is EnvState.READY and now - e.last_used > idle_timeout]
        for env in victims:
            self.stop(env, "idle")
        return len(victims)

    def counts(self) -> dict[str, int]:
        out = {s.value: 0 for s in EnvState}
        for env in self.envs.values():
            out[env.state.value] += 1
        return out

    async def close(self) -> None:
        self.monitor.close()
        for env in list(self.envs.values()):
            self.stop(env, "shutdown")
        if self._server is not None:
            self._server.close()


class MemoryMonitor:
    """Samples the RSS of starting and busy environments and kills those over MemorySize.

    Lambda counts the whole sandbox; here that is the worker's RSS plus its children's,
    minus the zygote's preloaded pages (shared by every fork, like a shared library).
    It sleeps on an event while nothing is running, so an idle server does no work.
    """

    INTERVAL = 0.05

    def __init__(self, pool: EnvironmentPool) -> None:
        self.pool = pool
        self._procs: dict[str, psutil.Process] = {}
        self._wakeup = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._ticks = 0

    def watch(self, env: ExecutionEnvironment) -> None:
        try:
            self._procs[env.id] = psutil.Process(env.pid)
        except psutil.NoSuchProcess:
            env.mark_died("exited")
            return
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run())
        self._wakeup.set()

    def sample(self, env: ExecutionEnvironment) -> int:
        proc = self._procs.get(env.id)
        if proc is None:
            return 0
        try:
            if proc.status() == psutil.STATUS_ZOMBIE:
                env.mark_died("exited")
                return 0
            rss = proc.memory_info().rss
            # Listing children scans all of /proc: do it every 10th sample only.
            if self._ticks % 10 == 0:
                env.children_rss = 0
                for child in proc.children(recursive=True):
                    with contextlib.suppress(psutil.NoSuchProcess):
                        env.children_rss += child.memory_info().rss
            rss += env.children_rss
        except psutil.NoSuchProcess:
            env.mark_died("exited")
            return 0
        charged = max(0, rss - env.discount)
        env.peak_rss = max(env.peak_rss, charged)
        if charged > env.config.memory_mb * 1024 * 1024:
            env.mark_died("oom")
            env.kill("oom")
        return charged

    async def _run(self) -> None:
        while True:
            active = False
            for env_id in list(self._procs):
                env = self.pool.envs.get(env_id)
                if env is None or env.state is EnvState.DEAD:
                    self._procs.pop(env_id, None)
                    continue
                if env.state in (EnvState.STARTING, EnvState.BUSY):
                    active = True
                    self.sample(env)
            self._ticks += 1
            if active:
                await asyncio.sleep(self.INTERVAL)
            else:
                self._wakeup.clear()
                await self._wakeup.wait()

    def poke(self) -> None:
        self._wakeup.set()

    def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
