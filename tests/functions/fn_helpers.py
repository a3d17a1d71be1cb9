"""Helpers shared by the handler tests (a module name no other test folder uses): a run's
first policy, a newer one, an event for a run, and trajectories sampled by the real actor."""

from __future__ import annotations

from typing import Any

import torch

from functions import actor
from functions.hyper import PolicySpec
from functions.policy import build_policy, init_policy, load_policy_tensors, policy_meta
from functions.policy import policy_tensors as to_tensors
from store import RunStore

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


def ev(rs: RunStore, redis_url: str, **kw: Any) -> dict[str, Any]:
    return {"run_id": rs.run_id, "redis_url": redis_url, **kw}


def sample(rs: RunStore, redis_url: str, env_id: str = "CartPole-v1", n: int = 1,
           **kw: Any) -> list[str]:
    """``n`` trajectories (4 envs x 32 steps each) of the run's latest policy; their ids."""
    return [actor.handler(ev(rs, redis_url, env_id=env_id, n_envs=4, steps=32, seed=i,
                             invocation_id=f"a-{rs.run_id}-{i}", **kw))["trajectory_id"]
            for i in range(n)]
