"""Tensor blobs: safetensors bytes with a JSON metadata document. Never pickle.

A blob is a standard safetensors file: an 8-byte little-endian header length, a JSON header
(dtype, shape and offsets of each tensor, plus ``__metadata__``), then raw little-endian
data. Decoding reads JSON and raw numbers only, so nothing read from Redis or HTTP can
execute code. Our own metadata (any JSON document) rides in ``__metadata__["stellaris"]``.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Mapping
from typing import Any

import numpy as np
from safetensors import SafetensorError
from safetensors.numpy import load as _st_load
from safetensors.numpy import save as _st_save

from store.errors import CorruptBlob

_META_KEY = "stellaris"
_MAX_HEADER = 100 * 1024 * 1024


def encode(tensors: Mapping[str, Any], meta: Mapping[str, Any] | None = None) -> bytes:
    """Serialise named arrays (numpy or anything with ``.numpy()``) plus JSON metadata."""
    arrays: dict[str, np.ndarray] = {}
    for name, value in tensors.items():
        if hasattr(value, "detach"):  # torch.Tensor, without importing torch here
            value = value.detach().cpu().numpy()
        arrays[name] = np.ascontiguousarray(np.asarray(value))
    metadata = {_META_KEY: json.dumps(dict(meta or {}), separators=(",", ":"))}
    return _st_save(arrays, metadata=metadata)


def read_meta(blob: bytes) -> dict[str, Any]:
    """Only the metadata document of a blob, without touching the tensor data."""
    header = _header(blob)
    raw = header.get("__metadata__", {}).get(_META_KEY, "{}")
    try:
        meta = json.loads(raw)
    except (TypeError, ValueError) as exc:
        raise CorruptBlob(f"tensor blob metadata is not valid JSON: {exc}") from exc
    if not isinstance(meta, dict):
        raise CorruptBlob("tensor blob metadata is not a JSON object")
    return meta


def decode(blob: bytes) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """Parse a blob into (arrays, metadata); any malformation raises :class:`CorruptBlob`."""
    meta = read_meta(blob)
    try:
        arrays = _st_load(bytes(blob))
    except (SafetensorError, ValueError, TypeError, OverflowError) as exc:
        raise CorruptBlob(f"tensor blob is corrupt: {exc}") from exc
    return arrays, meta


def _header(blob: bytes) -> dict[str, Any]:
    if not isinstance(blob, bytes | bytearray | memoryview):
        raise CorruptBlob(f"tensor blob must be bytes, got {type(blob).__name__}")
    if len(blob) < 8:
        raise CorruptBlob(f"tensor blob is truncated ({len(blob)} bytes, need at least 8)")
    (size,) = struct.unpack("<Q", bytes(blob[:8]))
    if size > _MAX_HEADER or 8 + size > len(blob):
        raise CorruptBlob(
            f"tensor blob is truncated or garbled (header says {size} bytes, blob has "
            f"{len(blob) - 8})"
        )
    try:
        header = json.loads(bytes(blob[8 : 8 + size]))
    except ValueError as exc:
        raise CorruptBlob(f"tensor blob header is not valid JSON: {exc}") from exc
    if not isinstance(header, dict):
        raise CorruptBlob("tensor blob header is not a JSON object")
    return header


def pack_json(doc: Mapping[str, Any]) -> str:
    return json.dumps(doc, separators=(",", ":"), sort_keys=True)


def unpack_json(raw: str | bytes | None) -> dict[str, Any]:
    if raw is None:
        return {}
    try:
        doc = json.loads(raw)
    except ValueError as exc:
        raise CorruptBlob(f"metadata is not valid JSON: {exc}") from exc
    if not isinstance(doc, dict):
        raise CorruptBlob("metadata is not a JSON object")
    return doc
