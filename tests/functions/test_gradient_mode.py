"""The learner in gradient mode against a real Redis: the gradients it streams (the local
PPO gradient, deduplicated retries, packed messages), weights refreshed mid-update, IS
truncation over the versions in flight, and a failed write."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from fn_helpers import ev, perturbed, publish_init, sample

from functions import learner, ppo, step
from functions.gradient_writer import GradientWriter
from functions.hyper import PPOHyper
from functions.policy import build_policy, load_policy_tensors
from functions.wire import Gradient, Trajectory
from store import RunStore


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

    class LossThenPublish(step.MinibatchLoss):
        def __call__(self, *a, **k):
            out = super().__call__(*a, **k)
            calls["n"] += 1
            if calls["n"] == 2:  # the orchestrator publishes while the learner works
                perturbed(run_store, 1)
            return out

    monkeypatch.setattr(step, "MinibatchLoss", LossThenPublish)
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
    assert used.index(1) <= 2 + GradientWriter.MAX_PENDING


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


def test_a_failed_gradient_write_fails_the_invocation(run_store, redis_url, monkeypatch):
    from store import StoreUnavailable

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
