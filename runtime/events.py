"""Asynchronous (``Event``) invocations: queued, run when a slot frees, retried on error.

As on Lambda: a failed event is retried up to MaximumRetryAttempts (default 2) more times
with growing delays (60 s, then 120 s on AWS; configurable here so tests run quickly);
throttles only delay an event, they never drop it. The final failure of each event is
kept and can be queried (``GET /stellaris/v1/functions/{name}/event-failures``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any

from runtime.concurrency import Concurrency, Throttled
from runtime.functions import FunctionEntry, Registry
from runtime.invoke import Invoker

log = logging.getLogger("runtime.events")
MAX_FAILURES_KEPT = 1000


@dataclass
class Event:
    request_id: str
    function: str
    payload: str
    enqueued: float = field(default_factory=time.time)
    attempts: int = 0


class EventQueue:
    def __init__(self, registry: Registry, concurrency: Concurrency, invoker: Invoker,
                 retry_delays: tuple[float, ...]) -> None:
        self.registry = registry
        self.concurrency = concurrency
        self.invoker = invoker
        self.retry_delays = retry_delays
        self.queues: dict[str, asyncio.Queue[Event]] = {}
        self.dispatchers: dict[str, asyncio.Task[None]] = {}
        self.failures: dict[str, list[dict[str, Any]]] = defaultdict(list)
        self.stats: dict[str, Counter[str]] = defaultdict(Counter)
        self._tasks: set[asyncio.Task[Any]] = set()
        self._timers: dict[str, asyncio.TimerHandle] = {}

    def submit(self, function: str, payload: str, request_id: str) -> None:
        self.stats[function]["accepted"] += 1
        self._put(Event(request_id, function, payload))

    def _put(self, event: Event) -> None:
        q = self.queues.get(event.function)
        if q is None:
            q = self.queues[event.function] = asyncio.Queue()
            self.dispatchers[event.function] = asyncio.get_running_loop().create_task(
                self._dispatch(event.function, q))
        self.stats[event.function]["queued"] += 1
        q.put_nowait(event)

    async def _dispatch(self, function: str, q: asyncio.Queue[Event]) -> None:
        """Start queued events in order, each as soon as a concurrency slot is free."""
        while True:
            event = await q.get()
            self.stats[function]["queued"] -= 1
            entry = self.registry.entries.get(function)
            if entry is None:
                self._fail(event, "FunctionNotFound", None)
                continue
            if time.time() - event.enqueued > entry.max_event_age_s:
                self._fail(event, "EventAgeExceeded", None)
                continue
            try:
                await self.concurrency.acquire(entry)
            except Throttled as exc:
                self._fail(event, exc.reason, None)
                continue
            self.stats[function]["running"] += 1
            task = asyncio.get_running_loop().create_task(self._run(entry, event))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _run(self, entry: FunctionEntry, event: Event) -> None:
        name = entry.config.name
        event.attempts += 1
        try:
            outcome = await self.invoker.run_once(entry, event.payload, event.request_id)
        except Exception:  # an unexpected server error must not lose the event
            log.exception("event %s failed inside the runtime", event.request_id)
            outcome = None
        finally:
            self.concurrency.release(name)
            self.stats[name]["running"] -= 1
        if outcome is not None and not outcome.function_error:
            self.stats[name]["succeeded"] += 1
            return
        error = ({"errorType": outcome.error_type, "body": outcome.body.decode(errors="replace")}
                 if outcome else None)
        retries_allowed = min(entry.max_retry_attempts, len(self.retry_delays))
        if event.attempts <= retries_allowed:
            delay = self.retry_delays[event.attempts - 1]
            self.stats[name]["retries"] += 1
            self.stats[name]["waiting_retry"] += 1
            self._timers[event.request_id] = asyncio.get_running_loop().call_later(
                delay, self._retry, event)
            return
        self._fail(event, "RetriesExhausted", error)

    def _retry(self, event: Event) -> None:
        self._timers.pop(event.request_id, None)
        self.stats[event.function]["waiting_retry"] -= 1
        self._put(event)

    def _fail(self, event: Event, condition: str, error: dict[str, Any] | None) -> None:
        self.stats[event.function]["failed"] += 1
        failures = self.failures[event.function]
        failures.append({
            "requestId": event.request_id,
            "condition": condition,
            "approximateInvokeCount": event.attempts,
            "error": error,
            "requestPayload": event.payload,
            "timestamp": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        })
        del failures[:-MAX_FAILURES_KEPT]

    def pending(self, function: str) -> int:
        s = self.stats.get(function) or Counter()  # a read must not add a key per name asked
        return s["queued"] + s["running"] + s["waiting_retry"]

    def close(self) -> None:
        for handle in self._timers.values():
            handle.cancel()
        for task in [*self.dispatchers.values(), *self._tasks]:
            task.cancel()
