"""Gradient mode's stream: each minibatch's gradient to the run's ``grads`` stream, in order,
from a background thread, and what the store said back (newer versions, the master's applied
record, the other learners' held versions) for the compute loop to pick up."""

from __future__ import annotations

import threading
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor

from functions.wire import Gradient
from store import Applied, PolicySnapshot, RunStore


class GradientWriter:
    """Streams gradients to Redis from one background thread, in order.

    Sending a ~40 KB blob is socket time that releases the GIL, so it overlaps with the next
    minibatch's forward/backward instead of adding to it. ``per_message`` consecutive
    gradients travel as one message (:meth:`Gradient.pack`): the encode, the round trip and
    the master's decode are paid once for them — on two cores that CPU is taken from the
    forward/backward. At most ``max_pending`` messages wait (bounded memory); a failed write
    surfaces at the next submit or at ``close``.
    """

    MAX_PENDING = 4

    def __init__(self, rs: RunStore, known_version: int, max_pending: int = MAX_PENDING,
                 lineage: str | None = None, per_message: int = 1,
                 holder: str | None = None, lease_s: float | None = None) -> None:
        self.rs = rs
        self.lineage = lineage  # look-ahead: poll what the master applied, not its weights
        # among several learners: renew our hold and read the others' with each write
        self.holder, self.lease_s = holder, lease_s
        self._others: dict[str, int] | None = None
        self.per_message = max(1, per_message)
        self.max_pending = max_pending
        self.pool = ThreadPoolExecutor(1, thread_name_prefix="stellaris-grad-writer")
        self.pending: deque[Future[tuple[str | None, int]]] = deque()
        self.written = self.duplicates = 0
        self._batch: list[Gradient] = []
        # The newest policy seen after a write, for the compute loop to pick up. Watching
        # here, off the compute thread, takes the per-minibatch version read (a blocking
        # round trip, 10-47% of learner time in the profile) off the critical path.
        self._lock = threading.Lock()
        self._known = known_version
        self._newest: PolicySnapshot | None = None
        # the version the compute loop uses now: pinned with the writes until a gradient of
        # it is written (the queue may still hold gradients of the one before)
        self._in_use = known_version
        self._applied: Applied | None = None

    def _write(self, grads: list[Gradient]) -> tuple[str | None, int]:
        meta, blob, dedupe_id = Gradient.pack(grads)
        if self.lineage is not None:
            entry, applied = self.rs.append_and_poll_applied(
                self.rs.grads, meta, blob, dedupe_id, self.lineage)
            with self._lock:
                self._applied = applied
            return entry, len(grads)
        if self.holder is not None and self.lease_s is not None:
            entry, snap, others = self.rs.append_poll_and_hold(
                self.rs.grads, meta, blob, dedupe_id, self._known, self.holder,
                grads[-1].version_used, self.lease_s, pin=(self._in_use, self._known))
            with self._lock:
                self._others = others
        else:
            entry, snap = self.rs.append_and_poll(self.rs.grads, meta, blob, dedupe_id,
                                                  self._known)
        if snap is not None:
            with self._lock:
                self._known = snap.version
                self._newest = snap
        return entry, len(grads)

    def take_newest(self) -> PolicySnapshot | None:
        """The newest policy published since the last call (``None``: nothing new)."""
        with self._lock:
            snap, self._newest = self._newest, None
            if snap is not None:
                self._in_use = snap.version
            return snap

    def take_others(self) -> dict[str, int] | None:
        """The versions the other learners held at the newest write since the last call."""
        with self._lock:
            others, self._others = self._others, None
            return others

    def take_applied(self) -> Applied | None:
        """What the master had applied at the newest poll since the last call (look-ahead)."""
        with self._lock:
            applied, self._applied = self._applied, None
            return applied

    def _collect(self, keep: int) -> None:
        while len(self.pending) > keep or (self.pending and self.pending[0].done()):
            entry, n = self.pending.popleft().result()
            if entry is None:
                self.duplicates += n
            else:
                self.written += n

    def submit(self, grad: Gradient) -> None:
        self._batch.append(grad)
        if len(self._batch) >= self.per_message:
            self._flush()

    def _flush(self) -> None:
        if self._batch:
            self._collect(self.max_pending - 1)
            self.pending.append(self.pool.submit(self._write, self._batch))
            self._batch = []

    def close(self) -> None:
        """Send what is left and wait for every write; raises the first write error."""
        try:
            self._flush()
            self._collect(0)
        finally:
            self.pool.shutdown(wait=True, cancel_futures=True)

    def abort(self) -> None:
        """The invocation failed: stop without masking its error by a write error."""
        self.pool.shutdown(wait=True, cancel_futures=True)

