"""``stellaris evaluate`` and ``stellaris plot`` of an ``s3://`` run folder, against moto's S3
served over real HTTP on loopback (tests/orchestrator/conftest.py): a run trained into S3 is
read back from S3 alone, with the same result as from its local copy, without uploading or
touching the training staging folder; a bad URL, a missing bucket or an empty folder is a
named error."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import boto3
import pytest

from orchestrator.cli import main as stellaris
from orchestrator.config import load_config
from orchestrator.run import train

RUN = {
    "env": "CartPole-v1", "backend": "inline", "mode": "sync", "actors": 2, "n_envs": 4,
    "rollout_steps": 64, "learner_batch_steps": 512, "total_steps": 1024, "eval_interval_s": 0,
    "progress": "none", "checkpoint_interval_s": 0.01, "keep_checkpoints": 2,
    "hyper": {"update_epochs": 1, "num_minibatches": 4},
}


def _objects(bucket: str) -> dict[str, str]:
    pages = boto3.client("s3").get_paginator("list_objects_v2").paginate(Bucket=bucket)
    return {o["Key"]: o["ETag"] for p in pages for o in p.get("Contents", [])}


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    rc = stellaris(argv)
    out = capsys.readouterr()
    return rc, out.out, out.err


@pytest.mark.timeout(240)
def test_evaluate_and_plot_read_a_run_from_s3(
        aws: dict[str, str], redis_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    boto3.client("s3").create_bucket(Bucket="stellaris-eval")
    url = "s3://stellaris-eval/team/cart-1"
    monkeypatch.chdir(tmp_path)
    train(load_config(None, {**RUN, "redis_url": redis_url, "run_dir": url}))
    capsys.readouterr()  # the run's own console lines are not evaluate's output
    staging = tmp_path / "runs/s3/stellaris-eval/team/cart-1"
    rc, out, err = _run(["evaluate", str(staging), "--episodes", "3"], capsys)
    assert rc == 0, err
    local = json.loads(out)

    # another machine: no staging folder, only the bucket
    shutil.rmtree(tmp_path / "runs")
    before = _objects("stellaris-eval")
    rc, out, err = _run(["evaluate", url, "--episodes", "3"], capsys)
    assert rc == 0, err
    remote = json.loads(out)
    assert remote["run"] == url
    assert {k: remote[k] for k in ("version", "returns", "lengths")} == {
        k: local[k] for k in ("version", "returns", "lengths")}

    rc, out, err = _run(["plot", url, "--out", str(tmp_path / "fig")], capsys)
    assert rc == 0, err
    figures = sorted(Path(line).name for line in out.split())
    assert figures == ["cost.png", "return_vs_cost.png", "return_vs_env.png", "return_vs_wall.png"]
    assert all((tmp_path / "fig" / f).stat().st_size > 0 for f in figures)
    # reading uploads nothing, and leaves no copy and no staging folder behind
    assert _objects("stellaris-eval") == before
    assert not (tmp_path / "runs").exists()


def test_bad_s3_runs_are_named(aws: dict[str, str], tmp_path: Path,
                               capsys: pytest.CaptureFixture[str]) -> None:
    s3 = boto3.client("s3")
    s3.create_bucket(Bucket="stellaris-bad")
    s3.put_object(Bucket="stellaris-bad", Key="nometrics/config.json", Body=b"{}")
    out = str(tmp_path / "fig")
    for argv, message in [
        (["evaluate", "s3://stellaris-nobucket/r"],
         "error: opening s3://stellaris-nobucket/r: bucket 'stellaris-nobucket' does not exist"),
        (["evaluate", "s3://stellaris-bad/none"],
         "error: run folder s3://stellaris-bad/none does not exist (no files under it)"),
        (["evaluate", "s3://stellaris-bad/nometrics"],
         "error: no checkpoint in s3://stellaris-bad/nometrics/checkpoints"),
        (["evaluate", "s3://stellaris-bad"], "give the folder inside the bucket"),
        (["plot", "s3://stellaris-bad/nometrics", "--out", out],
         "error: no metrics.csv in s3://stellaris-bad/nometrics"),
        (["plot", "s3://Bad_Bucket/r", "--out", out], "is not a valid S3 bucket name"),
    ]:
        rc, _, err = _run(argv, capsys)
        assert rc == 2 and err.startswith("error: ") and message in err, (argv, err)
    assert not (tmp_path / "fig").exists()
