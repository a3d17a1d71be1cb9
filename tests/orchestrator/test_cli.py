"""CLI and config: precedence, one-line errors before anything is spent."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.cli import main
from orchestrator.config import ConfigError, load_config


def test_config_precedence(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    toml = tmp_path / "run.toml"
    toml.write_text('env = "CartPole-v1"\nactors = 3\nminutes = 1.0\n[hyper]\nlearning_rate = 0.001\n')
    monkeypatch.setenv("STELLARIS_ACTORS", "5")
    cfg = load_config(toml, {"learners": 2})
    assert (cfg.env, cfg.actors, cfg.learners, cfg.minutes) == ("CartPole-v1", 5, 2, 1.0)
    assert cfg.hyper.learning_rate == 0.001 and cfg.hyper.gamma == 0.995
    cfg2 = load_config(toml, {"actors": 7, "hyper": {"clip_coef": 0.1}})
    assert cfg2.actors == 7 and cfg2.hyper.clip_coef == 0.1 and cfg2.hyper.learning_rate == 0.001


def test_config_errors_are_one_line(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="actors"):
        load_config(None, {"actors": 0, "minutes": 1})
    with pytest.raises(ConfigError, match="budget"):
        load_config(None, {})
    with pytest.raises(ConfigError, match="not found"):
        load_config(tmp_path / "missing.toml")
    bad = tmp_path / "bad.toml"
    bad.write_text("env = [")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_config(bad)
    with pytest.raises(ConfigError, match="unknown_field|Extra inputs"):
        load_config(None, {"unknown_field": 1, "minutes": 1})


def test_every_field_is_documented() -> None:
    from orchestrator.config import TrainConfig

    undocumented = [n for n, f in TrainConfig.model_fields.items() if not f.description]
    assert not undocumented


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "orchestrator.cli", *args], capture_output=True,
                          text=True, timeout=120)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--env", "NoSuchEnv-v0"], "NoSuchEnv-v0"),
        (["--actors", "-1"], "actors"),
        (["--redis-url", "redis://127.0.0.1:1/0"], "unavailable"),
        (["--backend", "lambda", "--endpoint-url", "http://127.0.0.1:1"], "lambda backend unusable"),
        (["--set", "hyper.clip_coef=-1"], "clip_coef"),
        (["--init-from", "/no/such/ckpt.safetensors"], "init_from"),
    ],
)
def test_cli_errors_exit_nonzero_with_one_line(args: list[str], message: str, tmp_path: Path,
                                               redis_url: str) -> None:
    base = ["train", "--env", "CartPole-v1", "--total-steps", "1000", "--run-dir", str(tmp_path / "r")]
    if "--redis-url" not in args:
        base += ["--redis-url", redis_url]
    out = _run(*base, *args)
    assert out.returncode == 2, out.stdout + out.stderr
    lines = [ln for ln in out.stderr.strip().splitlines() if ln.startswith("error:")]
    assert len(lines) == 1 and message in lines[0], out.stderr
    # Nothing was spent: no checkpoint, no metrics.
    assert not (tmp_path / "r" / "checkpoints").exists()


def test_argparse_rejects_bad_flag_types() -> None:
    with pytest.raises(SystemExit) as exc:
        main(["train", "--actors", "many"])
    assert exc.value.code == 2
