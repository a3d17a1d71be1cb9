"""Evaluator function: deterministic (mean-action) episodes of one policy version."""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import torch

from functions.envs import make_env
from functions.events import EvaluatorEvent, parse_event
from functions.policy import normalize_obs
from functions.warm import PolicyCache, run_store, set_threads

POLICIES = PolicyCache()


def handler(event: Any, context: Any = None) -> dict[str, Any]:
    ev = parse_event(EvaluatorEvent, event, context)
    set_threads()
    t0 = time.perf_counter()
    rs = run_store(ev.redis_url, ev.run_id)
    pol, cached = POLICIES.get(rs, ev.policy_version)
    env_id = ev.env_id or str(pol.meta.get("env_id", ""))
    env = make_env(env_id)
    model, spec = pol.model, pol.model.spec
    returns: list[float] = []
    lengths: list[int] = []
    try:
        for ep in range(ev.episodes):
            obs, _ = env.reset(seed=ev.seed + ep)
            total, length = 0.0, 0
            while length < ev.max_steps:
                x = normalize_obs(np.asarray(obs, dtype=np.float64).reshape(1, -1),
                                  pol.obs_rms, spec)
                with torch.inference_mode():
                    action = model.env_action(model.deterministic_action(torch.from_numpy(x)))[0]
                obs, reward, terminated, truncated, _ = env.step(action)
                total += float(reward)
                length += 1
                if terminated or truncated:
                    break
            returns.append(total)
            lengths.append(length)
    finally:
        env.close()
    return {
        "mean_return": float(np.mean(returns)),
        "std_return": float(np.std(returns)),
        "returns": returns,
        "lengths": lengths,
        "version": pol.version,
        "env_id": env_id,
        "cached": cached,
        "timings": {"total_s": time.perf_counter() - t0},
    }
