"""CLI and config: precedence, one-line errors before anything is spent."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.cli import build_parser, main, train_overrides
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


def test_every_field_is_documented_in_one_line() -> None:
    from orchestrator.config import AggregationConfig, ExperimentalConfig, TrainConfig

    for model in (TrainConfig, AggregationConfig, ExperimentalConfig):
        for name, field in model.model_fields.items():
            text = field.description or ""
            assert text and "\n" not in text and len(text) <= 130, (model.__name__, name, text)


def test_every_train_flag_has_help() -> None:
    parser = build_parser()
    train = next(a for a in parser._subparsers._group_actions  # type: ignore[union-attr]
                 if a.dest == "command").choices["train"]
    silent = [a.option_strings for a in train._actions if not a.help]
    assert not silent


def test_flags_and_set_reach_the_sections(capsys: pytest.CaptureFixture[str]) -> None:
    args = build_parser().parse_args([
        "train", "--minutes", "1", "--learners", "4", "--learner-batch-steps", "1024",
        "--keep-checkpoints", "5", "--buffer-max", "3", "--no-bound-decay",
        "--is-correction", "truncate", "--set", "aggregation.v0=2",
        "--set", "experimental.learner_compile=false", "--set", "hyper.clip_coef=0.1"])
    cfg = load_config(None, train_overrides(args))
    assert (cfg.learners, cfg.learner_batch_steps, cfg.keep_checkpoints) == (4, 1024, 5)
    assert (cfg.aggregation.buffer_max, cfg.aggregation.v0, cfg.aggregation.bound_decay) == (
        3, 2, False)
    assert cfg.h_max == 3 and cfg.experimental.learner_compile is False
    assert (cfg.hyper.is_correction, cfg.hyper.clip_coef) == ("truncate", 0.1)
    assert "warning" not in capsys.readouterr().err


def test_old_set_keys_move_and_flags_still_win(capsys: pytest.CaptureFixture[str]) -> None:
    args = build_parser().parse_args([
        "train", "--minutes", "1", "--set", "learner_compile=false", "--set", "v0=3",
        "--set", "staleness_weights=true", "--no-staleness-weights"])
    cfg = load_config(None, train_overrides(args))
    assert cfg.experimental.learner_compile is False and cfg.aggregation.v0 == 3
    assert cfg.aggregation.staleness_weights is False  # the flag, over --set's old key
    err = capsys.readouterr().err
    assert "experimental.learner_compile" in err and "aggregation.v0" in err


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
