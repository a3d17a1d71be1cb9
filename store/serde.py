"""Tensor blobs: safetensors bytes with a JSON metadata document — data only, never code.

A blob is a standard safetensors file: an 8-byte little-endian header length, a JSON header
(dtype, shape and offsets of each tensor, plus ``__metadata__``), then raw little-endian
data. Decoding reads JSON and raw numbers only, so nothing read from Redis or HTTP can
execute code. Our own metadata (any JSON document) rides in ``__metadata__["stellaris"]``.
"""

from __future__ import annotations

import json
import math
import struct
from collections.abc import Mapping
from typing import Any

import numpy as np
from safetensors.numpy import save as _st_save

from store.errors import CorruptBlob

_META_KEY = "stellaris"
# safetensors dtype names -> little-endian numpy dtypes (the format is little-endian).
_DTYPES = {
    name: np.dtype(code)
    for name, code in {
        "F64": "<f8", "F32": "<f4", "F16": "<f2", "I64": "<i8", "I32": "<i4", "I16": "<i2",
        "I8": "i1", "U64": "<u8", "U32": "<u4", "U16": "<u2", "U8": "u1", "BOOL": "?",
    }.items()
}
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
    return _meta_of(_header(blob))


def _meta_of(header: dict[str, Any]) -> dict[str, Any]:
    section = header.get("__metadata__") or {}
    if not isinstance(section, dict):
        raise CorruptBlob("tensor blob __metadata__ is not a JSON object")
    raw = section.get(_META_KEY, "{}")
    try:
        meta = json.loads(raw)
    except (TypeError, ValueError) as exc:
        raise CorruptBlob(f"tensor blob metadata is not valid JSON: {exc}") from exc
    if not isinstance(meta, dict):
        raise CorruptBlob("tensor blob metadata is not a JSON object")
    return meta


def decode(blob: bytes) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """Parse a blob into (arrays, metadata); any malformation raises :class:`CorruptBlob`.

    Arrays are zero-copy, read-only views into ``blob`` (a warm actor refetching weights pays
    for one header parse, not a copy of every tensor); copy before mutating. Every offset and
    size is validated against the header, so a garbled blob cannot read out of bounds.
    """
    header, size = _header_and_size(blob)
    meta = _meta_of(header)
    data = memoryview(blob)[8 + size :]
    n_data = len(data)
    arrays: dict[str, np.ndarray] = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        try:
            dtype = _DTYPES[info["dtype"]]
            shape = tuple(int(d) for d in info["shape"])
            start, end = (int(o) for o in info["data_offsets"])
        except (KeyError, TypeError, ValueError) as exc:
            raise CorruptBlob(f"tensor {name!r} has a malformed header entry: {exc}") from exc
        count = math.prod(shape)
        if min(shape, default=0) < 0 or not 0 <= start <= end <= n_data or (
            end - start != count * dtype.itemsize
        ):
            raise CorruptBlob(
                f"tensor {name!r} is truncated or garbled (offsets {start}..{end}, "
                f"{len(data)} data bytes, shape {shape}, dtype {info['dtype']})"
            )
        arrays[name] = np.frombuffer(data, dtype=dtype, count=count, offset=start).reshape(shape)
    return arrays, meta


def _header(blob: bytes) -> dict[str, Any]:
    return _header_and_size(blob)[0]


def _header_and_size(blob: bytes) -> tuple[dict[str, Any], int]:
    if not isinstance(blob, bytes | bytearray | memoryview):
        raise CorruptBlob(f"tensor blob must be bytes, got {type(blob).__name__}")
    if len(blob) < 8:
        raise CorruptBlob(f"tensor blob is truncated ({len(blob)} bytes, need at least 8)")
    (size,) = struct.unpack_from("<Q", blob, 0)
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
    return header, size


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
