"""Frames between the server and a worker: 4-byte big-endian length, then UTF-8 JSON.

JSON only, never pickle: a worker runs arbitrary user code, so nothing it sends may be able
to execute code in the server. This module is stdlib-only because workers import it.
"""

from __future__ import annotations

import json
import socket
import struct
from typing import Any

HEADER = struct.Struct(">I")
MAX_FRAME = 64 * 1024 * 1024  # far above Lambda's 6 MB payloads; guards against garbage


def encode(frame: dict[str, Any]) -> bytes:
    data = json.dumps(frame, separators=(",", ":")).encode()
    return HEADER.pack(len(data)) + data


def recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise EOFError("peer closed")
        buf += chunk
    return bytes(buf)


def recv_frame(sock: socket.socket) -> dict[str, Any]:
    (length,) = HEADER.unpack(recv_exact(sock, HEADER.size))
    if length > MAX_FRAME:
        raise ValueError(f"frame too large: {length}")
    return json.loads(recv_exact(sock, length))
