"""The aggregator thread of an async run: reads the learners' gradient stream, applies the
buffer rule (orchestrator/aggregator.py), steps the master once per aggregation and publishes.

One batching window at a time: one round trip acknowledges the gradients published in the last
window and claims the new ones, then the Adam steps the buffer rule asks for, then one
publish. It never busy-waits: it blocks on ``XREADGROUP ... BLOCK`` or on its stop event.
"""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING

from functions.wire import Gradient
from orchestrator.aggregator import StalenessAggregator
from store import CorruptBlob, StoreError

if TYPE_CHECKING:
    from orchestrator.trainer import Trainer

GROUP = "aggregator"


class AggregatorThread:
    """Applies a run's gradients in the background; ``error`` is what stopped it, if anything."""

    def __init__(self, trainer: Trainer, aggregator: StalenessAggregator) -> None:
        self.t, self.aggregator = trainer, aggregator  # t: the run it applies gradients for
        self.stop = threading.Event()
        self.error: BaseException | None = None
        self._to_ack: list[str] = []  # applied, their version not yet published
        self._entry_left: dict[str, int] = {}  # stream entry -> its gradients not yet settled
        self._acks_ready: list[str] = []  # applied and published: acknowledged with next read
        # look-ahead lineage -> (seq, version) of its last gradient applied since the last publish
        self._applied_by_lineage: dict[str, tuple[int, int]] = {}
        self._window_start = 0.0
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._aggregate_forever, name="aggregator",
                                        daemon=True)
        self._thread.start()

    def join(self, timeout: float) -> None:
        self.stop.set()
        if self._thread is not None:
            self._thread.join(timeout=timeout)

    def _aggregate_forever(self) -> None:
        """Read, aggregate and publish, one batching window at a time.

        Each window is one round trip that acknowledges the gradients published in the last
        window and claims the new ones, the Adam steps the buffer rule asks for, and one
        publish. Waiting out ``publish_interval_ms`` between windows lets the gradients that
        arrive meanwhile share that work: on two cores, reading, acknowledging and
        publishing once per gradient cost more CPU than the gradient itself.
        """
        interval = self.t.cfg.experimental.publish_interval_ms / 1000.0
        while not self.stop.is_set():
            wait_s = self._window_start + interval - time.monotonic()
            if wait_s > 0 and self.stop.wait(wait_s):
                break
            self._window_start = time.monotonic()
            acks, self._acks_ready = self._acks_ready, []
            try:
                entries = self.t.rs.grads.ack_and_read(GROUP, "orchestrator", acks, count=256,
                                                     block_ms=100)
            except StoreError as exc:
                self._acks_ready = acks + self._acks_ready  # acknowledged with the next read
                self.t.counters.store_errors += 1
                self.t.counters.last_errors.append(f"grads read: {exc}")
                self.stop.wait(0.5)
                continue
            except BaseException as exc:  # noqa: BLE001 - surfaced to the dispatcher
                self.error = exc
                return
            try:
                for e in entries:
                    self._offer(e.id, e.blob)
                self._apply_while_ready()
                self.publish_if_moved()
            except StoreError as exc:
                self.t.counters.store_errors += 1
                self.t.counters.last_errors.append(f"aggregator: {exc}")
            except BaseException as exc:  # noqa: BLE001 - surfaced to the dispatcher
                self.error = exc
                return

    def _offer(self, entry_id: str, blob: bytes | None) -> None:
        try:
            grads = Gradient.unpack(blob or b"")
        except CorruptBlob as exc:
            self.t.counters.last_errors.append(f"corrupt gradient {entry_id}: {exc}")
            self._acks_ready.append(entry_id)  # never applied: acknowledged with the next read
            return
        # A message of several gradients is acknowledged once every one of them is settled.
        self._entry_left[entry_id] = len(grads)
        for grad in grads:
            status = self.aggregator.offer(grad, entry_id, self.t.master.version, time.monotonic())
            if status != "buffered":
                self._settled(entry_id)
            # Each gradient meets the buffer rule on its own, as if it had come alone: offering
            # a whole message first would let one aggregation average all of it.
            self._apply_while_ready()

    def _settled(self, entry_id: str) -> None:
        """One gradient of ``entry_id`` applied, dropped or a duplicate; the entry is
        acknowledged after the next publish once none of its gradients is left."""
        left = self._entry_left.get(entry_id, 1) - 1
        if left > 0:
            self._entry_left[entry_id] = left
        else:
            self._entry_left.pop(entry_id, None)
            self._to_ack.append(entry_id)

    def _apply_while_ready(self) -> None:
        agg = self.aggregator
        while (reason := agg.should_aggregate(self.t.master.version, time.monotonic())) is not None:
            with self.t.lock:
                v_now = self.t.master.version
                out = agg.take(v_now, reason)
                self.t.master.apply(out.flat, layout=out.layout, lr=out.lr)
                self.t.counters.grads_applied += len(out.dedupe_ids)
                self.t.counters.grad_staleness.extend(out.staleness)
                for lineage, seq in out.lineages:  # echoed to look-ahead learners on publish
                    self._applied_by_lineage[lineage] = (seq, v_now + 1)
            self.t.log_applied(out.dedupe_ids, v_now + 1)
            for entry_id in out.entry_ids:
                self._settled(entry_id)

    def publish_if_moved(self, force: bool = False) -> None:
        """Publish the newest version once per batching window.

        While the aggregator keeps up this is once per aggregation (the paper's rule); when
        several gradients arrived in a window it applies them all, one Adam step each
        (versions still count aggregations), and publishes only the last: readers only ever
        want the latest. Applied gradients are acknowledged once their version is published
        (with the next read; at the end, here).
        """
        try:
            with self.t.lock:
                if self.t.master.published_version != self.t.master.version:
                    self.t.master.publish(self.t.rs, applied=self._applied_by_lineage)
                    self._applied_by_lineage = {}
            if self._to_ack:
                self.t.flush_applied_log()
                self._acks_ready.extend(self._to_ack)
                self._to_ack.clear()
            if force and self._acks_ready:
                self.t.rs.grads.ack(GROUP, self._acks_ready)
                self._acks_ready.clear()
        except StoreError as exc:
            # Applied in the master already; the store guard republishes when Redis is back.
            self.t.counters.store_errors += 1
            self.t.counters.last_errors.append(f"publish v{self.t.master.version}: {exc}")
