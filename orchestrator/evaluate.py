"""``stellaris evaluate RUN``: deterministic episodes of a checkpoint, optionally on video."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch

from functions.envs import make_env
from functions.policy import build_policy, load_policy_tensors, normalize_obs
from orchestrator.checkpoint import Checkpointer


def evaluate_run(run_dir: Path, episodes: int = 10, seed: int = 12345, video_dir: str | None = None,
                 best: bool = False) -> dict[str, Any]:
    if not Path(run_dir).exists():
        raise FileNotFoundError(f"run folder {run_dir} does not exist")
    ck = Checkpointer(run_dir)
    found = ck.load(ck.dir / "best.safetensors") if best and (ck.dir / "best.safetensors").exists() else ck.latest()
    if found is None:
        raise FileNotFoundError(f"no checkpoint in {run_dir}/checkpoints")
    tensors, meta = found
    model = build_policy(meta["policy_meta"])
    obs_rms, _ = load_policy_tensors(model, tensors)
    env = make_env(meta["env_id"], render_mode="rgb_array" if video_dir else None)
    if video_dir:
        from gymnasium.wrappers import RecordVideo

        env = RecordVideo(env, video_dir, episode_trigger=lambda i: True, disable_logger=True)
    returns, lengths = [], []
    for ep in range(episodes):
        obs, _ = env.reset(seed=seed + ep)
        done, total, n = False, 0.0, 0
        while not done:
            x = torch.as_tensor(normalize_obs(obs[None], obs_rms, model.spec))
            with torch.no_grad():
                action = model.env_action(model.deterministic_action(x))[0]
            obs, r, term, trunc, _ = env.step(action)
            total += float(r)
            n += 1
            done = bool(term or trunc)
        returns.append(total)
        lengths.append(n)
    env.close()
    return {
        "run": str(run_dir), "version": int(meta["version"]), "episodes": episodes,
        "mean_return": float(np.mean(returns)), "std_return": float(np.std(returns)),
        "returns": returns, "lengths": lengths, "video_dir": video_dir,
    }
