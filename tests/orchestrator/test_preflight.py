"""The store preflight: the obvious case caught before anything is invoked, and one real actor
invocation through the local Lambda runtime (real HTTP, real worker processes) that fails fast
against an unreachable Redis and passes against a real one."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from orchestrator.cli import main
from orchestrator.config import load_config
from orchestrator.preflight import StoreUnreachableFromFunctions, check_functions, check_static
from orchestrator.run import PreflightError, build_invoker, train
from store import EmbeddedRedis, free_port

TINY = {"env": "CartPole-v1", "actors": 1, "learners": 1, "n_envs": 2, "rollout_steps": 16,
        "learner_batch_steps": 32, "total_steps": 64, "eval_interval_s": 0, "progress": "none",
        "function_timeout_s": 60}


def cfg_of(**over: object):  # noqa: ANN201 - a TrainConfig
    return load_config(None, {**TINY, **over})


def test_a_loopback_store_for_functions_elsewhere_fails_before_anything_is_invoked() -> None:
    lam = cfg_of(backend="lambda", region="eu-west-1")
    for url in ("redis://127.0.0.1:6379/0", "redis://localhost:6379/0", "unix:///tmp/r.sock"):
        with pytest.raises(StoreUnreachableFromFunctions) as info:
            check_static(lam, url)
        text = str(info.value)
        assert "AWS Lambda (eu-west-1)" in text and "loopback" in text
        assert "--redis-url rediss://<elasticache endpoint>" in text and "\n" not in text
    with pytest.raises(StoreUnreachableFromFunctions, match="Lambda endpoint http://10.0.0.5"):
        check_static(cfg_of(backend="lambda", endpoint_url="http://10.0.0.5:9000"),
                     "redis://127.0.0.1:6379/0")
    with pytest.raises(StoreUnreachableFromFunctions, match="Ray cluster at ray://head:10001"):
        check_static(cfg_of(backend="ray", ray_address="ray://head:10001"),
                     "redis://[::1]:6379/0")
    with pytest.raises(StoreUnreachableFromFunctions, match="unsupported Redis URL scheme"):
        check_static(lam, "http://cache.example.com:6379")
    # fine: a store the functions can reach by name, or functions on this machine
    check_static(lam, "rediss+cluster://clustercfg.x.use1.cache.amazonaws.com:6379/0")
    check_static(cfg_of(backend="lambda", endpoint_url="http://127.0.0.1:9000"),
                 "redis://127.0.0.1:6379/0")
    check_static(cfg_of(backend="local"), "redis://127.0.0.1:6379/0")
    check_static(cfg_of(backend="lambda", preflight=False), "redis://127.0.0.1:6379/0")


def test_train_on_lambda_with_the_embedded_store_is_a_one_line_error(
        capsys: pytest.CaptureFixture[str], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The issue's case: no --redis-url, --backend lambda. Nothing reaches AWS (no
    credentials here: an attempt would fail differently)."""
    monkeypatch.delenv("REDIS_URL", raising=False)
    t0 = time.monotonic()
    code = main(["train", "--env", "CartPole-v1", "--backend", "lambda", "--total-steps", "64",
                 "--run-dir", str(tmp_path / "r"), "--progress", "none"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and time.monotonic() - t0 < 30
    assert err.startswith("error: store redis://127.0.0.1:") and "\n" not in err
    assert "unreachable from AWS Lambda (us-east-1)" in err
    assert "--no-preflight" in err


@pytest.fixture(scope="module")
def local_invoker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    """The local backend's invoker: the Lambda-API runtime on 127.0.0.1, functions deployed
    to it with boto3, the real actor handler in its worker processes."""
    run_dir = tmp_path_factory.mktemp("preflight")
    invoker = build_invoker(cfg_of(backend="local"), "redis://127.0.0.1:1/0", run_dir)
    invoker.start()
    yield invoker
    invoker.close()


def test_the_preflight_passes_against_a_real_redis(local_invoker, redis_url: str) -> None:  # noqa: ANN001
    report = check_functions(cfg_of(backend="local"), local_invoker, "pf-ok", redis_url)
    assert report is not None and report["ok"], report
    assert report["where"] == "function stellaris-actor (us-east-1)"
    assert report["server"]["redis_version"] and report["server"]["cluster"] is False


def test_the_preflight_fails_fast_against_an_unreachable_redis(
        local_invoker, redis_server: EmbeddedRedis) -> None:  # noqa: ANN001
    cfg = cfg_of(backend="local")
    check_functions(cfg, local_invoker, "pf-warm", redis_server.url)  # a warm actor, as a run
    dead = f"redis://127.0.0.1:{free_port()}/0"
    t0 = time.monotonic()
    with pytest.raises(StoreUnreachableFromFunctions) as info:
        check_functions(cfg, local_invoker, "pf-refused", dead)
    assert time.monotonic() - t0 < 5.0
    err = info.value
    assert (err.url, err.kind, err.where) == (dead, "refused", "function stellaris-actor (us-east-1)")
    assert str(err).startswith(f"store {dead} unreachable from function stellaris-actor")
    # a port that accepts but never answers: the function's own timeout, not Lambda's
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(0)
    try:
        t0 = time.monotonic()
        with pytest.raises(StoreUnreachableFromFunctions, match=r"\(timeout: connect"):
            check_functions(cfg, local_invoker, "pf-timeout",
                            f"redis://127.0.0.1:{silent.getsockname()[1]}/0")
        assert time.monotonic() - t0 < 8.0
    finally:
        silent.close()


def test_a_run_stops_at_the_preflight(tmp_path: Path, redis_url: str) -> None:
    """The hook: a run whose functions get an unreachable store ends before its first
    rollout, with the named error."""
    cfg = cfg_of(backend="local", redis_url=redis_url, run_dir=str(tmp_path / "run"),
                 function_redis_url=f"redis://127.0.0.1:{free_port()}/0")
    with pytest.raises(StoreUnreachableFromFunctions, match="refused"):
        train(cfg)
    assert isinstance(StoreUnreachableFromFunctions("u", "w", "dns", "d"), PreflightError)
    assert not (tmp_path / "run" / "metrics.csv").exists()


def test_a_crashed_preflight_invocation_is_resubmitted_as_the_runs_would_be(
        tmp_path: Path, redis_url: str) -> None:
    """A dead sandbox says nothing about the deployment: the preflight resubmits a crashed
    invocation up to max_retries, and names the attempts when every one died."""
    always = cfg_of(backend="local", max_retries=1, experimental={"fault_kill_prob": 1.0})
    invoker = build_invoker(always, redis_url, tmp_path)
    invoker.start()
    try:
        with pytest.raises(PreflightError, match=r"failed 2 time\(s\) \(Runtime\.ExitError"):
            check_functions(always, invoker, "pf-dead", redis_url)
    finally:
        invoker.close()
    often = cfg_of(backend="local", max_retries=20, experimental={"fault_kill_prob": 0.5})
    invoker = build_invoker(often, redis_url, tmp_path)
    invoker.start()
    try:
        attempts: list = []
        report = check_functions(often, invoker, "pf-flaky", redis_url, attempts)
        assert report is not None and report["ok"], report
        # every attempt handed back for the run to book: as many failed as the runtime saw
        assert attempts[-1].ok and not any(a.ok for a in attempts[:-1])
        assert invoker.billing()["functions"]["stellaris-actor"]["errors"] == len(attempts) - 1
    finally:
        invoker.close()
