"""Connecting to Redis: ``REDIS_URL`` when given, else an embedded server; retries; errors.

Every store operation goes through :meth:`Store.call`, which retries transient connection
errors with exponential backoff (tenacity) for up to ``retry_seconds`` and then raises
:class:`StoreUnavailable` naming the URL — never a raw redis-py exception.
"""

from __future__ import annotations

import atexit
import os
import threading
from collections.abc import Callable
from typing import Any, TypeVar
from urllib.parse import urlsplit, urlunsplit

import redis
from tenacity import (
    RetryError,
    Retrying,
    retry_if_exception_type,
    stop_after_delay,
    wait_exponential,
)

from store.embedded import EmbeddedRedis
from store.errors import StoreUnavailable

T = TypeVar("T")
_TRANSIENT = (redis.ConnectionError, redis.TimeoutError, ConnectionError, OSError)

_embedded_lock = threading.Lock()
_embedded: EmbeddedRedis | None = None


def redact(url: str) -> str:
    """The URL with any password replaced, for logs and error messages."""
    parts = urlsplit(url)
    if parts.password:
        netloc = f"{parts.username or ''}:***@{parts.hostname}"
        if parts.port:
            netloc += f":{parts.port}"
        return urlunsplit(parts._replace(netloc=netloc))
    return url


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
        scheme = urlsplit(url).scheme
        if scheme not in ("redis", "rediss", "unix"):
            raise ValueError(
                f"unsupported Redis URL scheme {scheme!r} in {redact(url)}: "
                "use redis://, rediss:// or unix://"
            )
        return url
    return embedded_url()


class Store:
    """A Redis connection pool plus the retry policy every store class shares."""

    def __init__(
        self,
        url: str | None = None,
        retry_seconds: float = 10.0,
        socket_timeout: float = 10.0,
    ) -> None:
        self.url = resolve_url(url)
        self.retry_seconds = retry_seconds
        self.redis = redis.Redis.from_url(
            self.url,
            socket_timeout=socket_timeout,
            socket_connect_timeout=min(socket_timeout, 2.0),
            health_check_interval=30,
        )

    def call(self, fn: Callable[[redis.Redis], T]) -> T:
        """Run ``fn(redis)``, retrying transient connection errors, else StoreUnavailable."""
        try:  # fast path: no retry machinery on the (overwhelmingly common) first success
            return fn(self.redis)
        except _TRANSIENT:
            pass
        try:
            for attempt in Retrying(
                stop=stop_after_delay(self.retry_seconds),
                wait=wait_exponential(multiplier=0.02, max=1.0),
                retry=retry_if_exception_type(_TRANSIENT),
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

    def script(self, source: str) -> Any:
        return self.redis.register_script(source)

    def close(self) -> None:
        self.redis.close()

    def __repr__(self) -> str:
        return f"Store({redact(self.url)!r})"
