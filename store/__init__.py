"""The Redis store: versioned parameters, trajectory and gradient streams, run metadata.

Tensors are stored as safetensors; metadata as JSON. Nothing read back can execute code.
"""

from store.connection import Store, redact, resolve_url
from store.embedded import EmbeddedRedis, free_port, redis_server_executable
from store.errors import (
    ClusterUrlNeeded,
    CorruptBlob,
    InvalidStoreUrl,
    StoreError,
    StoreUnavailable,
    VersionEvicted,
    VersionNotFound,
)
from store.keys import RunKeys, validate_run_id
from store.params import Applied, ParamStore, PolicySnapshot
from store.run import RunMeta, RunStore
from store.serde import decode, encode, read_meta
from store.streams import Entry, Stream, StreamStats
from store.urls import StoreUrl, parse_store_url

__all__ = [
    "ClusterUrlNeeded",
    "CorruptBlob",
    "EmbeddedRedis",
    "Entry",
    "InvalidStoreUrl",
    "ParamStore",
    "Applied",
    "PolicySnapshot",
    "RunKeys",
    "RunMeta",
    "RunStore",
    "Store",
    "StoreError",
    "StoreUnavailable",
    "Stream",
    "StreamStats",
    "StoreUrl",
    "VersionEvicted",
    "VersionNotFound",
    "decode",
    "encode",
    "free_port",
    "parse_store_url",
    "read_meta",
    "redact",
    "redis_server_executable",
    "resolve_url",
    "validate_run_id",
]
