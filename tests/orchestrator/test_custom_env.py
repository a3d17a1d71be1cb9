"""Custom envs (``package.module:EnvId``): a package that lives outside the functions' code
(tests/envpkg, on the orchestrator's sys.path only) runs on the local runtime, whose workers
get it through their function's PYTHONPATH; a bad module or id is a named error before any
invocation. (Ray ships it as a py_module: tests/deploy/test_ray_backend.py.)"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from functions.envs import UnknownEnv, custom_env_source
from orchestrator.config import load_config
from orchestrator.run import PreflightError, train

ENVPKG = Path(__file__).resolve().parents[1] / "envpkg"
LINE = "stellaris_testenvs.line:StellarisLine-v0"
TINY = {
    "env": LINE, "mode": "sync", "actors": 2, "n_envs": 2, "rollout_steps": 64,
    "learner_batch_steps": 256, "total_steps": 768, "eval_interval_s": 0, "progress": "none",
    "hyper": {"update_epochs": 1, "num_minibatches": 2},
}


@pytest.fixture()
def envpkg(monkeypatch: pytest.MonkeyPatch) -> Path:
    """The package importable here the way a user's is (the folder they run from), and not
    through this process's PYTHONPATH, which the runtime's processes would inherit."""
    assert str(ENVPKG) not in os.environ.get("PYTHONPATH", "")
    monkeypatch.syspath_prepend(str(ENVPKG))
    return ENVPKG


def test_the_source_to_ship(envpkg: Path) -> None:
    assert custom_env_source(LINE) == str(envpkg / "stellaris_testenvs")
    assert custom_env_source("CartPole-v1") is None
    # an installed distribution is the image's to carry, like gymnasium itself
    assert custom_env_source("gymnasium.envs.classic_control.cartpole:CartPole-v1") is None
    with pytest.raises(UnknownEnv, match="cannot import module 'no_such_pkg.envs'"):
        custom_env_source("no_such_pkg.envs:Thing-v0")


@pytest.mark.parametrize("env, match", [
    ("no_such_pkg.envs:Thing-v0", "cannot import module 'no_such_pkg.envs'.*PYTHONPATH"),
    ("stellaris_testenvs.line:NoSuchEnv-v0", "unknown environment id"),
    ("stellaris_testenvs.line:", "malformed env id"),
])
def test_a_bad_module_or_id_stops_the_run_before_anything_is_spent(
        envpkg: Path, env: str, match: str, tmp_path: Path) -> None:
    cfg = load_config(None, {**TINY, "env": env, "backend": "local",
                             "run_dir": str(tmp_path / "run")})
    with pytest.raises(PreflightError, match=match):
        train(cfg)
    assert not (tmp_path / "run").exists()


@pytest.mark.timeout(180)
def test_the_local_runtime_runs_a_custom_env(envpkg: Path, redis_url: str,
                                             tmp_path: Path) -> None:
    cfg = load_config(None, {**TINY, "backend": "local", "redis_url": redis_url,
                             "run_dir": str(tmp_path / "run")})
    summary = train(cfg)
    assert summary["failures"] == {"actor": 0, "learner": 0, "evaluator": 0}, summary["last_errors"]
    assert summary["env_steps"] >= 768 and summary["version"] >= 3 and summary["episodes"] > 0
