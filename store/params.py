"""Versioned policy parameters: atomic publish, cheap latest-version reads, retention.

A published version is one safetensors blob (weights *and* observation-normaliser statistics:
both are the policy) plus a JSON metadata document. Publishing is one Lua script — blob,
version index and ``latest`` pointer change together — so a reader never sees a pointer to a
blob that is not there, and eviction of old versions happens in the same step.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

import store.serde as serde
from store.connection import Store
from store.errors import VersionEvicted, VersionNotFound
from store.keys import RunKeys
from store.params_lua import (
    FETCH_AND_HOLD,
    FETCH_LATEST,
    FETCH_NEWEST,
    HOLD,
    PUBLISH,
    PUBLISH_PREVIEW,
    WITH_APPLIED,
)


@dataclass(frozen=True)
class Applied:
    """What a learner that looks ahead polls: the latest version, and the last of its own
    gradients (``seq``) that a published version holds, with the version it produced."""

    latest: int
    seq: int | None = None
    version: int | None = None


@dataclass(frozen=True)
class PolicySnapshot:
    """One published policy version as read back from the store."""

    version: int
    tensors: dict[str, np.ndarray]
    meta: dict[str, Any] = field(default_factory=dict)
    stamp: str | None = None  # a preview's (see ParamStore.publish_preview); None: a version

    @property
    def token(self) -> str:
        """What identifies these weights among everything the store has published."""
        return self.stamp or str(self.version)

    @property
    def progress(self) -> float:
        """How far towards ``version + 1``: a preview after e of E epochs is e / E of the way
        (the fraction of the update's Adam steps it holds), a version 0."""
        epoch, epochs = self.meta.get("preview", (0, 1))
        return float(epoch) / float(epochs)


class ParamStore:
    """The versioned parameters of one run."""

    def __init__(self, store: Store, run_id: str, keep: int = 16) -> None:
        if keep < 1:
            raise ValueError("keep must be >= 1")
        self.store = store
        self.keys = RunKeys(run_id)
        self.keep = keep
        self._publish = store.script(PUBLISH)
        self._fetch_latest = store.script(FETCH_LATEST)
        self._with_applied = store.script(WITH_APPLIED)
        self._publish_preview = store.script(PUBLISH_PREVIEW)
        self._fetch_newest = store.script(FETCH_NEWEST)
        self._hold = store.script(HOLD)
        self._fetch_and_hold = store.script(FETCH_AND_HOLD)

    def publish(
        self,
        version: int,
        tensors: Mapping[str, Any],
        meta: Mapping[str, Any] | None = None,
        allow_rewind: bool = False,
        applied: Mapping[str, tuple[int, int]] | None = None,
        state: tuple[str, Mapping[str, Any], Mapping[str, Any]] | None = None,
    ) -> int:
        """Atomically store ``version`` and point ``latest`` at it; returns #evicted versions.

        Versions only move forward unless ``allow_rewind`` (a resumed orchestrator
        republishing its checkpoint), which also deletes the versions above it. ``applied``:
        lineage -> (seq, version) of the last gradient of each lineage applied since the
        previous publish, recorded in the same step (see :meth:`poll_command`). ``state``:
        (name, arrays, meta) of a state blob written in the same step (a learner's Adam
        moments: a version is never published without them, nor they without it — a
        function killed in between would leave the next update the wrong moments).
        """
        if int(version) < 0:
            raise ValueError("version must be >= 0")
        doc = {**dict(meta or {}), "version": int(version)}
        blob = serde.encode(tensors, doc)
        state_name = state[0] if state is not None else "none"
        state_blob = serde.encode(state[1], dict(state[2])) if state is not None else b""
        args: list[Any] = [self.keys.prefix, int(version), blob, self.keep,
                           "1" if allow_rewind else "0", state_blob]
        for lineage, (seq, v) in (applied or {}).items():
            args += [lineage, f"{int(seq)}:{int(v)}"]
        return int(
            self.store.call(
                lambda r: self._publish(
                    keys=[self.keys.params_latest, self.keys.params_versions,
                          self.keys.params_latest_blob, self.keys.params_applied,
                          self.keys.state(state_name), self.keys.params_held],
                    args=args,
                    client=r,
                )
            )
        )

    # -- versions held by learners in flight ------------------------------------------------
    def fetch_and_hold_command(self, holder: str, version: int | None, lease_s: float,
                               known_version: int | None, pin: tuple[int, ...] = (),
                               ) -> tuple[Any, list[str], list[Any]]:
        """:meth:`hold` and :meth:`fetch_command` as one script (for callers pipelining it);
        ``version`` None holds the latest itself."""
        known = "" if known_version is None else str(int(known_version))
        held = "" if version is None else _versions(version, pin)
        keys = [self.keys.params_held, self.keys.params_latest, self.keys.params_latest_blob]
        return self._fetch_and_hold, keys, [holder, held, _lease_ms(lease_s), known]

    def hold_latest(self, holder: str, lease_s: float, known_version: int | None,
                    ) -> tuple[PolicySnapshot | None, dict[str, int]]:
        """Hold the latest version (``holder`` computes with it) and fetch it unless it is
        ``known_version``, in one step: fetched first and held after, a version could be
        evicted by publishes in between while the others read it as held. Returns (the
        snapshot or None, the other holders' versions)."""
        script, keys, args = self.fetch_and_hold_command(holder, None, lease_s, known_version)
        return self.fetch_and_hold_reply(
            self.store.call(lambda r: script(keys=keys, args=args, client=r)))

    def fetch_and_hold_reply(self, reply: Any) -> tuple[PolicySnapshot | None, dict[str, int]]:
        others, fetched = reply
        return self.fetch_reply(fetched), self.hold_reply(others)

    @staticmethod
    def hold_reply(reply: Any) -> dict[str, int]:
        """The other holders' versions from a hold script's reply."""
        items = [x.decode() if isinstance(x, bytes) else str(x) for x in reply or []]
        return {items[i]: int(items[i + 1]) for i in range(0, len(items) - 1, 2)}

    def hold(self, holder: str, version: int, lease_s: float,
             pin: tuple[int, ...] = ()) -> dict[str, int]:
        """Record that ``holder`` computes with ``version`` (pinned against eviction for
        ``lease_s`` unless renewed or released, with the latest and the versions in ``pin``)
        and return the versions the *other* holders hold now, by holder: the policies IS
        truncation takes its minimum over."""
        keys = [self.keys.params_held, self.keys.params_latest]
        args = [holder, _versions(version, pin), _lease_ms(lease_s)]
        return self.hold_reply(self.store.call(
            lambda r: self._hold(keys=keys, args=args, client=r)))

    def release(self, *holders: str) -> None:
        """The holders are done (finished, failed or given up): their versions are unpinned."""
        if holders:
            self.store.call(lambda r: r.hdel(self.keys.params_held, *holders))

    def held(self) -> dict[str, int]:
        """Every live hold, by holder (read-only: for reports and tests)."""
        raw = self.store.call(lambda r: r.hgetall(self.keys.params_held))
        return {k.decode(): int(v.split(b":")[0].split(b",")[0]) for k, v in raw.items()}

    def publish_preview(self, base_version: int, epoch: int, epochs: int, invocation_id: str,
                        tensors: Mapping[str, Any], meta: Mapping[str, Any] | None = None) -> bool:
        """Store the weights of an update of ``base_version`` after ``epoch`` of its
        ``epochs`` epochs, for async actors to sample with until ``base_version + 1`` is out.

        Not a version: nothing reads it as one (``latest``, ``get`` and checkpoints never see
        it), only :meth:`fetch_newest`, and only while ``base_version`` is still the latest.
        Blob and stamp are set in one step; returns False (nothing written) when
        ``base_version`` is no longer the latest.
        """
        if not 0 < int(epoch) < int(epochs):
            raise ValueError(f"a preview is after epoch 1..{int(epochs) - 1}, got {epoch}")
        doc = {**dict(meta or {}), "version": int(base_version),
               "preview": [int(epoch), int(epochs)]}
        stamp = f"{int(base_version)}:{invocation_id}:{int(epoch)}"
        blob = serde.encode(tensors, doc)
        keys = [self.keys.params_latest, self.keys.params_preview, self.keys.params_preview_stamp]
        return bool(self.store.call(lambda r: self._publish_preview(
            keys=keys, args=[int(base_version), stamp, blob], client=r)))

    def fetch_newest(self, known_token: str | None) -> PolicySnapshot | None:
        """The newest behaviour policy — a preview of the latest version's update, else the
        latest version — or ``None`` when it is still ``known_token`` (one round trip)."""
        keys = [self.keys.params_latest, self.keys.params_latest_blob,
                self.keys.params_preview, self.keys.params_preview_stamp]
        reply = self.store.call(
            lambda r: self._fetch_newest(keys=keys, args=[known_token or ""], client=r))
        if not reply:
            raise VersionNotFound(f"no policy published yet for run {self.keys.run_id!r}")
        if len(reply) == 1:
            return None
        token, blob = reply
        token = token.decode() if isinstance(token, bytes) else str(token)
        base, is_preview, _ = token.partition(":")
        snap = self._snapshot(int(base), blob)
        return replace(snap, stamp=token) if is_preview else snap

    def latest_version(self) -> int | None:
        """One GET: the cheap check warm caches make before deciding to refetch."""
        raw = self.store.call(lambda r: r.get(self.keys.params_latest))
        return None if raw is None else int(raw)

    def latest(self) -> PolicySnapshot:
        """The newest published version: one GET of a self-describing blob (atomic)."""
        blob = self.store.call(lambda r: r.get(self.keys.params_latest_blob))
        if blob is None:
            raise VersionNotFound(f"no policy published yet for run {self.keys.run_id!r}")
        tensors, meta = serde.decode(blob)
        return PolicySnapshot(version=int(meta.get("version", -1)), tensors=tensors, meta=meta)

    def fetch_if_newer(self, known_version: int | None) -> PolicySnapshot | None:
        """The latest snapshot, or ``None`` when it is still ``known_version`` (one round trip)."""
        script, keys, args = self.fetch_command(known_version)
        return self.fetch_reply(self.store.call(lambda r: script(keys=keys, args=args, client=r)))

    def fetch_command(self, known_version: int | None) -> tuple[Any, list[str], list[str]]:
        """The fetch-if-newer script with its KEYS and ARGV (for callers pipelining it)."""
        known = "" if known_version is None else str(int(known_version))
        return self._fetch_latest, [self.keys.params_latest, self.keys.params_latest_blob], [known]

    def fetch_reply(self, reply: Any) -> PolicySnapshot | None:
        if not reply:
            raise VersionNotFound(f"no policy published yet for run {self.keys.run_id!r}")
        if len(reply) == 1:
            return None
        version, blob = int(reply[0]), reply[1]
        if blob is None:  # pragma: no cover - publish is atomic; only a manual DEL gets here
            raise VersionNotFound(f"policy version {version} has no blob")
        return self._snapshot(version, blob)

    def poll_command(self, lineage: str) -> tuple[Any, list[str], list[str]]:
        """The latest version and ``lineage``'s last applied gradient, as a script call for
        pipelining: a few bytes, where :meth:`fetch_command` moves a whole policy."""
        return self._with_applied, [self.keys.params_latest, self.keys.params_applied], [lineage]

    def poll_reply(self, reply: Any) -> Applied:
        latest, applied = reply
        if not latest:
            raise VersionNotFound(f"no policy published yet for run {self.keys.run_id!r}")
        return _applied(int(latest), applied)

    def latest_with_applied(self, lineage: str) -> tuple[PolicySnapshot, Applied]:
        """The latest policy and ``lineage``'s last applied gradient, read atomically: a
        learner rebasing onto the master must know exactly which of its steps it holds."""
        keys = [self.keys.params_latest_blob, self.keys.params_applied]
        blob, applied = self.store.call(
            lambda r: self._with_applied(keys=keys, args=[lineage], client=r))
        if not blob:
            raise VersionNotFound(f"no policy published yet for run {self.keys.run_id!r}")
        tensors, meta = serde.decode(blob)
        snap = PolicySnapshot(version=int(meta.get("version", -1)), tensors=tensors, meta=meta)
        return snap, _applied(snap.version, applied)

    def get(self, version: int) -> PolicySnapshot:
        """A specific version; :class:`VersionEvicted` when it fell out of the window."""
        version = int(version)
        pipe_result = self.store.call(
            lambda r: r.pipeline(transaction=True)
            .get(self.keys.params(version))
            .zrange(self.keys.params_versions, 0, 0)
            .get(self.keys.params_latest)
            .execute()
        )
        blob, oldest, latest = pipe_result
        if blob is not None:
            return self._snapshot(version, blob)
        if oldest and version < int(oldest[0]):
            raise VersionEvicted(version, int(oldest[0]))
        latest_txt = "none" if latest is None else int(latest)
        raise VersionNotFound(
            f"policy version {version} of run {self.keys.run_id!r} was never published "
            f"(latest: {latest_txt})"
        )

    def retained_versions(self) -> list[int]:
        raw = self.store.call(lambda r: r.zrange(self.keys.params_versions, 0, -1))
        return [int(v) for v in raw]

    def _snapshot(self, version: int, blob: bytes) -> PolicySnapshot:
        tensors, meta = serde.decode(blob)
        return PolicySnapshot(version=version, tensors=tensors, meta=meta)


def _versions(version: int, pin: tuple[int, ...]) -> str:
    """A hold's versions: the one computed with first (what the others read), then the rest."""
    rest = sorted({int(v) for v in pin} - {int(version)})
    return ",".join(str(v) for v in (int(version), *rest))


def _lease_ms(lease_s: float) -> int:
    if lease_s <= 0:
        raise ValueError("a hold's lease must be positive")
    return int(lease_s * 1000)


def _applied(latest: int, raw: bytes | str | None) -> Applied:
    if not raw:
        return Applied(latest)
    text = raw.decode() if isinstance(raw, bytes) else raw
    seq, _, version = text.partition(":")
    return Applied(latest, int(seq), int(version))
