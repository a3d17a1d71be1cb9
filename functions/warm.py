"""Per-process caches of warm execution environments: store connections and policies.

Module-level and keyed by (Redis URL, run id), so a worker that serves several runs in turn
never mixes them up; small LRUs keep memory bounded. Nothing here is needed for
correctness: a cold process rebuilds everything from the store.

Policies (and, in :mod:`functions.envs`, vector envs) are cached *per thread*: an in-process
invoker runs handlers concurrently on a thread pool, and two invocations must never share a
module whose weights one of them is reloading (or an env both are stepping). Each pool thread
then behaves like one Lambda execution environment, warm across its invocations.
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import torch

from functions.normalizer import RunningMeanStd
from functions.policy import ActorCritic, build_policy, load_policy_tensors
from store import PolicySnapshot, RunStore, Store, resolve_url

_STORES: dict[str, Store] = {}
_RUN_STORES: OrderedDict[tuple[str, str], RunStore] = OrderedDict()
_STORES_LOCK = threading.Lock()


def run_store(redis_url: str | None, run_id: str) -> RunStore:
    """The (cached) :class:`RunStore` of a run; ``None`` URL -> ``$REDIS_URL``.

    Shared by all threads: a :class:`Store` is a thread-safe connection pool.
    """
    url = resolve_url(redis_url)
    key = (url, run_id)
    with _STORES_LOCK:
        rs = _RUN_STORES.get(key)
        if rs is None:
            if url not in _STORES:
                _STORES[url] = Store(url)
            rs = _RUN_STORES[key] = RunStore(_STORES[url], run_id)
            while len(_RUN_STORES) > 8:
                _RUN_STORES.popitem(last=False)
        else:
            _RUN_STORES.move_to_end(key)
        return rs


def set_threads() -> None:
    """Functions share the machine's two cores with everything else: one torch thread."""
    if torch.get_num_threads() != 1:
        torch.set_num_threads(1)


def lower_cpu_priority(nice: int) -> None:
    """Raise this process's niceness to at least ``nice``; never lowers it (that needs
    privileges), so a warm worker asked twice keeps the first answer. A no-op where the
    platform has no ``os.nice``.

    On Linux ``nice`` applies to the calling thread (and threads it starts later): call it
    from the thread that runs the handler, in a process that runs nothing else.
    """
    if nice <= 0 or not hasattr(os, "nice"):
        return
    current = os.nice(0)
    if current < nice:
        os.nice(nice - current)


@dataclass
class CachedPolicy:
    version: int
    model: ActorCritic
    obs_rms: RunningMeanStd
    ret_rms: RunningMeanStd
    meta: dict[str, Any]
    stamp: str | None = None  # PolicySnapshot.stamp: a preview's; None for a version
    progress: float = 0.0  # PolicySnapshot.progress: 0 for a version

    @property
    def token(self) -> str:
        """PolicySnapshot.token: the version, or a preview's stamp."""
        return self.stamp or str(self.version)

    @property
    def is_preview(self) -> bool:
        return self.stamp is not None


def same_shape(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Do two policy metas describe modules of the same shape (weights interchangeable)?"""
    keys = ("obs_dim", "action_space", "spec")
    return all(a.get(k) == b.get(k) for k in keys)


class PolicyCache:
    """The last policy version each run used in this process, refetched only when moved."""

    def __init__(self, max_runs: int = 2) -> None:
        self.max_runs = max_runs
        self._local = threading.local()

    @property
    def _entries(self) -> OrderedDict[tuple[str, str], CachedPolicy]:
        """This thread's entries (see the module docstring)."""
        entries = getattr(self._local, "entries", None)
        if entries is None:
            entries = self._local.entries = OrderedDict()
        return entries

    def _key(self, rs: RunStore) -> tuple[str, str]:
        return (rs.store.url, rs.run_id)

    def get(
        self,
        rs: RunStore,
        want: Literal["latest"] | int = "latest",
        device: torch.device | str = "cpu",
        fetch: Callable[[int | None], PolicySnapshot | None] | None = None,
    ) -> tuple[CachedPolicy, bool]:
        """(policy, cached): ``cached`` is True when no weights were transferred. ``fetch``:
        how the latest is fetched given the known version (default: fetch-if-newer; a
        learner among several holds it in the same step)."""
        key = self._key(rs)
        entry = self._entries.get(key)
        if entry is not None:
            self._entries.move_to_end(key)
        # A preview is no version: asked for one, refetch it whole.
        plain = entry if entry is not None and not entry.is_preview else None
        known = plain.version if plain is not None else None
        if want == "latest":
            snap = fetch(known) if fetch is not None else rs.params.fetch_if_newer(known)
        elif plain is not None and plain.version == int(want):
            snap = None
        else:
            snap = rs.params.get(int(want))
        if snap is None and entry is not None:
            return entry, True
        assert snap is not None
        return self._load(key, entry, snap, device), False

    def newest(self, rs: RunStore, device: torch.device | str = "cpu") -> tuple[CachedPolicy, bool]:
        """(policy, cached) for an async actor: the newest behaviour policy, a learner's
        preview of the next version when there is one (ParamStore.fetch_newest)."""
        key = self._key(rs)
        entry = self._entries.get(key)
        snap = rs.params.fetch_newest(entry.token if entry is not None else None)
        if snap is None and entry is not None:
            self._entries.move_to_end(key)
            return entry, True
        assert snap is not None
        return self._load(key, entry, snap, device), False

    def install(self, rs: RunStore, snap: PolicySnapshot, device: torch.device | str = "cpu") -> CachedPolicy:
        """Load a snapshot fetched elsewhere (a learner's writer thread) into the cache."""
        key = self._key(rs)
        return self._load(key, self._entries.get(key), snap, device)

    def _load(
        self,
        key: tuple[str, str],
        entry: CachedPolicy | None,
        snap: PolicySnapshot,
        device: torch.device | str,
    ) -> CachedPolicy:
        if entry is not None and same_shape(entry.meta, snap.meta):
            model = entry.model  # reuse the module: only the numbers changed
        else:
            model = build_policy(snap.meta)
        obs_rms, ret_rms = load_policy_tensors(model, snap.tensors)
        if next(model.parameters()).device != torch.device(device):
            model.to(device)
        new = CachedPolicy(snap.version, model, obs_rms, ret_rms, dict(snap.meta),
                           snap.stamp, snap.progress)
        self._entries[key] = new
        self._entries.move_to_end(key)
        while len(self._entries) > self.max_runs:
            self._entries.popitem(last=False)
        return new

    def set_version(self, rs: RunStore, version: int, obs_rms: RunningMeanStd,
                    ret_rms: RunningMeanStd) -> None:
        """Relabel the cached module after this process published its weights itself."""
        entry = self._entries.get(self._key(rs))
        if entry is not None:
            entry.version, entry.obs_rms, entry.ret_rms = int(version), obs_rms, ret_rms
            entry.stamp, entry.progress = None, 0.0

    def invalidate(self, rs: RunStore) -> None:
        self._entries.pop(self._key(rs), None)

    def clear(self) -> None:
        self._entries.clear()
