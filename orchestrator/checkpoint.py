"""Checkpoints: atomic (temp file + rename), safetensors + metadata.json, last k + best."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from store import decode, encode


def _atomic_write(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    with open(tmp, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)  # atomic on POSIX: readers see the old or the new file, never half


class Checkpointer:
    def __init__(self, run_dir: Path, keep: int = 3) -> None:
        self.dir = Path(run_dir) / "checkpoints"
        self.dir.mkdir(parents=True, exist_ok=True)
        self.keep = keep
        # Called after every save (an S3 run folder uploads then: orchestrator/run_folder.py).
        self.on_save: Callable[[], None] | None = None
        self.best_score: float | None = None
        best_meta = self.dir / "best.json"
        if best_meta.exists():
            self.best_score = json.loads(best_meta.read_text()).get("score")

    def save(self, version: int, tensors: dict[str, np.ndarray], metadata: dict[str, Any],
             score: float | None = None) -> Path:
        name = f"ckpt-{version:08d}"
        meta = {**metadata, "version": int(version), "score": score}
        path = self.dir / f"{name}.safetensors"
        _atomic_write(path, encode(tensors, meta))
        _atomic_write(self.dir / f"{name}.json", json.dumps(meta, indent=2).encode())
        # The pointer goes last: a crash between the writes leaves the previous pointer valid.
        _atomic_write(self.dir / "metadata.json", json.dumps({**meta, "file": path.name}, indent=2).encode())
        if score is not None and (self.best_score is None or score > self.best_score):
            self.best_score = score
            tmp = self.dir / ".best.safetensors.tmp"
            shutil.copyfile(path, tmp)
            os.replace(tmp, self.dir / "best.safetensors")
            _atomic_write(self.dir / "best.json", json.dumps(meta, indent=2).encode())
        self._prune()
        if self.on_save is not None:
            self.on_save()
        return path

    def _prune(self) -> None:
        ckpts = sorted(self.dir.glob("ckpt-*.safetensors"))
        for old in ckpts[: max(0, len(ckpts) - self.keep)]:
            old.unlink(missing_ok=True)
            old.with_suffix(".json").unlink(missing_ok=True)

    def latest(self) -> tuple[dict[str, np.ndarray], dict[str, Any]] | None:
        pointer = self.dir / "metadata.json"
        if not pointer.exists():
            return None
        meta = json.loads(pointer.read_text())
        path = self.dir / meta["file"]
        if not path.exists():
            return None
        tensors, blob_meta = decode(path.read_bytes())
        return {k: np.array(v) for k, v in tensors.items()}, blob_meta

    def load(self, path: Path) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        tensors, meta = decode(Path(path).read_bytes())
        return {k: np.array(v) for k, v in tensors.items()}, meta
