"""Trajectory and gradient streams: Redis Streams with consumer groups.

* ``append`` is one Lua script: de-duplicate by producer id (a retried function must not add
  the same gradient twice), add the entry, trim to ``maxlen`` and count what trimming drops.
  Consumers delete what they acknowledge, so anything still in the stream is unconsumed and a
  trimmed entry is a genuinely dropped one: counted, never silent.
* ``read`` claims entries for one consumer in order (XREADGROUP, blocking — no busy wait).
* ``reclaim`` takes over entries a crashed consumer claimed but never acknowledged
  (XAUTOCLAIM after ``min_idle_ms``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import redis

import store.serde as serde
from store.connection import Store
from store.keys import RunKeys

# KEYS: stream, seen, dropped, appended, duplicates
# ARGV: maxlen, dedupe_ttl, use_dedupe, meta_json, [blob]
_APPEND = """
if ARGV[3] == '1' then
  if not redis.call('SET', KEYS[2], '1', 'NX', 'EX', tonumber(ARGV[2])) then
    redis.call('INCR', KEYS[5])
    return false
  end
end
local maxlen = tonumber(ARGV[1])
local len = redis.call('XLEN', KEYS[1])
local id
if ARGV[5] then
  id = redis.call('XADD', KEYS[1], 'MAXLEN', maxlen, '*', 'meta', ARGV[4], 'blob', ARGV[5])
else
  id = redis.call('XADD', KEYS[1], 'MAXLEN', maxlen, '*', 'meta', ARGV[4])
end
if len >= maxlen then
  redis.call('INCRBY', KEYS[3], len - maxlen + 1)
end
redis.call('INCR', KEYS[4])
return id
"""


@dataclass(frozen=True)
class Entry:
    """One stream entry: its id, JSON metadata and optional binary payload."""

    id: str
    meta: dict[str, Any] = field(default_factory=dict)
    blob: bytes | None = None


@dataclass(frozen=True)
class StreamStats:
    length: int
    appended: int
    dropped: int
    duplicates: int
    pending: int = 0


def _decode_entry(entry_id: bytes | str, fields: Mapping[bytes, bytes] | None) -> Entry:
    eid = entry_id.decode() if isinstance(entry_id, bytes) else entry_id
    fields = fields or {}
    return Entry(id=eid, meta=serde.unpack_json(fields.get(b"meta")), blob=fields.get(b"blob"))


class Stream:
    """A bounded, de-duplicated stream of entries of one run (``traj`` or ``grads``)."""

    def __init__(
        self,
        store: Store,
        run_id: str,
        name: str,
        maxlen: int = 10_000,
        dedupe_ttl_s: int = 24 * 3600,
    ) -> None:
        if maxlen < 1:
            raise ValueError("maxlen must be >= 1")
        self.store = store
        self.keys = RunKeys(run_id)
        self.name = name
        self.key = self.keys.stream(name)
        self.maxlen = maxlen
        self.dedupe_ttl_s = dedupe_ttl_s
        self._append = store.script(_APPEND)

    # -- producing -----------------------------------------------------------------------
    def append(
        self,
        meta: Mapping[str, Any],
        blob: bytes | None = None,
        dedupe_id: str | None = None,
    ) -> str | None:
        """Add an entry; returns its id, or ``None`` when ``dedupe_id`` was already added."""
        script, keys, args = self.append_command(meta, blob, dedupe_id)
        return self.append_reply(self.store.call(lambda r: script(keys=keys, args=args, client=r)))

    def append_command(
        self, meta: Mapping[str, Any], blob: bytes | None = None, dedupe_id: str | None = None
    ) -> tuple[Any, list[str], list[Any]]:
        """The append script with its KEYS and ARGV (for callers pipelining it)."""
        keys = [
            self.key,
            self.keys.stream_seen(self.name, dedupe_id or "-"),
            self.keys.stream_dropped(self.name),
            self.keys.stream_appended(self.name),
            self.keys.stream_duplicates(self.name),
        ]
        args: list[Any] = [self.maxlen, self.dedupe_ttl_s, "1" if dedupe_id else "0",
                           serde.pack_json(meta)]
        if blob is not None:
            args.append(bytes(blob))
        return self._append, keys, args

    @staticmethod
    def append_reply(reply: Any) -> str | None:
        if reply is None:
            return None
        return reply.decode() if isinstance(reply, bytes) else str(reply)

    # -- consuming -----------------------------------------------------------------------
    def ensure_group(self, group: str, start_id: str = "0") -> None:
        def create(r: redis.Redis) -> None:
            try:
                r.xgroup_create(self.key, group, id=start_id, mkstream=True)
            except redis.ResponseError as exc:
                if "BUSYGROUP" not in str(exc):
                    raise

        self.store.call(create)

    def read(
        self, group: str, consumer: str, count: int = 16, block_ms: int | None = 1000
    ) -> list[Entry]:
        """Claim up to ``count`` new entries for ``consumer``; blocks up to ``block_ms``."""
        return self.ack_and_read(group, consumer, (), count=count, block_ms=block_ms)

    def ack_and_read(
        self, group: str, consumer: str, ack_ids: Iterable[str], count: int = 16,
        block_ms: int | None = 1000, delete: bool = True,
    ) -> list[Entry]:
        """Acknowledge (and delete) ``ack_ids``, then claim up to ``count`` new entries.

        One round trip for a consumer's steady state — its previous batch done, the next one
        wanted — where :meth:`ack` then :meth:`read` would take two.
        """
        ack_ids = list(ack_ids)

        def xreadgroup(r: Any) -> Any:
            return r.xreadgroup(group, consumer, {self.key: ">"}, count=count, block=block_ms)

        def do(r: redis.Redis) -> Any:
            pipe = r.pipeline(transaction=False)
            if ack_ids:
                pipe.xack(self.key, group, *ack_ids)
                if delete:
                    pipe.xdel(self.key, *ack_ids)
            xreadgroup(pipe)
            replies = pipe.execute(raise_on_error=False)
            for reply in replies[:-1]:
                if isinstance(reply, Exception) and "NOGROUP" not in str(reply):
                    raise reply
            reply = replies[-1]
            if isinstance(reply, redis.ResponseError) and "NOGROUP" in str(reply):
                # The group vanished (e.g. Redis restarted empty): recreate and read again.
                r.xgroup_create(self.key, group, id="0", mkstream=True)
                return xreadgroup(r)
            if isinstance(reply, Exception):
                raise reply
            return reply

        reply = self.store.call(do)
        out: list[Entry] = []
        for _stream, items in reply or []:  # RESP2: [(stream, entries)]
            out.extend(_decode_entry(eid, fields) for eid, fields in items if fields is not None)
        return out

    def ack(self, group: str, ids: Iterable[str], delete: bool = True) -> int:
        """Acknowledge entries; by default also delete them (so trimming only drops unread)."""
        ids = list(ids)
        if not ids:
            return 0

        def do(r: redis.Redis) -> int:
            pipe = r.pipeline(transaction=True)
            pipe.xack(self.key, group, *ids)
            if delete:
                pipe.xdel(self.key, *ids)
            return int(pipe.execute()[0])

        return self.store.call(do)

    def reclaim(
        self, group: str, consumer: str, min_idle_ms: int, count: int = 16
    ) -> list[Entry]:
        """Take over entries another consumer claimed but did not ack for ``min_idle_ms``."""
        reply = self.store.call(
            lambda r: r.xautoclaim(self.key, group, consumer, min_idle_ms, "0-0", count=count)
        )
        items = reply[1] if reply else []
        return [_decode_entry(eid, fields) for eid, fields in items if fields is not None]

    def get(self, ids: Iterable[str]) -> list[Entry | None]:
        """Entries by id, in the order asked (``None`` for ids no longer in the stream)."""
        ids = list(ids)

        def do(r: redis.Redis) -> list[Any]:
            pipe = r.pipeline(transaction=False)
            for eid in ids:
                pipe.xrange(self.key, min=eid, max=eid, count=1)
            return pipe.execute()

        out: list[Entry | None] = []
        for rows in self.store.call(do) if ids else []:
            out.append(_decode_entry(*rows[0]) if rows else None)
        return out

    def delete(self, ids: Iterable[str]) -> int:
        ids = list(ids)
        return int(self.store.call(lambda r: r.xdel(self.key, *ids))) if ids else 0

    def stats(self, group: str | None = None) -> StreamStats:
        def do(r: redis.Redis) -> list[Any]:
            pipe = r.pipeline(transaction=False)
            pipe.xlen(self.key)
            pipe.get(self.keys.stream_appended(self.name))
            pipe.get(self.keys.stream_dropped(self.name))
            pipe.get(self.keys.stream_duplicates(self.name))
            return pipe.execute()

        length, appended, dropped, dups = self.store.call(do)
        pending = 0
        if group:
            try:
                info = self.store.call(lambda r: r.xpending(self.key, group))
                pending = int(info["pending"]) if info else 0
            except redis.ResponseError:
                pending = 0
        return StreamStats(
            length=int(length),
            appended=int(appended or 0),
            dropped=int(dropped or 0),
            duplicates=int(dups or 0),
            pending=pending,
        )
