"""Connecting to Redis: ``REDIS_URL`` when given, else an embedded server; retries; errors.

Every store operation goes through :meth:`Store.call`, which retries transient connection
errors with exponential backoff (tenacity) for up to ``retry_seconds`` and then raises
:class:`StoreUnavailable` naming the URL — never a raw redis-py exception.

One server (``redis://``, ``rediss://``) gets a ``redis.Redis``, a cluster
(``redis+cluster://``, ``rediss+cluster://``) a ``redis.cluster.RedisCluster``: a run's keys
share one hash slot (store/keys.py), so its scripts and transactions work on either.
"""

from __future__ import annotations

import atexit
import os
import threading
from collections.abc import Callable
from typing import Any, TypeVar

import redis
from redis.cluster import RedisCluster
from redis.commands.core import Script
from redis.exceptions import (
    ClusterDownError,
    InvalidResponse,
    MovedError,
    RedisClusterException,
    TryAgainError,
)
from tenacity import (
    RetryError,
    Retrying,
    retry_if_exception_type,
    retry_if_not_exception_type,
    stop_after_delay,
    wait_exponential,
)

from store.embedded import EmbeddedRedis
from store.errors import ClusterUrlNeeded, StoreUnavailable
from store.urls import StoreUrl, parse_store_url, redact

T = TypeVar("T")
_TRANSIENT = (redis.ConnectionError, redis.TimeoutError, ConnectionError, OSError,
              ClusterDownError, TryAgainError)
Client = redis.Redis | RedisCluster

_embedded_lock = threading.Lock()
_embedded: EmbeddedRedis | None = None


def embedded_url() -> str:
    """Start (once per process) the embedded Redis and return its URL; stopped at exit."""
    global _embedded
    with _embedded_lock:
        if _embedded is None:
            _embedded = EmbeddedRedis().start()
            atexit.register(_embedded.close)
        return _embedded.url


def resolve_url(url: str | None) -> str:
    """The explicit URL, else ``$REDIS_URL``, else an embedded server started on demand."""
    url = url or os.environ.get("REDIS_URL")
    if url:
        parse_store_url(url)  # InvalidStoreUrl (a ValueError) before anything connects
        return url
    return embedded_url()


class Store:
    """A Redis connection pool (one server's or a cluster's) plus the retry policy every
    store class shares."""

    def __init__(
        self,
        url: str | None = None,
        retry_seconds: float = 10.0,
        socket_timeout: float = 10.0,
        connect_timeout: float = 2.0,
    ) -> None:
        self.url = resolve_url(url)
        self.parsed: StoreUrl = parse_store_url(self.url)
        self.retry_seconds = retry_seconds
        self._kwargs: dict[str, Any] = {
            "socket_timeout": socket_timeout,
            "socket_connect_timeout": min(socket_timeout, connect_timeout),
            **({} if self.parsed.cluster else {"health_check_interval": 30}),
            **self.parsed.options,  # the URL's own options win
        }
        self._client: Client | None = None
        self._client_lock = threading.Lock()

    @property
    def cluster(self) -> bool:
        return self.parsed.cluster

    @property
    def redis(self) -> Client:
        """The client, made on first use: a cluster client reads the topology when it is
        made, so making it is a connection (retried by :meth:`call` like any other)."""
        client = self._client
        if client is None:
            with self._client_lock:
                client = self._client
                if client is None:
                    client = self._client = self._connect()
        return client

    def _connect(self) -> Client:
        if not self.parsed.cluster:
            return redis.Redis.from_url(self.parsed.base, **self._kwargs)
        try:
            return RedisCluster.from_url(self.parsed.base, **self._kwargs)
        except RedisClusterException as exc:  # "cannot be connected": no node answered
            raise redis.ConnectionError(str(exc)) from exc

    def call(self, fn: Callable[[Any], T]) -> T:
        """Run ``fn(client)``, retrying transient connection errors, else StoreUnavailable."""
        try:
            return self._call(fn)
        except MovedError as exc:  # a cluster client follows MOVED: only a plain one sees it
            raise ClusterUrlNeeded(redact(self.url), exc) from None
        except (InvalidResponse, redis.AuthenticationError) as exc:
            # not Redis's protocol, or credentials refused: no retry changes the answer
            raise StoreUnavailable(redact(self.url), exc) from exc

    def _call(self, fn: Callable[[Any], T]) -> T:
        try:  # fast path: no retry machinery on the (overwhelmingly common) first success
            return fn(self.redis)
        except redis.AuthenticationError:
            raise
        except _TRANSIENT as exc:
            if self.retry_seconds <= 0:  # one attempt (a probe wants the first error)
                raise StoreUnavailable(redact(self.url), exc) from exc
        try:
            for attempt in Retrying(
                stop=stop_after_delay(self.retry_seconds),
                wait=wait_exponential(multiplier=0.02, max=1.0),
                retry=retry_if_exception_type(_TRANSIENT)
                & retry_if_not_exception_type(redis.AuthenticationError),
                reraise=False,
            ):
                with attempt:
                    return fn(self.redis)
        except RetryError as exc:
            cause = exc.last_attempt.exception()
            raise StoreUnavailable(redact(self.url), cause) from cause
        raise AssertionError("unreachable")  # pragma: no cover

    def ping(self) -> bool:
        return bool(self.call(lambda r: r.ping()))

    def script(self, source: str) -> Script:
        """A Lua script, run with ``script(keys=..., args=..., client=r)`` inside :meth:`call`.
        Its SHA needs no server, so making one never connects."""
        return Script(None, source.encode())  # type: ignore[arg-type]

    def close(self) -> None:
        if self._client is not None:
            self._client.close()

    def __repr__(self) -> str:
        return f"Store({redact(self.url)!r})"
