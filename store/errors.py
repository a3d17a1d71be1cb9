"""Named errors of the store. Callers catch these, never raw redis-py exceptions."""

from __future__ import annotations


class StoreError(Exception):
    """Base class of every store error."""


class StoreUnavailable(StoreError):
    """Redis cannot be reached (down, refused, timed out) after retries."""

    def __init__(self, url: str, cause: BaseException | None = None) -> None:
        self.url = url
        detail = f": {cause}" if cause else ""
        super().__init__(f"Redis store unavailable at {url}{detail}")


class InvalidStoreUrl(StoreError, ValueError):
    """A Redis URL the store cannot use: unknown scheme or option, no host, a database on a
    cluster. The message names the URL (password redacted) and what is wrong."""


class ClusterUrlNeeded(StoreError):
    """A one-server URL (redis://, rediss://) points at a Redis Cluster node, which answered
    MOVED: the URL needs the cluster scheme."""

    def __init__(self, url: str, moved: BaseException) -> None:
        self.url = url
        super().__init__(
            f"Redis at {url} is a cluster node (it answered MOVED {moved}): use "
            f"{_cluster_scheme(url)}:// so the client follows the cluster's slots")


def _cluster_scheme(url: str) -> str:
    return "rediss+cluster" if url.startswith("rediss") else "redis+cluster"


class CorruptBlob(StoreError):
    """A blob read from the store is not a valid tensor blob (truncated, garbled, wrong type)."""


class VersionNotFound(StoreError):
    """No policy has been published under this version (or none at all)."""


class VersionEvicted(VersionNotFound):
    """The version existed but is older than the retention window and has been deleted."""

    def __init__(self, version: int, oldest_retained: int) -> None:
        self.version = version
        self.oldest_retained = oldest_retained
        super().__init__(
            f"policy version {version} was evicted; the oldest retained version is "
            f"{oldest_retained}"
        )
