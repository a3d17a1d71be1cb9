"""The sync (baseline) path with nothing but the handlers, called in a loop.

Per round: actors sample with version v, the orchestrator's job of merging the normaliser
statistics is done here, one update-mode learner runs PPO and publishes v+1.
"""

from __future__ import annotations

from typing import Any

from functions import actor, evaluator, learner
from functions.hyper import PolicySpec
from functions.normalizer import merge_stats
from functions.policy import build_policy, init_policy, load_policy_tensors, policy_meta
from store import RunStore


def run_sync(
    rs: RunStore,
    redis_url: str,
    env_id: str,
    rounds: int,
    *,
    n_actors: int = 1,
    n_envs: int = 8,
    steps: int = 256,
    hyper: dict[str, Any] | None = None,
    spec: PolicySpec | None = None,
    seed: int = 0,
    stop_at: float | None = None,
    eval_every: int = 0,
    eval_episodes: int = 5,
) -> list[dict[str, Any]]:
    """Returns one record per round (mean train return, eval return when evaluated)."""
    model, tensors = init_policy(env_id, spec, seed)
    rs.params.publish(0, tensors, policy_meta(model))
    common = {"run_id": rs.run_id, "redis_url": redis_url}
    history: list[dict[str, Any]] = []
    if eval_every:  # the untrained policy, for "did it improve" checks
        ev0 = evaluator.handler({**common, "policy_version": 0, "episodes": eval_episodes,
                                 "seed": 10_000})
        history.append({"version": 0, "train_return": None, "eval_return": ev0["mean_return"]})
    for v in range(rounds):
        outs = [
            actor.handler({**common, "env_id": env_id, "n_envs": n_envs, "steps": steps,
                           "seed": seed + 1000 * a, "policy_version": v,
                           "invocation_id": f"actor-{v}-{a}"})
            for a in range(n_actors)
        ]
        latest = rs.params.get(v)
        obs_rms, ret_rms = load_policy_tensors(build_policy(latest.meta), latest.tensors)
        obs_rms = merge_stats(obs_rms, [o["obs_stats"] for o in outs])
        ret_rms = merge_stats(ret_rms, [o["ret_stats"] for o in outs])
        res = learner.handler({
            **common, "mode": "update", "trajectory_ids": [o["trajectory_id"] for o in outs],
            "target_version": v + 1, "hyper": hyper or {}, "obs_stats": obs_rms.to_dict(),
            "ret_stats": ret_rms.to_dict(), "invocation_id": f"learner-{v}", "seed": seed,
        })
        rs.traj.delete([o["trajectory_id"] for o in outs])
        rets = [r for o in outs for r in o["episode_returns"]]
        rec: dict[str, Any] = {"version": v + 1,
                               "train_return": sum(rets) / len(rets) if rets else None,
                               "approx_kl": res["losses/approx_kl"]}
        if eval_every and (v + 1) % eval_every == 0:
            ev = evaluator.handler({**common, "policy_version": v + 1,
                                    "episodes": eval_episodes, "seed": 10_000 + v})
            rec["eval_return"] = ev["mean_return"]
        history.append(rec)
        if stop_at is not None and rec.get("eval_return", float("-inf")) >= stop_at:
            break
    return history
