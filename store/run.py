"""One run's view of the store: parameters, the two streams, metadata; and cleanup."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import redis

import store.serde as serde
from store.connection import Store
from store.keys import RunKeys
from store.params import Applied, ParamStore, PolicySnapshot
from store.streams import Stream


class RunMeta:
    """Run metadata as a Redis hash of JSON values (config, status, owner, ...)."""

    def __init__(self, store: Store, run_id: str) -> None:
        self.store = store
        self.key = RunKeys(run_id).meta

    def set(self, values: Mapping[str, Any]) -> None:
        mapping = {k: serde.pack_json({"v": v}) for k, v in values.items()}
        if mapping:
            self.store.call(lambda r: r.hset(self.key, mapping=mapping))

    def get(self, name: str, default: Any = None) -> Any:
        raw = self.store.call(lambda r: r.hget(self.key, name))
        return default if raw is None else serde.unpack_json(raw).get("v", default)

    def all(self) -> dict[str, Any]:
        raw = self.store.call(lambda r: r.hgetall(self.key))
        return {k.decode(): serde.unpack_json(v).get("v") for k, v in raw.items()}


class RunStore:
    """Everything of one run, built from one :class:`Store`."""

    def __init__(
        self,
        store: Store,
        run_id: str,
        keep_versions: int = 16,
        traj_maxlen: int = 4096,
        grads_maxlen: int = 100_000,
    ) -> None:
        self.store = store
        self.run_id = run_id
        self.keys = RunKeys(run_id)
        self.params = ParamStore(store, run_id, keep=keep_versions)
        self.traj = Stream(store, run_id, "traj", maxlen=traj_maxlen)
        self.grads = Stream(store, run_id, "grads", maxlen=grads_maxlen)
        self.meta = RunMeta(store, run_id)

    def append_and_poll(
        self, stream: Stream, meta: Mapping[str, Any], blob: bytes | None, dedupe_id: str | None,
        known_version: int | None,
    ) -> tuple[str | None, PolicySnapshot | None]:
        """``stream.append(...)`` and ``params.fetch_if_newer(known_version)`` in one round trip.

        A learner streams a gradient and picks up the newest policy every minibatch: two
        scripts in one pipeline halve the round trips (and their CPU, on few cores).
        """
        append_reply, fetch_reply = self._run_scripts([
            stream.append_command(meta, blob, dedupe_id), self.params.fetch_command(known_version)])
        return Stream.append_reply(append_reply), self.params.fetch_reply(fetch_reply)

    def append_poll_and_hold(
        self, stream: Stream, meta: Mapping[str, Any], blob: bytes | None, dedupe_id: str | None,
        known_version: int | None, holder: str, held_version: int, lease_s: float,
        pin: tuple[int, ...] = (),
    ) -> tuple[str | None, PolicySnapshot | None, dict[str, int]]:
        """:meth:`append_and_poll` plus ``params.hold(...)`` in the same round trip: a learner
        among several renews the version it computes with (``pin``: more versions it may
        still use) and reads the others' (IS truncation's policies) with each gradient."""
        append_reply, fetch_hold_reply = self._run_scripts([
            stream.append_command(meta, blob, dedupe_id),
            self.params.fetch_and_hold_command(holder, held_version, lease_s, known_version,
                                               pin=pin)])
        snap, others = self.params.fetch_and_hold_reply(fetch_hold_reply)
        return Stream.append_reply(append_reply), snap, others

    def append_and_poll_applied(
        self, stream: Stream, meta: Mapping[str, Any], blob: bytes | None, dedupe_id: str | None,
        lineage: str,
    ) -> tuple[str | None, Applied]:
        """``stream.append(...)`` and ``params.poll_command(lineage)`` in one round trip: what a
        learner that looks ahead needs per minibatch (a few bytes back, not a policy)."""
        append_reply, poll_reply = self._run_scripts([
            stream.append_command(meta, blob, dedupe_id), self.params.poll_command(lineage)])
        return Stream.append_reply(append_reply), self.params.poll_reply(poll_reply)

    def _run_scripts(self, scripts: list[tuple[Any, list[str], list[Any]]]) -> list[Any]:
        """Run Lua scripts in one pipeline, by SHA; one the server lost (a restart) is
        reloaded and run alone."""

        def do(r: redis.Redis) -> list[Any]:
            pipe = r.pipeline(transaction=False)
            for script, keys, args in scripts:
                # execute_command: a cluster pipeline refuses pipe.evalsha, not EVALSHA itself
                pipe.execute_command("EVALSHA", script.sha, len(keys), *keys, *args)
            replies = pipe.execute(raise_on_error=False)
            for i, (script, keys, args) in enumerate(scripts):
                if isinstance(replies[i], redis.exceptions.NoScriptError):
                    replies[i] = script(keys=keys, args=args, client=r)  # loads it, runs it
                elif isinstance(replies[i], Exception):
                    raise replies[i]
            return replies

        return list(self.store.call(do))

    def put_state(self, name: str, tensors: Mapping[str, Any], meta: Mapping[str, Any] | None = None) -> None:
        """Store a named tensor blob (safetensors), e.g. optimizer state between sync rounds."""
        blob = serde.encode(tensors, meta)
        self.store.call(lambda r: r.set(self.keys.state(name), blob))

    def get_state(self, name: str) -> tuple[dict[str, Any], dict[str, Any]] | None:
        """The named blob as (arrays, meta), or ``None`` when absent."""
        blob = self.store.call(lambda r: r.get(self.keys.state(name)))
        return None if blob is None else serde.decode(blob)

    def clear(self) -> int:
        """Delete every key of the run (SCAN, not KEYS: never block the server)."""

        def do(r: Any) -> int:
            n = 0
            batch: list[bytes] = []
            for key in r.scan_iter(match=self.keys.pattern, count=500):
                batch.append(key)
                if len(batch) >= 500:
                    n += r.delete(*batch)
                    batch.clear()
            if batch:
                n += r.delete(*batch)
            return n

        return int(self.store.call(do))
