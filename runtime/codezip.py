"""Safe unpacking of function code zips (Lambda's limits, no path escapes, no zip bombs)."""

from __future__ import annotations

import io
import shutil
import stat
import zipfile
from pathlib import Path

from runtime.errors import InvalidParameterValueException, RequestEntityTooLargeException

MAX_ZIPPED_BYTES = 52_428_800  # 50 MB: AWS's direct-upload limit
MAX_UNZIPPED_BYTES = 262_144_000  # 250 MB: AWS's unzipped deployment package limit
_CHUNK = 1 << 20
_BAD_ZIP = "Could not unzip uploaded file. Please check your file, then try to upload again."


def _check_member(info: zipfile.ZipInfo) -> None:
    name = info.filename.replace("\\", "/")
    parts = [p for p in name.split("/") if p not in ("", ".")]
    if name.startswith("/") or (len(name) > 1 and name[1] == ":") or ".." in parts:
        raise InvalidParameterValueException(f"{_BAD_ZIP} Unsafe path in archive: {info.filename!r}")
    # A symlink member could point anywhere on the host once extracted.
    if stat.S_ISLNK(info.external_attr >> 16):
        raise InvalidParameterValueException(f"{_BAD_ZIP} Symbolic link in archive: {info.filename!r}")


def unpack(zip_bytes: bytes, dest: Path) -> int:
    """Extract ``zip_bytes`` into the new folder ``dest``; returns the unzipped size.

    The declared sizes are checked up front, and the bytes actually written are counted
    too, because a crafted archive can lie in its headers.
    """
    if len(zip_bytes) > MAX_ZIPPED_BYTES:
        raise RequestEntityTooLargeException(
            f"Zipped size must be smaller than {MAX_ZIPPED_BYTES} bytes"
        )
    try:
        archive = zipfile.ZipFile(io.BytesIO(zip_bytes))
        infos = archive.infolist()
    except (zipfile.BadZipFile, ValueError, EOFError) as exc:
        raise InvalidParameterValueException(_BAD_ZIP) from exc
    for info in infos:
        _check_member(info)
    if sum(i.file_size for i in infos) > MAX_UNZIPPED_BYTES:
        raise InvalidParameterValueException(
            f"Unzipped size must be smaller than {MAX_UNZIPPED_BYTES} bytes"
        )
    dest.mkdir(parents=True, exist_ok=False)
    root = dest.resolve()
    written = 0
    try:
        for info in infos:
            target = (root / info.filename).resolve()
            if root not in target.parents and target != root:
                raise InvalidParameterValueException(f"{_BAD_ZIP} Unsafe path: {info.filename!r}")
            if info.is_dir():
                target.mkdir(parents=True, exist_ok=True)
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            with archive.open(info) as src, open(target, "wb") as out:
                while chunk := src.read(_CHUNK):
                    written += len(chunk)
                    if written > MAX_UNZIPPED_BYTES:
                        raise InvalidParameterValueException(
                            f"Unzipped size must be smaller than {MAX_UNZIPPED_BYTES} bytes"
                        )
                    out.write(chunk)
    except (zipfile.BadZipFile, OSError, EOFError, NotImplementedError) as exc:
        shutil.rmtree(dest, ignore_errors=True)
        raise InvalidParameterValueException(_BAD_ZIP) from exc
    except InvalidParameterValueException:
        shutil.rmtree(dest, ignore_errors=True)
        raise
    return written
