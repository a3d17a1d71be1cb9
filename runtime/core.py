"""The runtime's moving parts wired together, with their lifecycle (start, reaper, shutdown)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from runtime.billing import Billing
from runtime.concurrency import Concurrency
from runtime.events import EventQueue
from runtime.functions import Registry
from runtime.invoke import Invoker
from runtime.latency import InvokeLatency
from runtime.pool import EnvironmentPool
from runtime.spawner import DEFAULT_PRELOAD, SpawnLauncher, ZygoteLauncher

log = logging.getLogger("runtime")


@dataclass
class Settings:
    region: str = "us-east-1"
    account_id: str = "000000000000"
    account_concurrency: int = 1000
    # AWS keeps 100 executions unreserved; scaled down for small local limits.
    unreserved_min: int | None = None
    idle_timeout: float = 300.0
    state_dir: Path | None = None
    zygote: bool = True
    preload: tuple[str, ...] = DEFAULT_PRELOAD
    event_retry_delays: tuple[float, ...] = (60.0, 120.0)
    credentials: dict[str, str] = field(default_factory=dict)  # access key -> secret (sigv4)
    auth: str = "none"
    # Emulated network + frontend latency of each RequestResponse invoke (runtime/latency.py).
    invoke_latency: InvokeLatency = field(default_factory=InvokeLatency)

    @property
    def min_unreserved(self) -> int:
        if self.unreserved_min is not None:
            return self.unreserved_min
        return min(100, self.account_concurrency // 10)


class Runtime:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._own_state = settings.state_dir is None
        self.state_dir = Path(settings.state_dir or tempfile.mkdtemp(prefix="stellaris-runtime-"))
        self.state_dir.mkdir(parents=True, exist_ok=True)
        # Unix socket paths are limited to ~107 bytes: keep it in a short private temp dir.
        self._sock_dir = tempfile.mkdtemp(prefix="slr-")
        self.registry = Registry(self.state_dir, settings.region, settings.account_id)
        self.billing = Billing()
        self.concurrency = Concurrency(self.registry, settings.account_concurrency, settings.min_unreserved)
        self.spawn = SpawnLauncher()
        self.zygote: ZygoteLauncher | None = None
        if settings.zygote:
            self.zygote = ZygoteLauncher(list(settings.preload), self.state_dir / "zygote.log")
        self.pool = EnvironmentPool(self.state_dir, f"{self._sock_dir}/w.sock", settings.region,
                                    self.zygote or self.spawn, self.spawn)
        self.invoker = Invoker(self.pool, self.registry, self.billing)
        self.events = EventQueue(self.registry, self.concurrency, self.invoker,
                                 settings.event_retry_delays)
        self.latency = settings.invoke_latency
        self._reaper: asyncio.Task[None] | None = None
        self._zygote_start: asyncio.Task[None] | None = None

    async def start(self) -> None:
        await self.pool.start()
        loop = asyncio.get_running_loop()
        if self.zygote is not None:
            # The API answers at once (a deploy needs no zygote); cold starts wait for its preload.
            self._zygote_start = loop.create_task(self._start_zygote(self.zygote))
        self._reaper = loop.create_task(self._reap_loop())

    async def _start_zygote(self, zygote: ZygoteLauncher) -> None:
        try:
            await zygote.start()
        except (RuntimeError, TimeoutError, OSError, ValueError) as exc:
            log.error("zygote failed to start (%s); spawning environments instead", exc)
            await zygote.close()
            self.pool.launcher = self.spawn
            self.zygote = None

    async def _reap_loop(self) -> None:
        period = max(0.2, min(self.settings.idle_timeout / 2, 10.0))
        while True:
            await asyncio.sleep(period)
            n = self.pool.reap_idle(self.settings.idle_timeout)
            if n:
                log.info("reaped %d idle environments", n)
            self._refresh_gauges()

    def _refresh_gauges(self) -> None:
        for state, count in self.pool.counts().items():
            self.billing.m_envs.labels(state).set(count)
        for name, n in self.concurrency.in_flight.items():
            self.billing.m_concurrent.labels(name).set(n)

    async def delete_function(self, name: str) -> None:
        entry = self.registry.entries.get(name)
        if entry is None:
            return
        self.registry.delete(entry)
        self.pool.drain_function(name)
        self.concurrency.wake()
        if not any(e.config.name == name for e in self.pool.envs.values()):
            await asyncio.to_thread(self.registry.remove_code, name)

    async def close(self) -> None:
        """Stop everything this runtime started: no worker outlives the server."""
        if self._reaper is not None:
            self._reaper.cancel()
        if self._zygote_start is not None and not self._zygote_start.done():
            self._zygote_start.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._zygote_start
        self.events.close()
        await self.pool.close()
        await self.spawn.close()
        if self.zygote is not None:
            await self.zygote.close()
        shutil.rmtree(self._sock_dir, ignore_errors=True)
        if self._own_state:
            shutil.rmtree(self.state_dir, ignore_errors=True)
