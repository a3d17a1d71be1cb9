"""The config's layout: sections, old flat keys moved, presets, the generated reference."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from orchestrator.aggregator import StalenessAggregator
from orchestrator.config import (
    MOVED,
    AggregationConfig,
    ConfigError,
    ExperimentalConfig,
    TrainConfig,
    load_config,
)
from orchestrator.config.doc import PAGE, render

ROOT = Path(__file__).resolve().parents[2]


def test_the_committed_reference_is_what_the_models_render() -> None:
    assert PAGE == ROOT / "docs" / "configuration.md"
    assert PAGE.read_text() == render(), "run: python -m orchestrator.config.doc"


def test_old_flat_keys_move_with_one_warning_each(capsys: pytest.CaptureFixture[str]) -> None:
    cfg = load_config(None, {"minutes": 1, "staleness_weights": False, "learner_compile": False,
                             "aggregate_timeout_s": 1.5, "keep_versions": 8})
    assert cfg.aggregation.staleness_weights is False and cfg.aggregation.timeout_s == 1.5
    assert cfg.experimental.learner_compile is False and cfg.experimental.keep_versions == 8
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 4 and all(ln.startswith("warning: ") for ln in lines)
    assert any("aggregate_timeout_s" in ln and "aggregation.timeout_s" in ln for ln in lines)
    assert any("experimental.keep_versions" in ln for ln in lines)
    # the new spelling warns about nothing
    load_config(None, {"minutes": 1, "aggregation": {"v0": 2}})
    assert capsys.readouterr().err == ""


def test_every_old_key_has_a_place() -> None:
    sections = {"aggregation": AggregationConfig, "experimental": ExperimentalConfig}
    for old, (section, field) in MOVED.items():
        assert field in sections[section].model_fields, old
        assert old not in TrainConfig.model_fields, old
    assert set(ExperimentalConfig.model_fields) == {f for s, f in MOVED.values()
                                                    if s == "experimental"}


def test_old_and_new_toml_resolve_alike(tmp_path: Path) -> None:
    old = tmp_path / "old.toml"
    old.write_text("minutes = 1\nlearners = 2\nv0 = 3\nbuffer_max = 4\n"
                   "gradients_per_message = 2\nfiller_envs = 0\n")
    new = tmp_path / "new.toml"
    new.write_text("minutes = 1\nlearners = 2\n[aggregation]\nv0 = 3\nbuffer_max = 4\n"
                   "[experimental]\ngradients_per_message = 2\nfiller_envs = 0\n")
    assert load_config(old) == load_config(new)
    assert load_config(new).h_max == 4 and load_config(new).grads_per_message == 2


def test_a_nested_key_in_a_higher_source_beats_a_flat_one_below(tmp_path: Path) -> None:
    flat = tmp_path / "flat.toml"
    flat.write_text("minutes = 1\nv0 = 3\n")
    assert load_config(flat, {"aggregation": {"v0": 5}}).aggregation.v0 == 5
    nested = tmp_path / "nested.toml"
    nested.write_text("minutes = 1\n[aggregation]\nv0 = 3\n")
    assert load_config(nested, {"v0": 6}).aggregation.v0 == 6


def test_one_setting_given_both_ways_is_an_error_unless_equal() -> None:
    with pytest.raises(ConfigError, match="aggregation.v0"):
        load_config(None, {"minutes": 1, "v0": 2, "aggregation": {"v0": 3}})
    assert load_config(None, {"minutes": 1, "v0": 2, "aggregation": {"v0": 2}}).aggregation.v0 == 2


def test_environment_old_and_new_names(monkeypatch: pytest.MonkeyPatch,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("STELLARIS_AGGREGATION__V0", "4")
    monkeypatch.setenv("STELLARIS_EXPERIMENTAL__LEARNER_COMPILE", "false")
    monkeypatch.setenv("STELLARIS_DECAY", "0.5")
    cfg = load_config(None, {"minutes": 1})
    assert (cfg.aggregation.v0, cfg.aggregation.decay) == (4, 0.5)
    assert cfg.experimental.learner_compile is False
    err = capsys.readouterr().err
    assert "STELLARIS_DECAY" in err and "STELLARIS_AGGREGATION__DECAY" in err
    monkeypatch.setenv("STELLARIS_V0", "5")
    with pytest.raises(ConfigError, match="STELLARIS_AGGREGATION__V0"):
        load_config(None, {"minutes": 1})


def test_renamed_field_names_its_new_place() -> None:
    with pytest.raises(ConfigError, match="aggregation.warmup_rounds"):
        load_config(None, {"minutes": 1, "warmup_aggregations": 2})


def test_paper_preset_needs_no_experimental_field() -> None:
    cfg = load_config(None, {"minutes": 1, "preset": "paper"})
    assert (cfg.actors, cfg.learners, cfg.n_envs, cfg.rollout_steps) == (16, 4, 1, 256)
    assert not cfg.publishing_learner and cfg.training_path == "aggregation (4 learners)"
    assert cfg.aggregation.staleness_weights and cfg.aggregation.bound_decay
    assert cfg.hyper.is_correction == "decoupled" and cfg.h_max == 4
    one = load_config(None, {"minutes": 1, "preset": "paper", "learners": 1})
    assert one.training_path == "aggregation (1 learner)"  # the preset's aggregation holds
    mine = load_config(None, {"minutes": 1, "preset": "paper", "aggregation": {"v0": 3}})
    assert mine.aggregation.v0 == 3 and mine.aggregation.staleness_weights


def test_an_envs_own_defaults_sit_under_every_choice_a_run_makes(tmp_path: Path) -> None:
    from functions.hyper import ENV_HYPER, PPOHyper, env_hyper

    env, (field, value) = next((e, next(iter(d.items()))) for e, d in ENV_HYPER.items() if d)
    assert value != PPOHyper.model_fields[field].default  # a default of its own, else no entry
    assert getattr(TrainConfig(env=env, minutes=1).hyper, field) == value
    assert getattr(load_config(None, {"env": env, "minutes": 1}).hyper, field) == value
    assert getattr(env_hyper(env), field) == value  # the baselines' "ours" settings
    assert getattr(TrainConfig(minutes=1).hyper, field) == PPOHyper.model_fields[field].default
    # the run's own choice wins, whichever way it is given ...
    mine = 0.123
    assert getattr(TrainConfig(env=env, minutes=1, hyper={field: mine}).hyper, field) == mine
    assert getattr(TrainConfig(env=env, minutes=1, hyper=PPOHyper(**{field: mine})).hyper,
                   field) == mine
    toml = tmp_path / "run.toml"
    toml.write_text(f'env = "{env}"\nminutes = 1\n[hyper]\n{field} = {mine}\n')
    assert getattr(load_config(toml).hyper, field) == mine
    assert getattr(env_hyper(env, **{field: mine}), field) == mine
    # ... and other fields given keep the env's default beside them
    cfg = TrainConfig(env=env, minutes=1, hyper=PPOHyper(gamma=0.99))
    assert cfg.hyper.gamma == 0.99 and getattr(cfg.hyper, field) == value
    # assignments (validate_assignment) keep a model and the choices made
    cfg.minutes = 2
    assert isinstance(cfg.hyper, PPOHyper) and getattr(cfg.hyper, field) == value
    cfg.hyper = PPOHyper(**{field: mine})
    cfg.minutes = 3
    assert getattr(cfg.hyper, field) == mine
    moved = TrainConfig(minutes=1)
    moved.env = env
    assert getattr(moved.hyper, field) == value
    with pytest.raises(ConfigError, match=r"hyper\.bogus"):  # errors name the field's place
        load_config(None, {"env": env, "minutes": 1, "hyper": {"bogus": 1}})


def test_resolved_values_follow_the_learners() -> None:
    one = load_config(None, {"minutes": 1})
    assert (one.publishing_learner, one.lookahead, one.grads_per_message, one.h_max) == (
        True, True, 32, 1)
    four = load_config(None, {"minutes": 1, "learners": 4})
    assert (four.publishing_learner, four.lookahead, four.grads_per_message, four.h_max) == (
        False, False, 1, 4)
    assert four.actors == four.actors_fed == 4  # no actor count given: as many as are fed
    with pytest.raises(ConfigError, match="experimental.learner_publishes needs learners = 1"):
        load_config(None, {"minutes": 1, "learners": 2,
                           "experimental": {"learner_publishes": True}})


def test_aggregated_learners_share_a_rounds_batch() -> None:
    paper = load_config(None, {"minutes": 1, "preset": "paper"})
    # a round is one wave of the 16 actors; each of the 4 learners takes a quarter of it, cut
    # into the round's 64 minibatches (16 samples: four aggregated make one of 64), and the
    # actors sample one round ahead
    assert (paper.learner_batch_steps, paper.learner_job_steps) == (4096, 1024)
    assert paper.hyper.num_minibatches == 64 and paper.h_max == 4
    assert paper.steps_ahead == 4096 and paper.actors_fed == paper.actors == 16
    whole = load_config(None, {"minutes": 1, "preset": "paper",
                               "aggregation": {"share_batch": False}})
    assert whole.learner_job_steps == 4096 and whole.steps_ahead == 4 * 4096
    # shares are whole rollouts: one of 2,048 steps cannot be split four ways
    coarse = load_config(None, {"minutes": 1, "learners": 4})
    assert coarse.learner_job_steps == coarse.rollout_env_steps == 2048
    odd = load_config(None, {"minutes": 1, "learners": 3, "n_envs": 1, "rollout_steps": 256})
    assert odd.learner_job_steps == 768  # 2,048 / 3, rounded up to whole rollouts
    assert load_config(None, {"minutes": 1}).learner_job_steps == 2048


def test_the_aggregator_reads_the_config_section() -> None:
    cfg = load_config(None, {"minutes": 1, "learners": 3, "aggregation": {"decay": 0.5}})
    agg = StalenessAggregator(cfg.aggregation, cfg.learners)
    assert agg.h_max == cfg.h_max == 3 and agg.rule.decay == 0.5
    sized = StalenessAggregator(cfg.aggregation.model_copy(update={"buffer_max": 7}), 3)
    assert sized.h_max == 7


def test_no_lab_notebook_citations_in_the_orchestrator() -> None:
    cited = re.compile(r"sessions? \d|RESULTS\.md|DESIGN\.md")
    hits = [f"{p.relative_to(ROOT)}:{n}" for p in (ROOT / "orchestrator").rglob("*.py")
            for n, line in enumerate(p.read_text().splitlines(), 1) if cited.search(line)]
    assert not hits


def test_every_cited_decision_exists() -> None:
    headings = set(re.findall(r"(?m)^#+ (\S+)$", (ROOT / "docs" / "decisions.md").read_text()))
    cited = set(re.findall(r"decisions\.md#([a-z0-9-]+)", render()))
    assert cited and cited <= headings, cited - headings
