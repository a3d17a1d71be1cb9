"""A run that survives Redis: the store guard (republish the master when Redis lost it) and
resume (from the run folder's checkpoint, or a warm start from another run's).

A mixin of :class:`orchestrator.trainer.Trainer`: it works on the trainer's master, store,
counters and checkpoints, under the trainer's lock.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING

from functions.adam import OPTIMIZER_STATE
from store import RunStore, StoreError

if TYPE_CHECKING:
    from orchestrator.checkpoint import Checkpointer
    from orchestrator.config import TrainConfig
    from orchestrator.counters import Counters
    from orchestrator.footprint import Footprint
    from orchestrator.master import MasterPolicy

# the run-metadata field whose absence means the store forgot the run (see store_guard)
STORE_MARKER = "orchestrator_marker"


class StoreRecovery:
    cfg: TrainConfig
    rs: RunStore
    lock: threading.RLock
    master: MasterPolicy
    counters: Counters
    checkpointer: Checkpointer
    footprint: Footprint
    _store_marker: str
    _store_down: bool
    _next_guard: float
    _guard_backoff: float
    _wall_offset: float

    # -- Redis outages ------------------------------------------------------------------------
    def store_guard(self, force: bool = False) -> bool:
        """Is the store usable? Republishes the master when Redis lost it (restart, failover).

        Called about once a second by the loops. While Redis is down the loops stop
        dispatching (every invocation would fail) and retry here with backoff; when it is back
        and its ``latest`` is missing or behind the master, the master's current version is
        republished, so training continues from where it was — nothing applied is lost.
        """
        now = time.monotonic()
        if not force and now < self._next_guard:
            return not self._store_down
        try:
            with self.lock:
                # read under the lock: a publish between the read and the check would look
                # like a lost version (and count a recovery that never happened)
                latest = self.rs.params.latest_version()
                behind = latest is None or latest < self.master.published_version
                # The marker tells a store that forgot the run even when a function or the
                # aggregator has already published onto the empty server (then nothing is
                # behind, but consumer groups and Adam state are gone all the same).
                forgot = self.rs.meta.get(STORE_MARKER) != self._store_marker
                if behind:
                    self.master.publish(self.rs, allow_rewind=True)
                if behind or forgot:
                    self.on_store_recovered()
                    self._mark_store()
                    self.counters.redis_recoveries += 1
                    self.counters.last_errors.append(
                        f"store lost the run at version {self.master.version} (latest {latest})"
                        + (": republished" if behind else ""))
            self._store_down = False
            self._guard_backoff = 1.0
            self._next_guard = now + 1.0
        except StoreError as exc:
            if not self._store_down:
                self.counters.last_errors.append(f"store unavailable: {exc}")
            self.counters.store_errors += 1
            self._store_down = True
            self._next_guard = now + self._guard_backoff
            self._guard_backoff = min(10.0, self._guard_backoff * 2)
        return not self._store_down

    @property
    def learners_publish(self) -> bool:
        """Do learner invocations publish versions themselves (sync mode, or async with
        ``learner_publishes``)? Then the store holds the truth and the learners' Adam state."""
        return self.cfg.mode == "sync" or self.cfg.publishing_learner

    def on_store_recovered(self) -> None:
        """Re-create what a restarted Redis forgot (subclasses add consumer groups): the Adam
        state a publishing learner loads, or its next update would start with fresh moments."""
        if self.learners_publish:
            self._save_optimizer_state()

    def _save_optimizer_state(self) -> None:
        """The master's Adam moments, where the next publishing learner loads them."""
        self.rs.put_state(OPTIMIZER_STATE, self.master.optimizer_state(), {"version": self.master.version})

    def release_trajectories(self, ids: list[str]) -> None:
        """Delete a learned (or lost) batch's trajectories; a store error only costs space."""
        try:
            self.rs.traj.delete(ids)
        except StoreError as exc:
            self.counters.last_errors.append(f"traj cleanup: {exc}")

    # -- resume -------------------------------------------------------------------------------
    def _mark_store(self) -> None:
        """Write this orchestrator's marker into the run's metadata: a store without it has
        lost the run (restarted empty, failed over to an empty replica)."""
        self.rs.meta.set({STORE_MARKER: self._store_marker})

    def resume_or_init(self) -> bool:
        """Load the run folder's checkpoint (resume) or publish version 0; True if resumed."""
        self._mark_store()
        self.sample_footprint()
        found = None if self.cfg.restart else self.checkpointer.latest()
        if found is None:
            if self.cfg.init_from is not None:
                self._warm_start(Path(self.cfg.init_from))
            self.master.publish(self.rs, allow_rewind=True)
            if self.cfg.init_from is not None and self.learners_publish:
                self._save_optimizer_state()
            return False
        tensors, meta = found
        if meta.get("config_hash") not in (None, self.cfg.digest()):
            raise ValueError(
                f"run folder {self.run_dir} holds a checkpoint of a different configuration "
                "(use --restart to start over, or another --run-dir)"
            )
        self.master.load_state(tensors, int(meta["version"]))
        self.counters.env_steps = int(meta.get("env_steps", 0))
        self.counters.episodes = int(meta.get("episodes", 0))
        self._wall_offset = float(meta.get("wall_s", 0.0))
        self.footprint.resume(float(meta.get("orchestrator_cpu_s", 0.0)),
                              float(meta.get("redis_cpu_s", 0.0)))
        for comp, c in (meta.get("cost_functions") or {}).items():
            self.cost.components[comp] = dict(c)
        self.master.publish(self.rs, allow_rewind=True)
        if self.learners_publish:
            self._save_optimizer_state()
        return True

    def _warm_start(self, path: Path) -> None:
        """Install another run's checkpoint as version 0 of this one (``init_from``).

        Only the learning state travels: weights, normalisers and Adam moments. The counters
        start at zero so this run's clock, env steps and $ measure this run alone."""
        # run.preflight_init() has checked the file (env, shapes) before anything was spent
        tensors, _ = self.checkpointer.load(path)
        self.master.load_state(tensors, 0)
