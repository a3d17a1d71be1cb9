"""Package ``functions/`` and ``store/`` as a Lambda zip (the code; dependencies come from the
runtime's Python environment locally, or from the container image on AWS)."""

from __future__ import annotations

import base64
import hashlib
import io
import zipfile
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("functions", "store")


def build_function_zip(root: Path = REPO_ROOT, packages: tuple[str, ...] = PACKAGES) -> bytes:
    """A deterministic zip (sorted entries, fixed timestamps): same code, same CodeSha256."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for pkg in packages:
            base = root / pkg
            if not (base / "__init__.py").exists():
                raise FileNotFoundError(f"package {pkg!r} not found under {root}")
            for path in sorted(base.rglob("*.py")):
                if "__pycache__" in path.parts:
                    continue
                info = zipfile.ZipInfo(str(path.relative_to(root)), date_time=(2020, 1, 1, 0, 0, 0))
                info.external_attr = 0o644 << 16
                info.compress_type = zipfile.ZIP_DEFLATED
                zf.writestr(info, path.read_bytes())
    return buf.getvalue()


def code_sha256(zip_bytes: bytes) -> str:
    """Lambda's CodeSha256: base64 of the SHA-256 of the zip."""
    return base64.b64encode(hashlib.sha256(zip_bytes).digest()).decode()
