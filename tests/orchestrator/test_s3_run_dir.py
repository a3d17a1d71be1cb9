"""Run folders on S3 (``--run-dir s3://bucket/prefix``) against moto's S3 served over real HTTP
on loopback: a run's files reach the bucket, a fresh process in an empty folder resumes from
them, and a bad URL, a missing bucket or missing credentials is a named error up front."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import boto3
import numpy as np
import pytest

from orchestrator.checkpoint import Checkpointer
from orchestrator.config import load_config
from orchestrator.run import PreflightError, train
from orchestrator.run_folder import RunDirError, S3Location, S3RunFolder, open_folder

REPO = Path(__file__).resolve().parents[2]
TINY = {
    "env": "CartPole-v1", "backend": "inline", "mode": "sync", "actors": 2, "n_envs": 4,
    "rollout_steps": 64, "learner_batch_steps": 512, "total_steps": 1536, "eval_interval_s": 0,
    "progress": "none", "checkpoint_interval_s": 0.01, "keep_checkpoints": 2,
    "hyper": {"update_epochs": 2, "num_minibatches": 4},
}


def _bucket(name: str) -> str:
    boto3.client("s3").create_bucket(Bucket=name)
    return name


def _keys(bucket: str, prefix: str) -> list[str]:
    pages = boto3.client("s3").get_paginator("list_objects_v2").paginate(Bucket=bucket,
                                                                         Prefix=prefix + "/")
    return sorted(o["Key"][len(prefix) + 1:] for p in pages for o in p.get("Contents", []))


@pytest.mark.parametrize("url, match", [
    ("s3://", "not a valid S3 bucket name"),
    ("s3://Bad_Bucket/run", "not a valid S3 bucket name"),
    ("s3://bucket", "give the folder inside the bucket"),
    ("s3://bucket/runs/../escape", "no empty, '.' or '..' parts"),
    ("s3:/bucket/run", "use a local path or s3://bucket/prefix"),
])
def test_malformed_urls_are_named(url: str, match: str) -> None:
    with pytest.raises(RunDirError, match=match):
        open_folder(url)


def test_missing_bucket_and_missing_credentials_stop_the_run_before_it_starts(
        aws: dict[str, str], redis_url: str, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    cfg = load_config(None, {**TINY, "redis_url": redis_url, "run_dir": "s3://no-such-bucket/r1"})
    with pytest.raises(PreflightError, match="bucket 'no-such-bucket' does not exist"):
        train(cfg)
    assert not (tmp_path / "runs").exists()  # nothing staged, nothing spent
    for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.delenv(k)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    with pytest.raises(PreflightError, match="no AWS credentials"):
        train(cfg)


def test_a_staging_folder_with_files_s3_lacks_is_set_aside(aws: dict[str, str],
                                                           tmp_path: Path) -> None:
    bucket = _bucket("stellaris-aside")
    boto3.client("s3").put_object(Bucket=bucket, Key="r/config.json", Body=b"{}")
    staging = tmp_path / "staging"
    (staging / "checkpoints").mkdir(parents=True)
    (staging / "checkpoints" / "metadata.json").write_text('{"unsynced": true}')
    folder = S3RunFolder(S3Location.parse(f"s3://{bucket}/r"), staging)
    folder.open()
    folder.close()
    assert sorted(p.name for p in staging.rglob("*") if p.is_file()) == ["config.json"]
    aside = [p for p in tmp_path.iterdir() if p.name.startswith("staging.unsynced-")]
    assert len(aside) == 1 and (aside[0] / "checkpoints" / "metadata.json").exists()
    # a console's folder marker is no file; a name that climbs out is refused, not written
    s3 = boto3.client("s3")
    s3.put_object(Bucket=bucket, Key="r/tb/", Body=b"")
    s3.put_object(Bucket=bucket, Key="r/x/../../outside.txt", Body=b"x")
    folder = S3RunFolder(S3Location.parse(f"s3://{bucket}/r"), tmp_path / "staging2")
    with pytest.raises(RunDirError, match="would land outside the run folder"):
        folder.open()
    assert not (tmp_path / "outside.txt").exists()
    s3.delete_object(Bucket=bucket, Key="r/x/../../outside.txt")
    folder.open()
    folder.close()
    assert sorted(p.name for p in folder.path.rglob("*")) == ["config.json"]


def test_a_failed_upload_is_retried_and_a_failed_last_one_names_the_staging_folder(
        aws: dict[str, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    s3 = boto3.client("s3")
    bucket = _bucket("stellaris-flaky")
    folder = S3RunFolder(S3Location.parse(f"s3://{bucket}/r"), tmp_path / "staging")
    folder.open()
    (folder.path / "metrics.csv").write_text("wall_s,env_steps\n")
    s3.delete_bucket(Bucket=bucket)  # S3 goes away mid-run: the upload fails, training goes on

    def eventually(cond: Any) -> None:
        deadline = time.monotonic() + 20
        while not cond():
            assert time.monotonic() < deadline, "the uploader did not get there"
            time.sleep(0.05)

    folder.push()
    eventually(lambda: folder.last_error is not None)
    assert "does not exist" in str(folder.last_error)
    s3.create_bucket(Bucket=bucket)  # back: the next checkpoint's push uploads what waited
    folder.push()
    eventually(lambda: _keys(bucket, "r") == ["metrics.csv"] and folder.last_error is None)
    assert "run folder upload failed (retried later)" in capsys.readouterr().err
    s3.delete_object(Bucket=bucket, Key="r/metrics.csv")
    s3.delete_bucket(Bucket=bucket)
    (folder.path / "summary.json").write_text("{}")
    with pytest.raises(RunDirError, match=f"files are in {folder.path} .*aws s3 sync"):
        folder.close()


@pytest.mark.timeout(240)
def test_a_run_resumes_from_s3_in_a_fresh_process_and_folder(
        aws: dict[str, str], redis_url: str, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    bucket = _bucket("stellaris-runs")
    url = f"s3://{bucket}/team/cartpole-1"
    # machine A: a short run, staged in its working folder, uploaded as it goes and at the end
    (tmp_path / "a").mkdir()
    monkeypatch.chdir(tmp_path / "a")
    first = train(load_config(None, {**TINY, "redis_url": redis_url, "run_dir": url}))
    assert first["run_id"] == "cartpole-1" and first["version"] > 0
    keys = _keys(bucket, "team/cartpole-1")
    for name in ("config.json", "summary.json", "metrics.csv", "checkpoints/metadata.json"):
        assert name in keys, keys
    local_a = Path("runs/s3") / bucket / "team/cartpole-1"
    assert sorted(k for k in keys if k.startswith("checkpoints/ckpt-")) == sorted(
        f"checkpoints/{p.name}" for p in (local_a / "checkpoints").glob("ckpt-*"))  # pruned too
    assert len([k for k in keys if k.endswith(".safetensors") and "ckpt-" in k]) == 2
    ckpt_a, meta_a = Checkpointer(local_a).latest()  # type: ignore[misc]

    # a third folder sees the same checkpoint, bytes for bytes (safetensors + JSON)
    look = S3RunFolder(S3Location.parse(url), tmp_path / "look")
    look.open()
    look.close()
    ckpt, meta = Checkpointer(look.path).latest()  # type: ignore[misc]
    assert meta["version"] == meta_a["version"] and meta["env_steps"] == meta_a["env_steps"]
    for name, value in ckpt_a.items():
        np.testing.assert_array_equal(ckpt[name], value, err_msg=name)

    # machine B: another process, an empty working folder, its own Redis (no --redis-url)
    (tmp_path / "b").mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("STELLARIS_", "REDIS_URL"))}
    env.update(aws, PYTHONPATH=str(REPO), OMP_NUM_THREADS="1")
    more = meta_a["env_steps"] + 512
    proc = subprocess.run(
        [sys.executable, "-m", "orchestrator.cli", "train", "--env", "CartPole-v1", "--mode",
         "sync", "--backend", "inline", "--actors", "2", "--n-envs", "4", "--rollout-steps", "64",
         "--learner-batch-steps", "512", "--total-steps", str(more), "--eval-interval-s", "0",
         "--progress", "none", "--keep-checkpoints", "2", "--set", "hyper.update_epochs=2",
         "--set", "hyper.num_minibatches=4", "--run-dir", url],
        cwd=tmp_path / "b", env=env, capture_output=True, text=True, timeout=200)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    local_b = tmp_path / "b" / "runs/s3" / bucket / "team/cartpole-1"
    summary = json.loads((local_b / "summary.json").read_text())
    # it went on from A's checkpoint: versions, steps and the Adam moments continue ...
    assert summary["version"] > meta_a["version"] and summary["env_steps"] >= more
    end, end_meta = Checkpointer(local_b).latest()  # type: ignore[misc]
    assert end_meta["version"] == summary["version"]
    step = "optim.step.actor.0.weight"
    assert end[step][0] > ckpt_a[step][0]
    # ... and the metric rows of B's session begin where A's ended (none from zero again)
    with open(local_b / "metrics.csv") as fh:
        steps = [int(float(r["env_steps"])) for r in csv.DictReader(fh)]
    a_rows = sum(1 for s in steps if s <= meta_a["env_steps"])
    assert a_rows >= 1 and all(s > meta_a["env_steps"] for s in steps[a_rows:])
    assert steps == sorted(steps)
    # and B's files are on S3 for the next machine
    remote = json.loads(boto3.client("s3").get_object(
        Bucket=bucket, Key="team/cartpole-1/summary.json")["Body"].read())
    assert remote["version"] == summary["version"]
