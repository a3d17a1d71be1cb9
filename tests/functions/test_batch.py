"""The learner's batch: whose critic the GAE targets use, and where advantages are
standardized."""

from __future__ import annotations

import torch
from fn_helpers import perturbed, publish_init, sample

from functions.batch import build_batch, group_rollouts, load_trajectories
from functions.compiled import loss_kwargs
from functions.hyper import PPOHyper
from functions.policy import build_policy, load_policy_tensors


def test_gae_values_learner_recomputes_the_targets_with_the_learners_critic(run_store, redis_url):
    """``gae_values="learner"``: with the behaviour policy's own critic it reproduces the
    actor's recorded values (so fresh data learns exactly as before); with a newer critic
    the values, advantages and value-clip centres are that critic's."""
    publish_init(run_store, "Pendulum-v1")
    ids = sample(run_store, redis_url, "Pendulum-v1", n=2)
    groups = group_rollouts(load_trajectories(run_store, ids), torch.device("cpu"))
    behaviour = build_policy(run_store.params.get(0).meta)
    load_policy_tensors(behaviour, run_store.params.get(0).tensors)
    hyper = PPOHyper(gae_values="behaviour")
    recorded = build_batch(behaviour, groups, hyper, [])
    same = build_batch(behaviour, groups, hyper.model_copy(update={"gae_values": "learner"}), [])
    torch.testing.assert_close(same.values, recorded.values, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(same.advantages, recorded.advantages, atol=1e-4, rtol=1e-4)

    perturbed(run_store, 1, scale=0.5)
    newer = build_policy(run_store.params.get(1).meta)
    load_policy_tensors(newer, run_store.params.get(1).tensors)
    fresh = build_batch(newer, groups, hyper.model_copy(update={"gae_values": "learner"}), [])
    with torch.no_grad():
        torch.testing.assert_close(fresh.values, newer.get_value(recorded.obs).reshape(-1))
    assert not torch.allclose(fresh.advantages, recorded.advantages, atol=1e-3)
    torch.testing.assert_close(fresh.returns, fresh.advantages + fresh.values)


def test_norm_adv_scope_batch_standardizes_once_over_the_batch(run_store, redis_url):
    """``norm_adv_scope="batch"`` (RLlib's way): the batch's advantages come out of build_batch
    standardized, returns untouched, and the minibatch loss does not standardize again."""
    publish_init(run_store, "Pendulum-v1")
    ids = sample(run_store, redis_url, "Pendulum-v1", n=2)
    groups = group_rollouts(load_trajectories(run_store, ids), torch.device("cpu"))
    model = build_policy(run_store.params.get(0).meta)
    load_policy_tensors(model, run_store.params.get(0).tensors)
    per_minibatch = PPOHyper()
    per_batch = per_minibatch.model_copy(update={"norm_adv_scope": "batch"})
    raw = build_batch(model, groups, per_minibatch, [])
    once = build_batch(model, groups, per_batch, [])
    assert abs(float(raw.advantages.mean())) > 1e-3  # GAE's own scale: not standardized
    assert abs(float(once.advantages.mean())) < 1e-5
    assert abs(float(once.advantages.std()) - 1.0) < 1e-4
    torch.testing.assert_close(once.returns, raw.returns)
    torch.testing.assert_close(
        once.advantages, (raw.advantages - raw.advantages.mean()) / (raw.advantages.std() + 1e-8))
    assert loss_kwargs(per_minibatch)["norm_adv"] and not loss_kwargs(per_batch)["norm_adv"]
    off = per_batch.model_copy(update={"norm_adv": False})
    torch.testing.assert_close(build_batch(model, groups, off, []).advantages,
                               raw.advantages)
