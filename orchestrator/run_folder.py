"""Run folders: a local folder, or an S3 prefix (``s3://bucket/prefix``) staged locally.

Everything in a run writes plain files (config, metrics, checkpoints, summary): an S3 run
folder keeps that, with a local *staging* copy under ``runs/s3/<bucket>/<prefix>`` that is
mirrored from S3 when the run opens (so a run started on one machine resumes on another from
its latest checkpoint) and uploaded after every checkpoint and at the end. Checkpoints stay
safetensors + JSON: nothing downloaded is ever unpickled.

The S3 endpoint and credentials are boto3's own: ``AWS_PROFILE`` / ``AWS_ACCESS_KEY_ID``, an
instance or pod role, ``AWS_ENDPOINT_URL_S3`` for an S3-compatible store (MinIO, moto).
"""

from __future__ import annotations

import hashlib
import re
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

S3_SCHEME = "s3://"
# Bucket naming rules (docs.aws.amazon.com/AmazonS3/latest/userguide/bucketnamingrules.html)
_BUCKET = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")
# The checkpoint pointer names the file it points at: uploaded last, so a reader on another
# machine never sees a pointer to a checkpoint that is not there yet.
_POINTER = "checkpoints/metadata.json"
# Files the trainer deletes itself (pruned checkpoints): their S3 copies go too.
_PRUNED = re.compile(r"^checkpoints/ckpt-\d+\.(safetensors|json)$")


class RunDirError(ValueError):
    """A run folder that cannot be used: a malformed ``s3://`` URL, a missing bucket, no
    credentials or no access, an object name that would land outside the folder."""


def is_s3(run_dir: str | Path | None) -> bool:
    return isinstance(run_dir, str) and run_dir.startswith(S3_SCHEME)


@dataclass(frozen=True)
class S3Location:
    bucket: str
    prefix: str  # without leading or trailing slash, never empty

    @classmethod
    def parse(cls, url: str) -> S3Location:
        if not url.startswith(S3_SCHEME):
            raise RunDirError(f"run folder {url!r} is not an s3:// URL")
        bucket, _, prefix = url[len(S3_SCHEME):].partition("/")
        prefix = prefix.strip("/")
        if not _BUCKET.match(bucket) or ".." in bucket:
            raise RunDirError(f"run folder {url!r}: {bucket!r} is not a valid S3 bucket name "
                              "(3-63 characters: lowercase letters, digits, dots, hyphens)")
        parts = prefix.split("/") if prefix else []
        if not parts or any(p in ("", ".", "..") for p in parts):
            raise RunDirError(f"run folder {url!r}: give the folder inside the bucket, e.g. "
                              f"s3://{bucket}/runs/my-run (no empty, '.' or '..' parts)")
        return cls(bucket, prefix)

    @property
    def url(self) -> str:
        return f"{S3_SCHEME}{self.bucket}/{self.prefix}"

    @property
    def name(self) -> str:
        return self.prefix.rsplit("/", 1)[-1]

    def key(self, rel: str) -> str:
        return f"{self.prefix}/{rel}"


def _md5(path: Path) -> str:
    h = hashlib.md5(usedforsecurity=False)
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _same(obj: dict[str, Any], path: Path) -> bool:
    """Does the listed object hold this file's bytes? (A multipart upload's ETag is not an
    MD5: its size has to do.)"""
    if not path.is_file() or obj["Size"] != path.stat().st_size:
        return False
    etag = str(obj.get("ETag", "")).strip('"')
    return "-" in etag or etag == _md5(path)


def _stamp(path: Path) -> tuple[int, int]:
    st = path.stat()
    return st.st_size, st.st_mtime_ns


class LocalRunFolder:
    """A run folder on this machine's disk."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.url = str(self.path)

    def open(self) -> None:
        self.path.mkdir(parents=True, exist_ok=True)

    def push(self) -> None:
        """Nothing to upload."""

    def close(self) -> None:
        """Nothing to upload."""


class S3RunFolder:
    """A run folder on S3, staged in a local folder (see the module docstring)."""

    def __init__(self, location: S3Location, staging: Path, client: Any = None) -> None:
        self.location = location
        self.path = Path(staging)
        self.url = location.url
        self._client = client
        self._remote: dict[str, int] = {}  # key (relative) -> size, as last listed or uploaded
        self._sent: dict[str, tuple[int, int]] = {}  # rel -> (size, mtime_ns) when uploaded
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._lock = threading.Lock()  # one sync at a time (uploader thread, close())
        self._thread: threading.Thread | None = None
        self.last_error: str | None = None

    # -- S3 calls, with errors a user can act on ------------------------------------------
    @property
    def client(self) -> Any:
        if self._client is None:
            import boto3

            # A session of its own: boto3's default one caches the credentials it found first.
            self._client = boto3.session.Session().client("s3")
        return self._client

    def _explain(self, exc: Exception, doing: str) -> RunDirError:
        from botocore.exceptions import (
            ClientError,
            EndpointConnectionError,
            NoCredentialsError,
            PartialCredentialsError,
        )

        where = self.location.url
        if isinstance(exc, NoCredentialsError | PartialCredentialsError):
            return RunDirError(
                f"{doing} {where}: no AWS credentials (set AWS_PROFILE, or AWS_ACCESS_KEY_ID and "
                "AWS_SECRET_ACCESS_KEY, or run with an instance/pod role)")
        if isinstance(exc, EndpointConnectionError):
            return RunDirError(f"{doing} {where}: cannot reach S3: {exc}")
        if isinstance(exc, ClientError):
            code = str(exc.response.get("Error", {}).get("Code", ""))
            if code in ("404", "NoSuchBucket"):
                return RunDirError(f"{doing} {where}: bucket {self.location.bucket!r} does not "
                                   f"exist (create it: aws s3 mb s3://{self.location.bucket})")
            if code in ("403", "AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch"):
                return RunDirError(f"{doing} {where}: access denied ({code}): the credentials "
                                   "need s3:ListBucket, s3:GetObject, s3:PutObject, "
                                   "s3:DeleteObject on the bucket")
            return RunDirError(f"{doing} {where}: {code}: {exc}")
        return RunDirError(f"{doing} {where}: {type(exc).__name__}: {exc}")

    def _call(self, doing: str, fn: Any, **kwargs: Any) -> Any:
        from boto3.exceptions import S3TransferFailedError, S3UploadFailedError
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            return fn(**kwargs)
        except (BotoCoreError, ClientError) as exc:
            raise self._explain(exc, doing) from exc
        except (S3UploadFailedError, S3TransferFailedError) as exc:
            # the transfer manager wraps the S3 error it met: explain that one
            cause = exc.__cause__ or exc.__context__
            raise self._explain(cause if isinstance(cause, ClientError | BotoCoreError) else exc,
                                doing) from exc

    def _list(self) -> dict[str, dict[str, Any]]:
        """The folder's objects: path relative to the prefix -> listing entry."""
        from botocore.exceptions import BotoCoreError, ClientError

        out: dict[str, dict[str, Any]] = {}
        pages = self.client.get_paginator("list_objects_v2").paginate(
            Bucket=self.location.bucket, Prefix=self.location.prefix + "/")
        try:
            for page in pages:
                for obj in page.get("Contents", []):
                    if obj["Key"].endswith("/"):  # a console's "folder" marker: no file
                        continue
                    rel = obj["Key"][len(self.location.prefix) + 1:]
                    out[self._safe_rel(rel, obj["Key"])] = obj
        except (BotoCoreError, ClientError) as exc:
            raise self._explain(exc, "listing") from exc
        return out

    def _safe_rel(self, rel: str, key: str) -> str:
        parts = PurePosixPath(rel).parts
        if not rel or rel.startswith("/") or any(p in (".", "..") for p in parts):
            raise RunDirError(f"object s3://{self.location.bucket}/{key} would land outside the "
                              "run folder: refusing to download it (remove or rename it)")
        return rel

    # -- open: mirror S3 into the staging folder --------------------------------------------
    def open(self) -> None:
        """Check the bucket, then make the staging folder a copy of the S3 folder (a resumed
        run finds its checkpoint), and start the uploader."""
        self.mirror()
        self._thread = threading.Thread(target=self._uploader, name="run-folder-s3", daemon=True)
        self._thread.start()

    def mirror(self) -> None:
        """Check the bucket and make the staging folder a copy of the S3 folder; uploads
        nothing (``stellaris evaluate`` and ``plot`` read a run this way)."""
        self._call("opening", self.client.head_bucket, Bucket=self.location.bucket)
        listing = self._list()
        self._set_aside_unsynced(listing)
        self.path.mkdir(parents=True, exist_ok=True)
        for rel, obj in sorted(listing.items()):
            dest = self.path / rel
            if _same(obj, dest):
                self._sent[rel] = _stamp(dest)
                continue
            dest.parent.mkdir(parents=True, exist_ok=True)
            tmp = dest.with_name(f".{dest.name}.download")
            self._call("downloading from", self.client.download_file,
                       Bucket=self.location.bucket, Key=obj["Key"], Filename=str(tmp))
            tmp.replace(dest)
            self._sent[rel] = _stamp(dest)
        self._remote = {rel: obj["Size"] for rel, obj in listing.items()}

    def _set_aside_unsynced(self, listing: dict[str, dict[str, Any]]) -> None:
        """A staging folder holding files S3 lacks (a final upload that failed, another run)
        is moved aside, never overwritten: the mirror starts clean and nothing is lost."""
        if not self.path.is_dir():
            return
        for f in self.path.rglob("*"):
            if not f.is_file() or f.name.startswith("."):  # temp files of an interrupted write
                continue
            obj = listing.get(f.relative_to(self.path).as_posix())
            if obj is None or not _same(obj, f):
                aside = self.path.with_name(f"{self.path.name}.unsynced-{time.strftime('%Y%m%d-%H%M%S')}")
                self.path.rename(aside)
                print(f"warning: the staging folder of {self.url} held files that are not on S3 "
                      f"({f.relative_to(self.path)} ...): moved to {aside}", file=sys.stderr)
                return

    # -- upload -------------------------------------------------------------------------------
    def push(self) -> None:
        """Upload soon, on the uploader thread (a checkpoint must not stall training)."""
        self._wake.set()

    def _uploader(self) -> None:
        while not self._stop.is_set():
            self._wake.wait()
            self._wake.clear()
            if self._stop.is_set():
                return
            try:
                self.sync()
                self.last_error = None
            except Exception as exc:  # noqa: BLE001 - never stops training; retried later
                if str(exc) != self.last_error:
                    print(f"warning: run folder upload failed (retried later): {exc}",
                          file=sys.stderr)
                self.last_error = str(exc)

    def sync(self) -> int:
        """Upload what changed since the last upload, the checkpoint pointer last, then delete
        the pruned checkpoints' copies. Returns the number of files uploaded."""
        with self._lock:
            files = sorted(f.relative_to(self.path).as_posix() for f in self.path.rglob("*")
                           if f.is_file() and not f.name.startswith("."))
            files.sort(key=lambda rel: rel == _POINTER)  # stable: the pointer goes last
            sent = 0
            for rel in files:
                stamp = _stamp(self.path / rel)
                if self._sent.get(rel) == stamp:
                    continue
                self._call("uploading to", self.client.upload_file, Filename=str(self.path / rel),
                           Bucket=self.location.bucket, Key=self.location.key(rel))
                self._sent[rel], self._remote[rel] = stamp, stamp[0]
                sent += 1
            local = set(files)
            for rel in [r for r in self._remote if r not in local and _PRUNED.match(r)]:
                self._call("deleting from", self.client.delete_object,
                           Bucket=self.location.bucket, Key=self.location.key(rel))
                self._remote.pop(rel, None)
                self._sent.pop(rel, None)
            return sent

    def close(self) -> None:
        """Stop the uploader and upload everything now; a failure is an error (the staging
        folder keeps the files: its path is in the message)."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=60)
            self._thread = None
        try:
            self.sync()
        except RunDirError as exc:
            raise RunDirError(f"{exc}; the run's files are in {self.path} (upload them with: "
                              f"aws s3 sync {self.path} {self.url})") from exc


RunFolder = LocalRunFolder | S3RunFolder


def staging_dir(location: S3Location, root: Path = Path("runs")) -> Path:
    return root / "s3" / location.bucket / location.prefix


def open_folder(run_dir: str | Path, client: Any = None) -> RunFolder:
    """The run folder of ``run_dir`` (a path, or ``s3://bucket/prefix``), not yet opened."""
    if is_s3(str(run_dir)):
        loc = S3Location.parse(str(run_dir))
        return S3RunFolder(loc, staging_dir(loc), client)
    if str(run_dir).lower().startswith(("s3:", "s3a:", "s3n:", "gs:", "gcs:", "http:", "https:")):
        raise RunDirError(f"run folder {run_dir!r}: use a local path or s3://bucket/prefix")
    return LocalRunFolder(Path(run_dir))

