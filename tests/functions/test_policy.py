"""The actor-critic against torch.distributions; the policy as tensors; env handling."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch
from torch.distributions import Categorical, Normal

from functions.envs import UnknownEnv, UnsupportedSpace, make_vec_env, space_info
from functions.hyper import PolicySpec
from functions.normalizer import RunningMeanStd
from functions.policy import (
    ActorCritic,
    build_policy,
    init_policy,
    load_policy_tensors,
    policy_meta,
    policy_tensors,
)
from store.errors import CorruptBlob

BOX = {"type": "box", "shape": [2], "low": [-1.0, -2.0], "high": [1.0, 2.0]}
DISCRETE = {"type": "discrete", "n": 3}


def _model(space, **spec) -> ActorCritic:
    torch.manual_seed(0)
    m = ActorCritic(5, space, PolicySpec(**spec))
    if not m.discrete:
        with torch.no_grad():
            m.actor_logstd.copy_(torch.tensor([0.3, -0.7]))
    return m


def test_gaussian_log_prob_and_entropy_match_torch_distributions() -> None:
    m = _model(BOX)
    x = torch.randn(7, 5)
    a = torch.randn(7, 2) * 3
    logp, ent = m.log_prob_entropy(x, a)
    ref = Normal(m.actor(x), torch.exp(m.actor_logstd))
    torch.testing.assert_close(logp, ref.log_prob(a).sum(-1))
    torch.testing.assert_close(ent, ref.entropy().sum(-1))
    g = torch.Generator().manual_seed(3)
    action, logp_s, value = m.sample(x, generator=g)
    torch.testing.assert_close(logp_s, ref.log_prob(action).sum(-1))
    torch.testing.assert_close(value, m.critic(x).squeeze(-1))
    _, logp2, ent2, v2 = m.get_action_and_value(x, action)
    torch.testing.assert_close(logp2, logp_s)
    torch.testing.assert_close(v2, value)
    torch.testing.assert_close(ent2, ref.entropy().sum(-1))


def test_categorical_log_prob_and_entropy_match_torch_distributions() -> None:
    m = _model(DISCRETE)
    x = torch.randn(9, 5) * 50  # large logits: log_softmax must stay stable
    a = torch.tensor([0, 1, 2, 0, 1, 2, 0, 1, 2])
    logp, ent = m.log_prob_entropy(x, a)
    ref = Categorical(logits=m.actor(x))
    torch.testing.assert_close(logp, ref.log_prob(a))
    torch.testing.assert_close(ent, ref.entropy())
    action, logp_s, _ = m.sample(x, generator=torch.Generator().manual_seed(1))
    torch.testing.assert_close(logp_s, ref.log_prob(action))
    assert action.dtype == torch.int64 and set(action.tolist()) <= {0, 1, 2}


def test_sampling_is_seeded_and_env_actions_are_clipped() -> None:
    m = _model(BOX)
    x = torch.zeros(1000, 5)
    a1 = m.sample(x, torch.Generator().manual_seed(7))[0]
    a2 = m.sample(x, torch.Generator().manual_seed(7))[0]
    assert torch.equal(a1, a2)
    std = a1.std(0)
    torch.testing.assert_close(std, torch.exp(m.actor_logstd.detach()), rtol=0.1, atol=0)
    env_a = m.env_action(a1 * 10)
    assert env_a.min(0).tolist() == [-1.0, -2.0] and env_a.max(0).tolist() == [1.0, 2.0]
    assert np.array_equal(m.deterministic_action(x).detach().numpy(), m.actor(x).detach().numpy())


def test_cleanrl_architecture_and_orthogonal_init() -> None:
    m = _model(BOX, hidden_sizes=[64, 32])
    names = [n for n, _ in m.named_parameters()]
    # a module's own parameters come before its children's
    assert names == ["actor_logstd", "critic.0.weight", "critic.0.bias", "critic.2.weight", "critic.2.bias",
                     "critic.4.weight", "critic.4.bias", "actor.0.weight", "actor.0.bias",
                     "actor.2.weight", "actor.2.bias", "actor.4.weight", "actor.4.bias"]
    w = m.actor[0].weight.detach()  # [64, 5]: orthogonal columns scaled by sqrt(2)
    torch.testing.assert_close(w.T @ w, 2.0 * torch.eye(5), atol=1e-5, rtol=0)
    assert m.actor[4].weight.abs().max() < 0.05  # std 0.01 output layer
    assert all(isinstance(m.actor[i], torch.nn.Tanh) for i in (1, 3))
    assert isinstance(_model(BOX, activation="relu").critic[1], torch.nn.ReLU)


def test_policy_tensors_round_trip_with_normaliser_stats() -> None:
    model, tensors = init_policy("Pendulum-v1", PolicySpec(hidden_sizes=[16]), seed=3)
    model2, tensors2 = init_policy("Pendulum-v1", PolicySpec(hidden_sizes=[16]), seed=3)
    assert all(np.array_equal(tensors[k], tensors2[k]) for k in tensors)  # seeded
    obs_rms = RunningMeanStd((3,))
    obs_rms.update(np.random.default_rng(0).normal(size=(50, 3)))
    ret_rms = RunningMeanStd(())
    ret_rms.update(np.arange(10.0))
    blob_tensors = policy_tensors(model, obs_rms, ret_rms)
    assert set(blob_tensors) == {n for n, _ in model.named_parameters()} | {
        f"{p}.{k}" for p in ("obs_rms", "ret_rms") for k in ("mean", "var", "count")}
    rebuilt = build_policy(policy_meta(model))
    o, r = load_policy_tensors(rebuilt, blob_tensors)
    for (n, p), (_, q) in zip(model.named_parameters(), rebuilt.named_parameters(), strict=True):
        assert torch.equal(p, q), n
    assert o.to_dict() == obs_rms.to_dict() and r.to_dict() == ret_rms.to_dict()
    meta = policy_meta(model)
    assert meta["env_id"] == "Pendulum-v1" and meta["obs_dim"] == 3
    assert meta["action_space"]["type"] == "box" and meta["spec"]["hidden_sizes"] == [16]


def test_load_rejects_mismatched_tensors() -> None:
    model, tensors = init_policy("CartPole-v1")
    bad = dict(tensors)
    bad["critic.0.weight"] = np.zeros((3, 3), np.float32)
    with pytest.raises(CorruptBlob, match=r"critic\.0\.weight"):
        load_policy_tensors(model, bad)
    del bad["critic.0.weight"]
    with pytest.raises(CorruptBlob, match="lack parameters"):
        load_policy_tensors(model, bad)
    with pytest.raises(CorruptBlob, match="cannot describe"):
        build_policy({"spec": {}})


def test_env_errors_name_the_id_and_space() -> None:
    with pytest.raises(UnknownEnv, match="NoSuchEnv-v0"):
        space_info("NoSuchEnv-v0")
    with pytest.raises(UnknownEnv, match="no_such_pkg"):
        space_info("no_such_pkg.envs:Thing-v0")
    with pytest.raises(UnsupportedSpace, match="Blackjack"):
        space_info("Blackjack-v1")  # Tuple observation space


def test_module_env_id_imports_and_registers(tmp_path, monkeypatch) -> None:
    (tmp_path / "my_user_envs.py").write_text(
        "import gymnasium as gym\n"
        "gym.register('MyCartPole-v0', entry_point='gymnasium.envs.classic_control:CartPoleEnv',"
        " max_episode_steps=50)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    info = space_info("my_user_envs:MyCartPole-v0")
    assert info.obs_dim == 4 and info.action_space == {"type": "discrete", "n": 2}
    envs = make_vec_env("my_user_envs:MyCartPole-v0", 2)
    assert envs.num_envs == 2
    assert envs.metadata["autoreset_mode"] == gym.vector.AutoresetMode.SAME_STEP
    envs.close()
