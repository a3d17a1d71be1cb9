"""One interface for every place functions run: submit an event, get a future result."""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

FUNCTIONS = ("actor", "learner", "evaluator")


@dataclass
class InvocationResult:
    """What came back from one invocation, whatever the backend."""

    function: str
    ok: bool
    payload: dict[str, Any] | None = None
    error_type: str | None = None
    error_message: str | None = None
    duration_ms: float = 0.0  # billed-equivalent duration (the function's own run time)
    # Of duration_ms, the time spent waiting for a core of a shared host (the local runtime
    # reports it; None elsewhere): on Lambda proper that wait would not have been billed.
    cpu_wait_ms: float | None = None
    cold_start: bool = False
    submitted_at: float = field(default_factory=time.monotonic)

    @property
    def error(self) -> str:
        return f"{self.error_type}: {self.error_message}"


class Invoker(ABC):
    """Runs the stateless handlers; ``submit`` never raises for function errors."""

    name: str = "base"

    def launch(self) -> None:  # noqa: B027 - optional hook
        """Begin a slow start-up without waiting for it (``start`` finishes it), so the
        orchestrator's own imports run meanwhile."""

    def start(self) -> None:  # noqa: B027 - optional hook
        """Deploy or connect; raise a clear error if the backend is unusable."""

    @abstractmethod
    def submit(self, function: str, event: dict[str, Any]) -> Future[InvocationResult]:
        """Start one invocation of ``function`` (actor, learner or evaluator)."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release threads, connections, processes."""

    def billing(self) -> dict[str, Any] | None:
        """The backend's own billing report, when it has one (the local runtime does)."""
        return None

    def __enter__(self) -> Invoker:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
