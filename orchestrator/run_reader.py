"""A run folder to read (``stellaris evaluate``, ``stellaris plot``): a local path as it is,
an ``s3://bucket/prefix`` copied by the run folder's own mirror (orchestrator/run_folder.py)
into a temporary folder, deleted afterwards.

The copy is not the training staging folder (``runs/s3/...``): a run training into the same
S3 folder on this machine keeps its staging folder untouched, and a read never uploads.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from orchestrator.run_folder import S3RunFolder, open_folder


@contextmanager
def readable_run(run_dir: str | Path) -> Iterator[Path]:
    """The local folder holding ``run_dir``'s files while the context is open. A malformed
    ``s3://`` URL, a missing bucket or missing credentials is a
    :class:`~orchestrator.run_folder.RunDirError`; an S3 folder without files a
    :class:`FileNotFoundError`, as a missing local folder is to the readers."""
    folder = open_folder(run_dir)
    if not isinstance(folder, S3RunFolder):
        yield folder.path
        return
    loc = folder.location
    with tempfile.TemporaryDirectory(prefix="stellaris-run-") as tmp:
        # bucket/prefix inside it: the copy's folder name is the run's, as readers label it
        copy = S3RunFolder(loc, Path(tmp) / loc.bucket / loc.prefix)
        copy.mirror()
        if not any(p.is_file() for p in copy.path.rglob("*")):
            raise FileNotFoundError(f"run folder {loc.url} does not exist (no files under it)")
        yield copy.path
