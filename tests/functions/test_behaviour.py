"""The actors' behaviour sampler against ``ActorCritic.sample``, and the envs they step."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from functions.behaviour import behaviour_sampler
from functions.envs import make_vec_env
from functions.hyper import PolicySpec
from functions.policy import ActorCritic

BOX = {"type": "box", "shape": [2], "low": [-1.0, -2.0], "high": [1.0, 2.0]}
DISCRETE = {"type": "discrete", "n": 3}


def _model(space: dict, **spec: object) -> ActorCritic:
    torch.manual_seed(0)
    m = ActorCritic(5, space, PolicySpec(**spec))
    if not m.discrete:
        with torch.no_grad():
            m.actor_logstd.copy_(torch.tensor([0.3, -0.7]))
            m.actor[-1].weight.mul_(300.0)  # means well outside the bounds: clipping matters
    return m


@pytest.mark.parametrize("activation", ["tanh", "relu"])
def test_the_numpy_gaussian_takes_the_torch_samples_steps(activation: str) -> None:
    m = _model(BOX, activation=activation, hidden_sizes=[16, 8, 4])
    obs = np.random.default_rng(0).normal(size=(8, 5), scale=3.0).astype(np.float32)
    sample = behaviour_sampler(m, torch.Generator().manual_seed(11))
    ref_gen = torch.Generator().manual_seed(11)
    for _ in range(3):  # the same noise stream, step after step
        action, logp, value, env_action = sample(obs)
        with torch.inference_mode():
            ref_a, ref_logp, ref_v = m.sample(torch.from_numpy(obs), generator=ref_gen)
        for got, ref in ((action, ref_a), (logp, ref_logp), (value, ref_v)):
            assert got.dtype == np.float32 and got.shape == tuple(ref.shape)
            np.testing.assert_allclose(got, ref.numpy(), rtol=1e-5, atol=1e-5)
        np.testing.assert_array_equal(env_action, m.env_action(torch.from_numpy(action)))
        assert np.all(env_action >= [-1.0, -2.0]) and np.all(env_action <= [1.0, 2.0])
        assert np.any(env_action != action)  # some were outside the bounds
        # What the learner recomputes for these actions: the importance ratio of fresh data is 1.
        with torch.no_grad():
            learner_logp, _ = m.log_prob_entropy(torch.from_numpy(obs), torch.from_numpy(action))
        np.testing.assert_allclose(np.exp(learner_logp.numpy() - logp), 1.0, rtol=1e-5)


def test_a_sampler_is_a_snapshot_of_the_version_it_was_built_from() -> None:
    m = _model(BOX)
    obs = np.ones((2, 5), dtype=np.float32)
    sample = behaviour_sampler(m, torch.Generator().manual_seed(0))
    before = sample(obs)[2]
    with torch.no_grad():  # the next version loaded into the same module in place
        for p in m.parameters():
            p.add_(1.0)
    sample.generator.manual_seed(0)  # type: ignore[attr-defined]
    np.testing.assert_array_equal(sample(obs)[2], before)
    assert not np.allclose(behaviour_sampler(m, torch.Generator())(obs)[2], before)


def test_discrete_actions_keep_the_torch_path() -> None:
    m = _model(DISCRETE)
    obs = np.random.default_rng(1).normal(size=(6, 5)).astype(np.float32)
    action, logp, value, env_action = behaviour_sampler(m, torch.Generator().manual_seed(4))(obs)
    with torch.inference_mode():
        ref_a, ref_logp, _ = m.sample(torch.from_numpy(obs), generator=torch.Generator().manual_seed(4))
    np.testing.assert_array_equal(action, ref_a.numpy())
    np.testing.assert_allclose(logp, ref_logp.numpy())
    assert env_action.dtype == np.int64 and value.shape == (6,)


def test_vector_envs_step_without_the_envs_info_but_keep_final_observations() -> None:
    envs = make_vec_env("Hopper-v5", 2)
    try:
        _, reset_info = envs.reset(seed=0)
        assert "x_position" in reset_info  # reset's info is the env's own
        _, _, _, _, info = envs.step(np.zeros((2, 3), dtype=np.float32))
        assert info == {}
        # Hopper falls within a few hundred steps of full-force actions: the step that ends an
        # episode still carries its true final observation.
        for _ in range(1000):
            _, _, term, trunc, info = envs.step(np.ones((2, 3), dtype=np.float32))
            if np.any(term | trunc):
                break
        done = term | trunc
        assert done.any() and set(info) >= {"final_obs", "_final_obs"}
        assert all(info["final_obs"][i].shape == (11,) for i in np.flatnonzero(done))
    finally:
        envs.close()
