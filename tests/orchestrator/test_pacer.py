"""RolloutPacer: when the next rollout starts (eager vs just in time)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from orchestrator.async_loop import AsyncTrainer
from orchestrator.config import ConfigError, load_config
from orchestrator.counters import Counters
from orchestrator.pacer import (
    Rollout,
    RolloutPacer,
    best_filler,
    filler_cycle_s,
    next_rollout,
)
from orchestrator.run import train


def test_eager_never_holds() -> None:
    p = RolloutPacer(just_in_time=False)
    p.rollout_done(0.5)
    p.learner_started("l1", 0.0)
    p.learner_done("l1", 2.0)
    p.learner_started("l2", 10.0)
    assert p.hold_s(10.0) == 0.0


def test_just_in_time_starts_the_rollout_one_lead_before_the_learner_is_free() -> None:
    p = RolloutPacer(just_in_time=True, margin=0.25)
    assert p.hold_s(0.0) == 0.0  # nothing measured yet: start at once
    p.rollout_done(0.4)
    p.learner_started("l1", 0.0)
    assert p.hold_s(0.1) == 0.0  # learner time not measured yet
    p.learner_done("l1", 2.0)
    assert p.learn_s == 2.0 and p.lead_s() == pytest.approx(0.5)
    p.learner_started("l2", 10.0)
    # free at 12.0, the rollout needs 0.5 with the margin: start at 11.5
    assert p.hold_s(10.0) == pytest.approx(1.5)
    assert p.hold_s(11.5) == 0.0 and p.hold_s(11.9) == 0.0
    p.learner_done("l2", 12.0)
    assert p.hold_s(12.0) == 0.0  # no learner in flight: the next one needs data now


def test_just_in_time_is_eager_when_sampling_is_the_slower_side() -> None:
    p = RolloutPacer(just_in_time=True)
    p.rollout_done(3.0)
    p.learner_started("l1", 0.0)
    p.learner_done("l1", 1.0)
    p.learner_started("l2", 5.0)
    assert p.hold_s(5.0) == 0.0


def test_estimates_are_moving_averages_and_failed_learners_do_not_count() -> None:
    p = RolloutPacer(just_in_time=True, alpha=0.5)
    p.rollout_done(1.0)
    p.rollout_done(2.0)
    assert p.rollout_s == pytest.approx(1.5)
    p.learner_started("a", 0.0)
    p.learner_done("a", 4.0)
    p.learner_started("b", 4.0)
    p.learner_done("b", 4.1, ok=False)  # a crash says nothing about learning time
    assert p.learn_s == pytest.approx(4.0)
    p.learner_started("c", 5.0)
    p.learner_started("d", 6.0)
    # the earlier learner frees first
    assert p.hold_s(5.0) == pytest.approx(5.0 + 4.0 - 1.5 * 1.25 - 5.0)


def test_just_in_time_training_run(tmp_path: Path, redis_url: str) -> None:
    """A real (inline) async run with held rollouts trains and loses nothing."""
    cfg = load_config(None, {
        "env": "CartPole-v1", "actors": 1, "learners": 1, "n_envs": 4, "rollout_steps": 128,
        "learner_batch_steps": 512, "total_steps": 4096, "eval_interval_s": 0,
        "progress": "none", "hyper": {"update_epochs": 4, "num_minibatches": 8},
        "backend": "inline", "experimental": {"actor_start": "just_in_time"},
        "run_dir": str(tmp_path / "jit"),
        "redis_url": redis_url, "function_timeout_s": 120})
    summary = train(cfg)
    assert summary["env_steps"] >= 4096
    assert summary["failures"] == {"actor": 0, "learner": 0, "evaluator": 0}
    traj = {int(k): n for k, n in summary["staleness_hist"]["traj"].items()}
    # every batch but the one sampled as the budget ran out was learned
    assert sum(traj.values()) >= summary["env_steps"] // 512 - 1
    # one learner publishes each update of 4 epochs x 8 minibatches itself (the default)
    assert summary["version"] > 0 and summary["grads_applied"] == 32 * summary["version"]


def test_cold_starts_do_not_seed_the_estimates() -> None:
    # A cold learner (new environment + loss compilation) took 10 s; warm ones take 1 s. Counted,
    # it would hold every rollout for many batches (an EMA forgets it slowly).
    p = RolloutPacer(just_in_time=True, alpha=0.2)
    p.rollout_done(5.0, cold=True)
    assert p.rollout_s is None
    p.rollout_done(0.8)
    p.learner_started("cold", 0.0)
    p.learner_done("cold", 10.0, cold=True)
    assert p.learn_s is None
    p.learner_started("warm", 10.0)
    assert p.hold_s(10.0) == 0.0  # nothing warm measured yet: start at once
    p.learner_done("warm", 11.0)
    assert p.learn_s == pytest.approx(1.0)
    p.learner_started("next", 11.0)
    assert p.hold_s(11.0) == 0.0  # free at 12.0, the rollout needs 1.0 with the margin


# -- which rollout: a lead that samples all the time, a filler on the learner's free core -----

def _next(backlog: int, flying: list[Rollout], learner_busy: bool, filler_envs: int = 2
          ) -> Rollout | None:
    # Hopper's batch: 8 streams x 256 steps, a lead of 6 and a filler of 2
    return next_rollout(8, filler_envs, 256, 2048, backlog, flying, learner_busy)


def test_without_a_filler_one_rollout_of_every_stream_while_there_is_room() -> None:
    assert _next(0, [], True, filler_envs=0) == Rollout(8)
    assert _next(0, [Rollout(8)], False, filler_envs=0) is None
    assert _next(2048, [], False, filler_envs=0) is None


def test_the_lead_starts_beside_the_learner_and_the_filler_waits_for_its_core() -> None:
    lead, filler = Rollout(6), Rollout(2, filler=True)
    # the learner just took its batch: the lead starts at once, the filler does not
    assert _next(0, [], learner_busy=True) == lead
    assert _next(0, [lead], learner_busy=True) is None
    # the update is done: the filler takes the learner's core
    assert _next(0, [lead], learner_busy=False) == filler
    assert _next(0, [lead, filler], learner_busy=False) is None
    # the filler finished first: its steps wait for the lead's, nothing more starts
    assert _next(512, [lead], learner_busy=False) is None
    # the lead finished first: no second lead (it would not fit), the filler completes the batch
    assert _next(1536, [], learner_busy=True) is None
    assert _next(1536, [], learner_busy=False) == filler


def test_a_batch_that_is_no_multiple_of_the_rollouts_is_never_left_short() -> None:
    # 2,000-step batches of 8 x 256-step streams: the filler overshoots, as rollouts always did
    lead = Rollout(6)
    assert next_rollout(8, 2, 256, 2000, 0, [], learner_busy=True) == lead
    assert next_rollout(8, 2, 256, 2000, 1536, [], learner_busy=True) is None
    assert next_rollout(8, 2, 256, 2000, 1536, [], learner_busy=False) == Rollout(2, filler=True)
    assert next_rollout(8, 2, 256, 2000, 2000, [], learner_busy=False) is None


def test_the_best_filler_balances_the_lead_against_the_update_and_the_filler() -> None:
    # Hopper on two cores: 33 ms per env stream of a 256-step rollout, 118 ms an update
    env_s, learn_s = 0.0333, 0.118
    assert filler_cycle_s(8, 0, env_s, learn_s) == pytest.approx(0.2664)  # one 8-env actor
    assert filler_cycle_s(8, 2, env_s, learn_s) == pytest.approx(0.1998)  # lead 6 x 33 ms
    assert filler_cycle_s(8, 3, env_s, learn_s) == pytest.approx(0.2179)  # 118 + 3 x 33 ms
    assert best_filler(8, env_s, learn_s) == 2
    # an update as long as sampling everything: a filler would only wait
    assert best_filler(8, env_s, 8 * env_s) == 0
    # a fast (GPU) learner: the streams split about evenly
    assert best_filler(8, env_s, 0.005) == 4
    assert best_filler(1, env_s, learn_s) == 0


def test_auto_sizes_the_filler_once_on_the_one_actors_timings() -> None:
    """A smaller lead's seconds per stream rise (its vector env's per-step overhead is shared
    by fewer streams): re-sizing on them would grow the filler past its measured best."""
    pacer = RolloutPacer(just_in_time=False)
    loop = SimpleNamespace(pacer=pacer, cfg=SimpleNamespace(n_envs=8), filler_envs=0,
                           counters=Counters())
    pacer.rollout_done(8 * 0.0333, envs=8)  # Hopper, one 8-env actor: 33 ms a stream
    pacer.learner_started("l", 0.0)
    pacer.learner_done("l", 0.1182)
    AsyncTrainer._resize_filler(loop)
    assert (loop.filler_envs, loop.counters.filler_resizes) == (2, 1)
    for _ in range(20):  # the 6-env lead's streams cost more, the updates got quicker
        pacer.rollout_done(6 * 0.045, envs=6)
        pacer.learner_started("l", 0.0)
        pacer.learner_done("l", 0.09)
    assert best_filler(8, pacer.env_s, pacer.learn_s) == 3  # what re-sizing would pick
    AsyncTrainer._resize_filler(loop)
    assert (loop.filler_envs, loop.counters.filler_resizes) == (2, 1)


def test_auto_is_a_filler_only_where_one_can_work() -> None:
    auto = {"minutes": 1, "experimental": {"filler_envs": "auto"}}
    assert load_config(None, auto).filler_auto
    assert load_config(None, auto).actors_fed == 2
    assert load_config(None, {**auto, "experimental": {"filler_envs": "2"}}).experimental.fixed_filler_envs == 2
    assert load_config(None, {"minutes": 1}).filler_auto  # the default
    for other in ({"mode": "sync"}, {"actors": 1}, {"autoscale": True},
                  {"learners": 2, "experimental": {**auto["experimental"], "learner_publishes": False}},
                  {"learner_batch_steps": 4096},
                  {"n_envs": 1}):
        cfg = load_config(None, {**auto, **other})
        assert not cfg.filler_auto and cfg.experimental.fixed_filler_envs == 0, other


def test_a_filler_never_starts_while_the_learner_compiles_or_learns(tmp_path: Path,
                                                                     redis_url: str) -> None:
    """A real (inline) async run with a filler: both kinds of rollout sample, every batch is
    learned, and the batches keep n_envs streams."""
    cfg = load_config(None, {
        "env": "CartPole-v1", "actors": 2, "learners": 1, "n_envs": 4,
        "experimental": {"filler_envs": 1},
        "rollout_steps": 128, "learner_batch_steps": 512, "total_steps": 6144,
        "eval_interval_s": 0, "progress": "none",
        # no KL early stop: every update runs its 4 epochs, so the count below is exact
        "hyper": {"update_epochs": 4, "num_minibatches": 8, "target_kl": None},
        "backend": "inline", "run_dir": str(tmp_path / "filler"), "redis_url": redis_url,
        "function_timeout_s": 120})
    assert cfg.experimental.fixed_filler_envs == 1 and cfg.actors_fed == 2 and cfg.idle_actors_warning() is None
    summary = train(cfg)
    assert summary["env_steps"] >= 6144
    assert summary["failures"] == {"actor": 0, "learner": 0, "evaluator": 0}
    assert summary["filler_rollouts"] >= summary["version"] - 1 > 0
    # one update of 4 epochs x 8 minibatches of 64 per version: every batch 512 samples
    assert summary["grads_applied"] == 32 * summary["version"]


@pytest.mark.parametrize(("overrides", "message"), [
    ({"experimental": {"filler_envs": 8}}, "must be below n_envs"),
    ({"experimental": {"filler_envs": -1}}, "'auto'"),
    ({"experimental": {"filler_envs": "most"}}, "filler_envs"),
    ({"experimental": {"filler_envs": 2}, "mode": "sync"}, "needs mode async"),
    ({"experimental": {"filler_envs": 2}, "actors": 1}, "actors >= 2"),
    ({"experimental": {"filler_envs": 2, "learner_publishes": False}, "learners": 2},
     "one learner"),
])
def test_a_filler_that_cannot_work_is_a_one_line_error(overrides: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_config(None, {"minutes": 1, **overrides})


def test_an_auto_filler_run_trains_and_loses_nothing(tmp_path: Path, redis_url: str) -> None:
    """A real (inline) async run with ``filler_envs = "auto"``: whatever size it picks between
    batches, every batch is learned whole."""
    cfg = load_config(None, {
        "env": "CartPole-v1", "actors": 2, "learners": 1, "n_envs": 4,
        "experimental": {"filler_envs": "auto"},
        "rollout_steps": 128, "learner_batch_steps": 512, "total_steps": 8192,
        "eval_interval_s": 0, "progress": "none",
        "hyper": {"update_epochs": 4, "num_minibatches": 8}, "backend": "inline",
        "run_dir": str(tmp_path / "auto"), "redis_url": redis_url, "function_timeout_s": 120})
    summary = train(cfg)
    assert summary["env_steps"] >= 8192
    assert summary["failures"] == {"actor": 0, "learner": 0, "evaluator": 0}
    assert 0 <= summary["filler_envs"] < 4
    assert summary["filler_rollouts"] == 0 or summary["filler_resizes"] == 1
    assert summary["filler_resizes"] <= 1  # sized once
    traj = {int(k): n for k, n in summary["staleness_hist"]["traj"].items()}
    assert sum(traj.values()) >= summary["env_steps"] // 512 - 1
