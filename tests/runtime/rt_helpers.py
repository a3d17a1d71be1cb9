"""Helpers shared by the runtime tests (a module name no other test folder uses)."""

from __future__ import annotations

import contextlib
import io
import time
import uuid
import zipfile
from collections.abc import Callable, Iterator

import boto3
import psutil
from botocore.config import Config

ROLE = "arn:aws:iam::123456789012:role/lambda-role"
NO_RETRY = Config(retries={"max_attempts": 0, "mode": "standard"}, read_timeout=60,
                  connect_timeout=5, max_pool_connections=32)


def make_zip(files: dict[str, str | bytes]) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        for name, text in files.items():
            z.writestr(name, text)
    return buf.getvalue()


def lambda_client(endpoint: str, key: str = "test", secret: str = "test") -> object:
    return boto3.client("lambda", endpoint_url=endpoint, region_name="us-east-1",
                        aws_access_key_id=key, aws_secret_access_key=secret, config=NO_RETRY)


def deployer(client: object, prefix: str) -> Iterator[Callable[..., str]]:
    """The body of a ``deploy`` fixture: yields ``deploy(files, handler, **kw)``, which creates
    a function named ``<prefix>-<random>`` (or ``FunctionName``) from a dict of files or a
    ready zip and returns its name; every function it created is deleted afterwards."""
    created: list[str] = []

    def _deploy(files: dict[str, str | bytes] | bytes, handler: str = "app.handler",
                **kw: object) -> str:
        name = kw.pop("FunctionName", None) or f"{prefix}-{uuid.uuid4().hex[:10]}"
        code = files if isinstance(files, bytes) else make_zip(files)
        client.create_function(FunctionName=name, Runtime="python3.11", Role=ROLE,
                               Handler=handler, Code={"ZipFile": code}, **kw)
        created.append(name)
        return name

    yield _deploy
    for name in created:
        with contextlib.suppress(client.exceptions.ResourceNotFoundException):
            client.delete_function(FunctionName=name)


def process_gone(pid: int, timeout: float = 3.0) -> bool:
    """True once ``pid`` no longer runs (SIGKILL delivery is asynchronous)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:
            return True
        time.sleep(0.05)
    return False
