"""The handlers against a real Redis: warm cache, round trips, dedupe, refresh, bad events."""

from __future__ import annotations

import concurrent.futures as cf
import multiprocessing as mp
import os

import numpy as np
import pytest
import torch

from functions import actor, evaluator, learner, ppo
from functions.envs import UnknownEnv
from functions.messages import Gradient, InvalidEvent, PolicySpec, PPOHyper, Trajectory
from functions.normalizer import RunningMeanStd
from functions.policy import build_policy, init_policy, load_policy_tensors, policy_meta
from functions.policy import policy_tensors as to_tensors
from functions.warm import PolicyCache
from store import RunStore, encode
from store.errors import CorruptBlob, VersionNotFound

SMALL = PolicySpec(hidden_sizes=[16, 16])


def publish_init(rs: RunStore, env_id: str, spec: PolicySpec = SMALL, seed: int = 0,
                 version: int = 0, obs_rms=None, ret_rms=None):
    model, tensors = init_policy(env_id, spec, seed)
    if obs_rms is not None or ret_rms is not None:
        tensors = to_tensors(model, obs_rms, ret_rms)
    rs.params.publish(version, tensors, policy_meta(model))
    return model


def perturbed(rs: RunStore, version: int, scale: float = 0.3, seed: int = 1) -> None:
    """Publish ``version``: the latest weights plus noise (a 'newer' policy)."""
    snap = rs.params.latest()
    model = build_policy(snap.meta)
    obs_rms, ret_rms = load_policy_tensors(model, snap.tensors)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=g) * scale)
    rs.params.publish(version, to_tensors(model, obs_rms, ret_rms), snap.meta)


def ev(rs: RunStore, redis_url: str, **kw):
    return {"run_id": rs.run_id, "redis_url": redis_url, **kw}


class CountingLoads:
    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.n = 0
        orig = PolicyCache._load

        def load(this, *a, **k):
            self.n += 1
            return orig(this, *a, **k)

        monkeypatch.setattr(PolicyCache, "_load", load)


# -- actor -----------------------------------------------------------------------------------
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


# -- learner ---------------------------------------------------------------------------------
def sample(rs, redis_url, env_id="CartPole-v1", n=1, **kw):
    return [actor.handler(ev(rs, redis_url, env_id=env_id, n_envs=4, steps=32, seed=i,
                             invocation_id=f"a-{rs.run_id}-{i}", **kw))["trajectory_id"]
            for i in range(n)]


def test_gradient_round_trip_equals_a_local_ppo_gradient(run_store, redis_url):
    publish_init(run_store, "Pendulum-v1")
    ids = sample(run_store, redis_url, "Pendulum-v1", n=2)
    hyper = {"update_epochs": 1, "num_minibatches": 1, "is_correction": "truncate"}
    out = learner.handler(ev(run_store, redis_url, trajectory_ids=ids, hyper=hyper,
                             invocation_id="L1"))
    assert out["gradients"] == 1 and out["versions_used"] == [0]
    assert out["n_samples"] == 256 and out["behaviour_versions"] == [0]
    assert {"losses/policy_loss", "losses/value_loss", "losses/entropy", "losses/approx_kl",
            "losses/old_approx_kl", "losses/clipfrac", "losses/explained_variance",
            "losses/is_truncated_frac"} <= set(out)
    (entry,) = run_store.grads.get([run_store.grads.read("g", "c", count=10)[0].id]) \
        if run_store.grads.ensure_group("g") is None else []
    g = Gradient.from_blob(entry.blob)
    assert entry.meta["invocation_id"] == "L1" and entry.meta["version_used"] == 0
    assert (g.epoch, g.minibatch, g.n_samples, g.behaviour_versions) == (0, 0, 256, [0])

    # the same gradient, computed here from the trajectories with the pure maths
    snap = run_store.params.latest()
    model = build_policy(snap.meta)
    load_policy_tensors(model, snap.tensors)
    trajs = [Trajectory.from_blob(e.blob) for e in run_store.traj.get(ids)]
    cat = {k: torch.from_numpy(np.concatenate([getattr(t, k) for t in trajs], axis=1))
           for k in ("obs", "actions", "logprobs", "values", "next_values", "rewards",
                     "terminated", "truncated")}
    defaults = PPOHyper()  # what the learner runs with beyond the event's overrides
    adv, ret = ppo.compute_gae(cat["rewards"], cat["values"], cat["next_values"],
                               cat["terminated"], cat["truncated"], defaults.gamma,
                               defaults.gae_lambda)
    obs, act = cat["obs"].reshape(-1, 3), cat["actions"].reshape(-1, 1)
    newlogp, ent = model.log_prob_entropy(obs, act)
    loss, _ = ppo.ppo_loss(newlogp, ent, model.get_value(obs), cat["logprobs"].reshape(-1),
                           adv.reshape(-1), ret.reshape(-1), cat["values"].reshape(-1),
                           ent_coef=defaults.ent_coef)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)
    assert set(g.grads) == {n for n, _ in model.named_parameters()}
    for n, p in model.named_parameters():
        np.testing.assert_allclose(g.grads[n], p.grad.numpy(), rtol=1e-4, atol=1e-6, err_msg=n)


def test_retried_learner_is_deduplicated(run_store, redis_url):
    publish_init(run_store, "CartPole-v1")
    ids = sample(run_store, redis_url)
    e = ev(run_store, redis_url, trajectory_ids=ids, invocation_id="retry-me",
           hyper={"update_epochs": 2, "num_minibatches": 4})
    first = learner.handler(e)
    second = learner.handler(e)
    assert (first["gradients"], first["duplicates"]) == (8, 0)
    assert (second["gradients"], second["duplicates"]) == (0, 8)
    stats = run_store.grads.stats()
    assert (stats.length, stats.duplicates) == (8, 8)
    entries = run_store.grads.read("g", "c", count=100, block_ms=None) \
        if run_store.grads.ensure_group("g") is None else []
    keys = sorted((e.meta["epoch"], e.meta["minibatch"]) for e in entries)
    assert keys == [(ep, mb) for ep in range(2) for mb in range(4)]


def test_learner_packs_consecutive_gradients_and_a_retry_is_deduplicated(run_store, redis_url):
    publish_init(run_store, "CartPole-v1")
    ids = sample(run_store, redis_url)
    e = ev(run_store, redis_url, trajectory_ids=ids, invocation_id="packed",
           hyper={"update_epochs": 2, "num_minibatches": 4}, gradients_per_message=3)
    first = learner.handler(e)
    second = learner.handler(e)
    assert (first["gradients"], first["duplicates"]) == (8, 0)
    assert (second["gradients"], second["duplicates"]) == (0, 8)
    stats = run_store.grads.stats()
    assert (stats.length, stats.duplicates) == (3, 3)  # messages of 3, 3 and 2 gradients
    run_store.grads.ensure_group("g")
    entries = run_store.grads.read("g", "c", count=100, block_ms=None)
    grads = [g for entry in entries for g in Gradient.unpack(entry.blob)]
    assert [(g.epoch, g.minibatch) for g in grads] == [(ep, mb) for ep in range(2) for mb in range(4)]
    assert [e.meta["count"] for e in entries[:2]] == [3, 3]


def test_learner_refreshes_weights_when_the_version_moves(run_store, redis_url, monkeypatch):
    publish_init(run_store, "CartPole-v1")
    ids = sample(run_store, redis_url)
    calls = {"n": 0}

    class LossThenPublish(learner.MinibatchLoss):
        def __call__(self, *a, **k):
            out = super().__call__(*a, **k)
            calls["n"] += 1
            if calls["n"] == 2:  # the orchestrator publishes while the learner works
                perturbed(run_store, 1)
            return out

    monkeypatch.setattr(learner, "MinibatchLoss", LossThenPublish)
    out = learner.handler(ev(run_store, redis_url, trajectory_ids=ids, invocation_id="R",
                             hyper={"update_epochs": 1, "num_minibatches": 16}))
    assert out["versions_used"] == [0, 1]
    run_store.grads.ensure_group("g")
    used = [e.meta["version_used"]
            for e in sorted(run_store.grads.read("g", "c", count=20, block_ms=None),
                            key=lambda e: e.meta["minibatch"])]
    # The writer thread watches for new versions after each write: the compute loop picks
    # the new weights up within the writer's bounded queue (8), never goes back.
    assert used[:2] == [0, 0] and used[-1] == 1 and used == sorted(used)
    assert used.index(1) <= 2 + learner._GradientWriter.MAX_PENDING


def test_versions_in_flight_truncate_and_missing_versions_are_reported(run_store, redis_url):
    publish_init(run_store, "Pendulum-v1")
    ids = sample(run_store, redis_url, "Pendulum-v1")
    perturbed(run_store, 1, scale=0.5)
    out = learner.handler(ev(run_store, redis_url, trajectory_ids=ids, versions_in_flight=[0, 1,
                             99], hyper={"update_epochs": 1, "num_minibatches": 2}))
    assert out["versions_used"] == [1]
    assert out["is_versions"] == [0] and out["is_versions_missing"] == [99]
    assert 0.0 < out["losses/is_truncated_frac"] < 1.0
    none = learner.handler(ev(run_store, redis_url, trajectory_ids=ids, versions_in_flight=[0],
                              hyper={"update_epochs": 1, "num_minibatches": 2,
                                     "is_correction": "none"}))
    assert none["losses/is_truncated_frac"] == 0.0


def test_vtrace_learner_runs(run_store, redis_url):
    publish_init(run_store, "Pendulum-v1")
    ids = sample(run_store, redis_url, "Pendulum-v1")
    out = learner.handler(ev(run_store, redis_url, trajectory_ids=ids, hyper={
        "update_epochs": 2, "num_minibatches": 2, "is_correction": "vtrace"}))
    assert out["gradients"] == 4 and np.isfinite(out["losses/value_loss"])


def test_decoupled_learner_clips_around_its_own_starting_policy(run_store, redis_url):
    """Trajectories sampled by version 0, learned by version 1: ``truncate`` measures the clip
    against the stale behaviour policy, ``decoupled`` against the learner's start (version 1),
    so on the first minibatch nothing is clipped and only the IS weight carries staleness."""
    publish_init(run_store, "Pendulum-v1")
    ids = sample(run_store, redis_url, "Pendulum-v1")
    perturbed(run_store, 1, scale=0.5)
    hyper = {"update_epochs": 1, "num_minibatches": 1, "learning_rate": 1e-9}
    trunc = learner.handler(ev(run_store, redis_url, trajectory_ids=ids,
                               hyper={**hyper, "is_correction": "truncate"}))
    dec = learner.handler(ev(run_store, redis_url, trajectory_ids=ids,
                             hyper={**hyper, "is_correction": "decoupled"}))
    assert trunc["versions_used"] == dec["versions_used"] == [1]
    assert trunc["losses/clipfrac"] > 0.05 and dec["losses/clipfrac"] == 0.0
    assert dec["losses/approx_kl"] == pytest.approx(0.0, abs=1e-6)
    assert 0.0 < dec["losses/is_weight_mean"] < 1.0 and dec["gradients"] == 1


def test_update_mode_publishes_and_keeps_adam_state(run_store, redis_url):
    publish_init(run_store, "CartPole-v1")
    ids = sample(run_store, redis_url, n=2)
    stats = RunningMeanStd((4,))
    stats.merge(100, [1.0, 2.0, 3.0, 4.0], [1.0, 1.0, 1.0, 1.0])
    hyper = {"update_epochs": 2, "num_minibatches": 4}
    out = learner.handler(ev(run_store, redis_url, mode="update", trajectory_ids=ids,
                             target_version=1, hyper=hyper, obs_stats=stats.to_dict()))
    assert out["published_version"] == 1 and out["optimizer_steps"] == 8
    assert out["versions_used"] == [0]
    snap = run_store.params.latest()
    assert snap.version == 1 and snap.meta["env_id"] == "CartPole-v1"
    np.testing.assert_allclose(snap.tensors["obs_rms.mean"], stats.mean)
    before = run_store.params.get(0).tensors
    assert not np.array_equal(before["actor.0.weight"], snap.tensors["actor.0.weight"])
    arrays, meta = run_store.get_state("optimizer")
    assert meta["version"] == 1 and arrays["step.actor.0.weight"][0] == 8
    # the next round continues from the stored Adam state (and a warm cached module)
    out2 = learner.handler(ev(run_store, redis_url, mode="update", trajectory_ids=ids,
                              target_version=2, hyper=hyper))
    assert out2["versions_used"] == [1]
    arrays, _ = run_store.get_state("optimizer")
    assert arrays["step.actor.0.weight"][0] == 16
    # without obs_stats the version's own statistics are carried over
    np.testing.assert_allclose(run_store.params.latest().tensors["obs_rms.mean"], stats.mean)
    with pytest.raises(learner.StalePublish, match="version 2"):
        learner.handler(ev(run_store, redis_url, mode="update", trajectory_ids=ids,
                           target_version=2, hyper=hyper))


@pytest.mark.parametrize("mode", ["update", "gradient"])
def test_a_learner_warm_up_compiles_what_the_first_update_runs_and_changes_nothing(
        run_store, redis_url, mode):
    from torch._dynamo.utils import counters

    publish_init(run_store, "CartPole-v1")
    ids = sample(run_store, redis_url, n=2)  # 2 x 4 envs x 32 steps: 256 samples
    # a loss no other test compiles (the graphs are the process's), cut into ragged minibatches
    hyper = {"update_epochs": 2, "num_minibatches": 3, "clip_coef": 0.123 if mode == "update"
             else 0.124}
    graphs = counters["stats"]["unique_graphs"]
    out = learner.handler({"schema": "stellaris.learner-warmup/1",
                           **ev(run_store, redis_url, mode=mode, batch_size=256, hyper=hyper)})
    assert out["warmed"] and out["minibatch_sizes"] == [86, 85] and out["version"] == 0
    assert counters["stats"]["unique_graphs"] > graphs
    # nothing in the store moved, nor the weights of the environment's cached policy
    assert run_store.params.latest_version() == 0 and run_store.get_state("optimizer") is None
    pol, _ = learner.POLICIES.get(run_store, "latest")
    stored = run_store.params.get(0).tensors
    for name, p in pol.model.named_parameters():
        np.testing.assert_array_equal(p.detach().numpy(), stored[name])
    # the first update, in the environment it warmed, compiles nothing more
    graphs = counters["stats"]["unique_graphs"]
    target = {"target_version": 1} if mode == "update" else {}
    res = learner.handler(ev(run_store, redis_url, mode=mode, trajectory_ids=ids, hyper=hyper,
                             compile=True, **target))
    assert res["compiled"] and res["optimizer_steps" if mode == "update" else "gradients"] == 6
    assert counters["stats"]["unique_graphs"] == graphs


def test_a_warm_up_without_compiling_does_nothing_and_a_bad_one_is_refused(run_store, redis_url):
    publish_init(run_store, "CartPole-v1")
    warm = {"schema": "stellaris.learner-warmup/1", **ev(run_store, redis_url)}
    assert learner.handler({**warm, "compile": False})["warmed"] is False
    with pytest.raises(InvalidEvent, match="batch_size"):
        learner.handler({**warm, "batch_size": 0})
    with pytest.raises(InvalidEvent, match="trajectory_ids"):  # not a warm-up: an update
        learner.handler(ev(run_store, redis_url, mode="update", target_version=1))


@pytest.mark.parametrize("mode", ["update", "gradient"])
def test_target_kl_ends_the_update_after_the_epoch_that_exceeds_it(run_store, redis_url, mode):
    """CleanRL's ``target_kl``: with a bound the first epoch's steps already exceed, the
    update stops after that epoch (fewer steps/gradients, a preview-free early end); with a
    bound nothing reaches, every epoch runs."""
    publish_init(run_store, "Pendulum-v1")
    ids = sample(run_store, redis_url, "Pendulum-v1")
    base = {"update_epochs": 4, "num_minibatches": 4, "learning_rate": 3e-3}
    runs = {}
    for target_kl, version in ((1e-9, 1), (10.0, 2)):
        # gradient mode: with look-ahead its weights move as the master's will (without, they
        # move only when a master publishes, and none runs here)
        kw = ({"mode": "update", "target_version": version} if mode == "update"
              else {"lookahead": True})
        runs[target_kl] = learner.handler(ev(
            run_store, redis_url, trajectory_ids=ids, invocation_id=f"kl-{version}",
            hyper={**base, "target_kl": target_kl}, **kw))
    tight, loose = runs[1e-9], runs[10.0]
    assert tight["losses/update_epochs"] == 1 and loose["losses/update_epochs"] == 4
    assert tight["losses/approx_kl"] > 1e-9
    steps = "optimizer_steps" if mode == "update" else "gradients"
    assert tight[steps] == 4 and loose[steps] == 16
    if mode == "update":
        assert run_store.params.latest().version == 2  # both published their version


def test_kl_exceeded_is_cleanrls_check():
    assert not ppo.kl_exceeded(0.05, None)
    assert ppo.kl_exceeded(0.021, 0.02) and not ppo.kl_exceeded(0.02, 0.02)


def test_update_mode_previews_change_nothing_but_the_preview(redis_url, monkeypatch):
    """With previews the update publishes the same version bit for bit, and stores its
    weights after each epoch but the last as a preview of it while it runs."""
    from store import ParamStore, RunStore, Store

    stamps: list[str] = []
    orig = ParamStore.publish_preview

    def spy(self, *a, **k):
        ok = orig(self, *a, **k)
        stamps.append(self.fetch_newest(None).token)
        return ok

    monkeypatch.setattr(ParamStore, "publish_preview", spy)
    published = []
    for previews in (False, True):
        rs = RunStore(Store(redis_url), f"preview-{previews}-{np.random.randint(1 << 30)}")
        try:
            publish_init(rs, "CartPole-v1")
            ids = [actor.handler(ev(rs, redis_url, env_id="CartPole-v1", n_envs=4, steps=32,
                                    seed=i, invocation_id=f"a-{i}"))["trajectory_id"]
                   for i in range(2)]
            learner.POLICIES.clear()
            out = learner.handler(ev(rs, redis_url, mode="update", trajectory_ids=ids, seed=3,
                                     target_version=1, previews=previews, invocation_id="u-p",
                                     hyper={"update_epochs": 3, "num_minibatches": 4}))
            assert out["previews"] == (2 if previews else 0)
            published.append(rs.params.latest().tensors)
            assert rs.params.fetch_newest(None).token == "1"  # type: ignore[union-attr]
        finally:
            rs.clear()
    assert stamps == ["0:u-p:1", "0:u-p:2"]
    assert published[0].keys() == published[1].keys()
    for name in published[0]:
        np.testing.assert_array_equal(published[0][name], published[1][name])


def test_a_failed_preview_never_fails_the_update(run_store, redis_url, monkeypatch):
    """A preview is only a fresher behaviour policy: a store error writing one stops the
    previews of that invocation, and the update still publishes its version."""
    from store import ParamStore
    from store.errors import StoreUnavailable

    calls = []

    def down(self, *a, **k):
        calls.append(a)
        raise StoreUnavailable("redis://127.0.0.1:1", ConnectionError("outage"))

    monkeypatch.setattr(ParamStore, "publish_preview", down)
    publish_init(run_store, "CartPole-v1")
    ids = sample(run_store, redis_url, n=1)
    out = learner.handler(ev(run_store, redis_url, mode="update", trajectory_ids=ids,
                             target_version=1, previews=True,
                             hyper={"update_epochs": 4, "num_minibatches": 2}))
    assert out["published_version"] == 1 and out["previews"] == 0 and len(calls) == 1
    assert run_store.params.latest_version() == 1


# -- errors ----------------------------------------------------------------------------------
def test_bad_events_fail_before_any_work():
    nowhere = "redis://127.0.0.1:1/0"  # would hang in retries if the handler touched it
    with pytest.raises(InvalidEvent, match="n_envs"):
        actor.handler({"run_id": "r", "redis_url": nowhere, "env_id": "CartPole-v1",
                       "n_envs": -1})
    with pytest.raises(InvalidEvent, match="trajectory_ids"):
        learner.handler({"run_id": "r", "redis_url": nowhere})
    with pytest.raises(InvalidEvent, match="max_steps"):
        evaluator.handler({"run_id": "r", "redis_url": nowhere, "max_steps": "many"})


def test_store_errors_are_clear(run_store, redis_url):
    with pytest.raises(VersionNotFound, match="no policy published"):
        actor.handler(ev(run_store, redis_url, env_id="CartPole-v1"))
    publish_init(run_store, "CartPole-v1")
    with pytest.raises(VersionNotFound, match="never published"):
        actor.handler(ev(run_store, redis_url, env_id="CartPole-v1", policy_version=7))
    with pytest.raises(learner.MissingTrajectory, match="999-0"):
        learner.handler(ev(run_store, redis_url, trajectory_ids=["999-0"]))
    bad = run_store.traj.append({"kind": "trajectory"}, b"garbage-not-safetensors")
    with pytest.raises(CorruptBlob):
        learner.handler(ev(run_store, redis_url, trajectory_ids=[bad]))
    wrong = run_store.traj.append({}, encode({"x": np.zeros(1)}, {"kind": "gradient"}))
    with pytest.raises(CorruptBlob, match="not a trajectory"):
        learner.handler(ev(run_store, redis_url, trajectory_ids=[wrong]))
    with pytest.raises(UnknownEnv, match="Nope-v9"):
        actor.handler(ev(run_store, redis_url, env_id="Nope-v9"))
    with pytest.raises(actor.PolicyEnvMismatch, match="Pendulum-v1"):
        actor.handler(ev(run_store, redis_url, env_id="Pendulum-v1"))


# -- evaluator -------------------------------------------------------------------------------
def test_evaluator_is_deterministic(run_store, redis_url):
    publish_init(run_store, "Pendulum-v1")
    e = ev(run_store, redis_url, episodes=2, seed=3, max_steps=50)
    a, b = evaluator.handler(e), evaluator.handler(e)
    assert a["returns"] == b["returns"] and a["lengths"] == [50, 50]
    assert a["version"] == 0 and a["mean_return"] == pytest.approx(np.mean(a["returns"]))
    assert a["std_return"] == pytest.approx(np.std(a["returns"]))


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


def test_a_failed_gradient_write_fails_the_invocation(run_store, redis_url, monkeypatch):
    from store import RunStore, StoreUnavailable

    publish_init(run_store, "CartPole-v1")
    ids = sample(run_store, redis_url)
    orig, calls = RunStore.append_and_poll, {"n": 0}

    def flaky(self, *a, **k):
        calls["n"] += 1
        if calls["n"] == 3:
            raise StoreUnavailable("redis://x", ConnectionError("boom"))
        return orig(self, *a, **k)

    monkeypatch.setattr(RunStore, "append_and_poll", flaky)
    with pytest.raises(StoreUnavailable, match="boom"):
        learner.handler(ev(run_store, redis_url, trajectory_ids=ids,
                           hyper={"update_epochs": 2, "num_minibatches": 4}))


def test_concurrent_in_process_invocations_do_not_share_envs_or_modules(run_store, redis_url,
                                                                      monkeypatch):
    """An inline invoker runs handlers on a thread pool: each thread is its own warm env."""
    import threading
    import warnings

    model = publish_init(run_store, "CartPole-v1")
    # two invocations provably inside their rollouts at the same time
    barrier, seen, orig = threading.Barrier(2, timeout=60), [], actor.rollout

    def rollout(wenv, pol, ev_, refresh=None):
        seen.append((id(wenv), id(pol.model)))
        barrier.wait()
        return orig(wenv, pol, ev_, refresh)

    monkeypatch.setattr(actor, "rollout", rollout)
    e0 = ev(run_store, redis_url, env_id="CartPole-v1", n_envs=2, steps=8)
    with cf.ThreadPoolExecutor(2) as pool:
        for f in [pool.submit(actor.handler, {**e0, "seed": i}) for i in range(2)]:
            f.result(timeout=120)
    assert len({s[0] for s in seen}) == 2 and len({s[1] for s in seen}) == 2
    monkeypatch.setattr(actor, "rollout", orig)

    e = ev(run_store, redis_url, env_id="CartPole-v1", n_envs=4, steps=200)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # e.g. gymnasium's "step() after terminated"
        with cf.ThreadPoolExecutor(3) as pool:
            actors = [pool.submit(actor.handler, {**e, "seed": i}) for i in range(6)]
            outs = [f.result(timeout=120) for f in actors]
            ids = [o["trajectory_id"] for o in outs]
            learners = [pool.submit(learner.handler, ev(run_store, redis_url,
                                                        trajectory_ids=ids[i:i + 2],
                                                        hyper={"update_epochs": 2}))
                        for i in range(0, 6, 2)]
            assert all(f.result(timeout=120)["gradients"] == 64 for f in learners)
    for entry in run_store.traj.get(ids):
        tr = Trajectory.from_blob(entry.blob)
        with torch.no_grad():
            logp, _ = model.log_prob_entropy(torch.from_numpy(tr.obs), torch.from_numpy(tr.actions))
        np.testing.assert_allclose(tr.logprobs, logp.numpy(), rtol=1e-5, atol=1e-5)
        # SAME_STEP autoreset: rows after an episode end start a fresh episode
        assert tr.terminated.any()


def test_gae_values_learner_recomputes_the_targets_with_the_learners_critic(run_store, redis_url):
    """``gae_values="learner"``: with the behaviour policy's own critic it reproduces the
    actor's recorded values (so fresh data learns exactly as before); with a newer critic
    the values, advantages and value-clip centres are that critic's."""
    publish_init(run_store, "Pendulum-v1")
    ids = sample(run_store, redis_url, "Pendulum-v1", n=2)
    groups = learner._group(learner.load_trajectories(run_store, ids), torch.device("cpu"))
    behaviour = build_policy(run_store.params.get(0).meta)
    load_policy_tensors(behaviour, run_store.params.get(0).tensors)
    hyper = learner.PPOHyper(gae_values="behaviour")
    recorded = learner.build_batch(behaviour, groups, hyper, [])
    same = learner.build_batch(behaviour, groups, hyper.model_copy(update={"gae_values": "learner"}), [])
    torch.testing.assert_close(same.values, recorded.values, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(same.advantages, recorded.advantages, atol=1e-4, rtol=1e-4)

    perturbed(run_store, 1, scale=0.5)
    newer = build_policy(run_store.params.get(1).meta)
    load_policy_tensors(newer, run_store.params.get(1).tensors)
    fresh = learner.build_batch(newer, groups, hyper.model_copy(update={"gae_values": "learner"}), [])
    with torch.no_grad():
        torch.testing.assert_close(fresh.values, newer.get_value(recorded.obs).reshape(-1))
    assert not torch.allclose(fresh.advantages, recorded.advantages, atol=1e-3)
    torch.testing.assert_close(fresh.returns, fresh.advantages + fresh.values)


def test_norm_adv_scope_batch_standardizes_once_over_the_batch(run_store, redis_url):
    """``norm_adv_scope="batch"`` (RLlib's way): the batch's advantages come out of build_batch
    standardized, returns untouched, and the minibatch loss does not standardize again."""
    from functions.compiled import _loss_kwargs

    publish_init(run_store, "Pendulum-v1")
    ids = sample(run_store, redis_url, "Pendulum-v1", n=2)
    groups = learner._group(learner.load_trajectories(run_store, ids), torch.device("cpu"))
    model = build_policy(run_store.params.get(0).meta)
    load_policy_tensors(model, run_store.params.get(0).tensors)
    per_minibatch = learner.PPOHyper()
    per_batch = per_minibatch.model_copy(update={"norm_adv_scope": "batch"})
    raw = learner.build_batch(model, groups, per_minibatch, [])
    once = learner.build_batch(model, groups, per_batch, [])
    assert abs(float(raw.advantages.mean())) > 1e-3  # GAE's own scale: not standardized
    assert abs(float(once.advantages.mean())) < 1e-5
    assert abs(float(once.advantages.std()) - 1.0) < 1e-4
    torch.testing.assert_close(once.returns, raw.returns)
    torch.testing.assert_close(
        once.advantages, (raw.advantages - raw.advantages.mean()) / (raw.advantages.std() + 1e-8))
    assert _loss_kwargs(per_minibatch)["norm_adv"] and not _loss_kwargs(per_batch)["norm_adv"]
    off = per_batch.model_copy(update={"norm_adv": False})
    torch.testing.assert_close(learner.build_batch(model, groups, off, []).advantages,
                               raw.advantages)
