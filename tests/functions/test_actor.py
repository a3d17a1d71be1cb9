"""The actor handler against a real Redis: its warm policy cache, the trajectory it writes
(truncation, normalisers, reward scaling), refreshes and previews mid-rollout, its worker
process, bad events and store errors."""

from __future__ import annotations

import concurrent.futures as cf
import multiprocessing as mp
import os

import numpy as np
import pytest
import torch
from fn_helpers import ev, perturbed, publish_init

from functions import actor, learner
from functions.envs import UnknownEnv
from functions.events import InvalidEvent
from functions.normalizer import RunningMeanStd
from functions.policy import build_policy, load_policy_tensors, policy_meta
from functions.policy import policy_tensors as to_tensors
from functions.warm import PolicyCache
from functions.wire import Trajectory
from store.errors import VersionNotFound


class CountingLoads:
    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.n = 0
        orig = PolicyCache._load

        def load(this, *a, **k):
            self.n += 1
            return orig(this, *a, **k)

        monkeypatch.setattr(PolicyCache, "_load", load)


def test_actor_warm_cache_refetches_only_when_version_moves(run_store, redis_url, monkeypatch):
    publish_init(run_store, "CartPole-v1")
    loads = CountingLoads(monkeypatch)
    e = ev(run_store, redis_url, env_id="CartPole-v1", n_envs=2, steps=16)
    first = actor.handler(e)
    second = actor.handler(e)
    assert (first["cached"], second["cached"], loads.n) == (False, True, 1)
    assert second["behaviour_version"] == 0
    perturbed(run_store, 1)
    third = actor.handler(e)
    assert (third["cached"], third["behaviour_version"], loads.n) == (False, 1, 2)
    # an explicit older version is fetched once, then served warm
    old = actor.handler({**e, "policy_version": 0})
    again = actor.handler({**e, "policy_version": 0})
    assert (old["behaviour_version"], old["cached"], again["cached"], loads.n) == (0, False,
                                                                                   True, 3)
    for key in ("fetch_s", "sample_s", "write_s", "total_s"):
        assert second["timings"][key] >= 0
    assert second["steps"] == 32 and len(second["episode_returns"]) == second["episodes"]


def test_trajectory_round_trip_with_truncation_and_normalisers(run_store, redis_url):
    obs_rms = RunningMeanStd((3,))
    obs_rms.merge(1000, [0.5, -0.2, 0.1], [0.3, 0.4, 4.0])
    ret_rms = RunningMeanStd(())
    ret_rms.merge(1000, 0.0, 16.0)
    model = publish_init(run_store, "Pendulum-v1", obs_rms=obs_rms, ret_rms=ret_rms)
    out = actor.handler(ev(run_store, redis_url, env_id="Pendulum-v1", n_envs=2, steps=210,
                           seed=5, invocation_id="act-1", gamma=0.9))
    (entry,) = run_store.traj.get([out["trajectory_id"]])
    assert entry is not None and entry.meta["behaviour_version"] == 0
    assert entry.meta["invocation_id"] == "act-1" and entry.meta["n_envs"] == 2
    tr = Trajectory.from_blob(entry.blob)
    assert tr.obs.shape == (210, 2, 3) and tr.actions.shape == (210, 2, 1)
    # Pendulum only truncates (200 steps): both envs at t=199, with their final observations
    assert not tr.terminated.any() and tr.truncated.sum() == 2 and tr.truncated[199].all()
    assert tr.final_index.tolist() == [199 * 2, 199 * 2 + 1]
    assert out["episode_lengths"] == [200, 200] and all(r < 0 for r in out["episode_returns"])
    with torch.no_grad():
        obs = torch.from_numpy(tr.obs)
        logp, _ = model.log_prob_entropy(obs, torch.from_numpy(tr.actions))
        values = model.get_value(obs)
        final_v = model.get_value(torch.from_numpy(tr.final_obs))
        last_v = model.get_value(torch.from_numpy(tr.next_obs))
    np.testing.assert_allclose(tr.logprobs, logp.numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(tr.values, values.numpy(), rtol=1e-5, atol=1e-5)
    # next_values: the next row inside episodes, V(final obs) at truncation, V(next_obs) last
    np.testing.assert_allclose(tr.next_values[:198], tr.values[1:199], atol=1e-6)
    np.testing.assert_allclose(tr.next_values[199], final_v.numpy(), atol=1e-5)
    np.testing.assert_allclose(tr.next_values[-1], last_v.numpy(), atol=1e-5)
    assert not np.allclose(tr.next_values[199], tr.values[200])  # not the reset obs
    # observations as the policy saw them: normalised with the version's statistics
    assert np.abs(tr.obs).max() <= 10.0
    assert abs(tr.obs[..., 2].std() - np.sqrt(np.array(out["obs_stats"]["var"][2]) / 4.0)) < 0.2
    # rewards scaled by the version's return std (4), clipped at 10
    assert tr.rewards.max() <= 0.0 and tr.rewards.min() >= -16.3 / 4 - 1e-4
    assert out["obs_stats"]["count"] == 420 and out["ret_stats"]["count"] == 420
    assert out["ret_stats"]["mean"] < 0  # discounted returns of negative rewards


def test_actor_refresh_picks_up_a_newer_version_mid_rollout(run_store, redis_url):
    """Pinned to version 0 with version 1 published: with refresh_steps=8 the first 8 steps
    are sampled by version 0 and the rest by version 1, each tagged, and the log-probs are
    those of the version that took the step (checked against each version's own forward)."""
    publish_init(run_store, "Pendulum-v1")
    perturbed(run_store, 1, scale=0.5)
    e = ev(run_store, redis_url, env_id="Pendulum-v1", n_envs=2, steps=24, policy_version=0,
           refresh_steps=8, invocation_id="a-refresh")
    out = actor.handler(e)
    assert (out["behaviour_version"], out["behaviour_version_last"]) == (0, 1)
    (entry,) = run_store.traj.get([out["trajectory_id"]])
    tr = Trajectory.from_blob(entry.blob)
    assert tr.step_versions is not None
    assert tr.step_versions.tolist() == [0] * 8 + [1] * 16 and tr.behaviour_version == 0
    for version, rows in ((0, slice(0, 8)), (1, slice(8, 24))):
        snap = run_store.params.get(version)
        model = build_policy(snap.meta)
        load_policy_tensors(model, snap.tensors)
        with torch.no_grad():
            logp, _ = model.log_prob_entropy(torch.from_numpy(tr.obs[rows]),
                                             torch.from_numpy(tr.actions[rows]))
        np.testing.assert_allclose(logp.numpy(), tr.logprobs[rows], atol=1e-5)
    # the learner sees per-step versions: both show up as behaviour versions
    learned = learner.handler(ev(run_store, redis_url, trajectory_ids=[out["trajectory_id"]],
                                 hyper={"update_epochs": 1, "num_minibatches": 2}))
    assert learned["behaviour_versions"] == [0, 1]
    # without refresh (a sync round) one version samples the whole rollout
    fixed = actor.handler({**e, "refresh_steps": 0, "invocation_id": "a-fixed"})
    (entry,) = run_store.traj.get([fixed["trajectory_id"]])
    assert Trajectory.from_blob(entry.blob).step_versions is None
    assert fixed["behaviour_version"] == fixed["behaviour_version_last"] == 0


def test_actor_samples_with_a_publishing_learners_preview(run_store, redis_url):
    """A preview of version 1 (weights after 4 of 10 epochs) is what a refreshing actor
    samples with once it finds it: tagged version 0 with 0.4 of progress, the log-probs
    those of the preview's weights; an actor asked for version 0 itself gets version 0."""
    publish_init(run_store, "Pendulum-v1")
    v0 = run_store.params.get(0)
    model = build_policy(v0.meta)
    obs_rms, ret_rms = load_policy_tensors(model, v0.tensors)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.4)
    assert run_store.params.publish_preview(0, 4, 10, "u-x", to_tensors(model, obs_rms, ret_rms),
                                            policy_meta(model))
    e = ev(run_store, redis_url, env_id="Pendulum-v1", n_envs=2, steps=24, policy_version=0,
           refresh_steps=8, invocation_id="a-preview")
    out = actor.handler(e)
    (entry,) = run_store.traj.get([out["trajectory_id"]])
    tr = Trajectory.from_blob(entry.blob)
    assert tr.step_versions is None and tr.behaviour_version == 0  # all steps tagged 0
    assert (tr.preview_steps, out["preview_steps"]) == (16, 32)
    assert tr.preview_progress == pytest.approx(16 / 24 * 0.4)
    assert out["behaviour_version_mean"] == pytest.approx(tr.version_mean)
    with torch.no_grad():
        logp, _ = model.log_prob_entropy(torch.from_numpy(tr.obs[8:]),
                                         torch.from_numpy(tr.actions[8:]))
    np.testing.assert_allclose(logp.numpy(), tr.logprobs[8:], atol=1e-5)
    # a warm actor holding the preview, asked for version 0 (a sync round): version 0
    pinned = actor.handler({**e, "refresh_steps": 0, "invocation_id": "a-pinned"})
    (entry,) = run_store.traj.get([pinned["trajectory_id"]])
    assert Trajectory.from_blob(entry.blob).preview_steps == 0 and not pinned["cached"]
    # asked for the latest with refresh on: the preview from the first step
    fresh = actor.handler({**e, "policy_version": "latest", "invocation_id": "a-fresh"})
    assert fresh["preview_steps"] == 48 and fresh["behaviour_version_mean"] == pytest.approx(0.4)


def test_actor_episodes_continue_across_warm_invocations(run_store, redis_url):
    publish_init(run_store, "Pendulum-v1")
    e = ev(run_store, redis_url, env_id="Pendulum-v1", n_envs=1, steps=150)
    assert actor.handler(e)["episodes"] == 0
    out = actor.handler(e)  # the episode started in the first call ends at its step 200
    assert out["episode_lengths"] == [200]


def test_actor_in_a_separate_worker_process(run_store, redis_url):
    publish_init(run_store, "CartPole-v1")
    e = ev(run_store, redis_url, env_id="CartPole-v1", n_envs=2, steps=8)
    with cf.ProcessPoolExecutor(1, mp_context=mp.get_context("spawn")) as pool:
        a = pool.submit(actor.handler, e).result(timeout=120)
        b = pool.submit(actor.handler, e).result(timeout=120)
    assert (a["cached"], b["cached"]) == (False, True)
    assert run_store.traj.get([a["trajectory_id"], b["trajectory_id"]])[1] is not None


def test_an_actor_lowers_its_workers_cpu_priority_and_never_raises_it_back(run_store, redis_url):
    publish_init(run_store, "CartPole-v1")
    e = ev(run_store, redis_url, env_id="CartPole-v1", n_envs=2, steps=8)
    with cf.ProcessPoolExecutor(1, mp_context=mp.get_context("spawn")) as pool:
        assert pool.submit(os.nice, 0).result(timeout=120) == os.nice(0)
        pool.submit(actor.handler, {**e, "nice": 5}).result(timeout=120)
        after_first = pool.submit(os.nice, 0).result(timeout=120)
        pool.submit(actor.handler, {**e, "nice": 2}).result(timeout=120)  # asks for less
        after_second = pool.submit(os.nice, 0).result(timeout=120)
    assert after_first == after_second == max(5, os.nice(0))


@pytest.mark.parametrize("nice", [-1, 20])
def test_an_actor_refuses_a_niceness_out_of_range(run_store, redis_url, nice):
    with pytest.raises(InvalidEvent, match="nice"):
        actor.handler(ev(run_store, redis_url, env_id="CartPole-v1", nice=nice))


def test_reward_scaling_follows_cleanrl_normalize_reward(run_store, redis_url):
    ret_rms = RunningMeanStd(())
    ret_rms.merge(500, 3.0, 9.0)
    publish_init(run_store, "CartPole-v1", ret_rms=ret_rms)
    out = actor.handler(ev(run_store, redis_url, env_id="CartPole-v1", n_envs=3, steps=100,
                           gamma=0.9))
    tr = Trajectory.from_blob(run_store.traj.get([out["trajectory_id"]])[0].blob)
    np.testing.assert_allclose(tr.rewards, 1.0 / np.sqrt(9.0 + 1e-8), rtol=1e-6)  # CartPole: r=1
    # the discounted return per env (reset after each episode) is what the stats describe
    done = tr.terminated | tr.truncated
    g = np.zeros(3)
    seen = []
    for t_ in range(100):
        g = g * 0.9 + 1.0
        seen.append(g.copy())
        g[done[t_]] = 0.0
    seen = np.concatenate(seen)
    assert out["ret_stats"]["count"] == 300
    assert out["ret_stats"]["mean"] == pytest.approx(seen.mean())
    assert out["ret_stats"]["var"] == pytest.approx(seen.var())


def test_actor_store_errors_are_clear(run_store, redis_url):
    with pytest.raises(VersionNotFound, match="no policy published"):
        actor.handler(ev(run_store, redis_url, env_id="CartPole-v1"))
    publish_init(run_store, "CartPole-v1")
    with pytest.raises(VersionNotFound, match="never published"):
        actor.handler(ev(run_store, redis_url, env_id="CartPole-v1", policy_version=7))
    with pytest.raises(UnknownEnv, match="Nope-v9"):
        actor.handler(ev(run_store, redis_url, env_id="Nope-v9"))
    with pytest.raises(actor.PolicyEnvMismatch, match="Pendulum-v1"):
        actor.handler(ev(run_store, redis_url, env_id="Pendulum-v1"))
