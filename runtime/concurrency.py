"""Reserved and account-wide concurrency, as Lambda counts it (in-flight invocations)."""

from __future__ import annotations

import asyncio
from collections import defaultdict

from runtime.functions import FunctionEntry, Registry


class Throttled(Exception):
    """No slot free; ``reason`` is Lambda's throttle Reason."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class Concurrency:
    """Slots: a function with reserved concurrency R runs at most R at once; the others share
    the unreserved pool ``account_limit - sum(reserved)``."""

    def __init__(self, registry: Registry, account_limit: int, unreserved_min: int) -> None:
        self.registry = registry
        self.account_limit = account_limit
        self.unreserved_min = unreserved_min
        self.in_flight: dict[str, int] = defaultdict(int)
        self.peak: dict[str, int] = defaultdict(int)
        self._waiters: list[asyncio.Future[None]] = []

    def reserved_total(self, exclude: str | None = None) -> int:
        return sum(e.reserved_concurrency or 0 for n, e in self.registry.entries.items() if n != exclude)

    @property
    def unreserved_limit(self) -> int:
        return self.account_limit - self.reserved_total()

    def _throttle_reason(self, entry: FunctionEntry) -> str | None:
        name = entry.config.name
        if entry.reserved_concurrency is not None:
            if self.in_flight[name] >= entry.reserved_concurrency:
                return "ReservedFunctionConcurrentInvocationLimitExceeded"
            return None
        unreserved_busy = sum(n for f, n in self.in_flight.items()
                              if (e := self.registry.entries.get(f)) is None or e.reserved_concurrency is None)
        if unreserved_busy >= self.unreserved_limit:
            return "ConcurrentInvocationLimitExceeded"
        return None

    def try_acquire(self, entry: FunctionEntry) -> None:
        """Take a slot now or raise ``Throttled`` (synchronous invocations)."""
        reason = self._throttle_reason(entry)
        if reason is not None:
            raise Throttled(reason)
        self._take(entry.config.name)

    async def acquire(self, entry: FunctionEntry) -> None:
        """Wait for a slot (queued Event invocations are never throttled away)."""
        while self._throttle_reason(entry) is not None:
            if entry.reserved_concurrency == 0:
                raise Throttled("ZeroReservedConcurrency")
            fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._waiters.append(fut)
            await fut
        self._take(entry.config.name)

    def _take(self, name: str) -> None:
        self.in_flight[name] += 1
        self.peak[name] = max(self.peak[name], self.in_flight[name])

    def release(self, name: str) -> None:
        self.in_flight[name] -= 1
        self.wake()

    def wake(self) -> None:
        """Let waiters re-check (after a release or a change of reserved concurrency)."""
        waiters, self._waiters = self._waiters, []
        for fut in waiters:
            if not fut.done():
                fut.set_result(None)
