"""``stellaris evaluate RUN``: deterministic episodes of a checkpoint, optionally on video.
RUN is a run folder or an ``s3://bucket/prefix`` one (orchestrator/run_reader.py)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import torch

from functions.envs import make_env
from functions.policy import build_policy, load_policy_tensors, normalize_obs
from orchestrator.checkpoint import Checkpointer
from orchestrator.run_reader import readable_run


def evaluate_run(run_dir: str | Path, episodes: int = 10, seed: int = 12345,
                 video_dir: str | None = None, best: bool = False) -> dict[str, Any]:
    with readable_run(run_dir) as local:
        if not local.exists():
            raise FileNotFoundError(f"run folder {run_dir} does not exist")
        ck = Checkpointer(local)
        best_file = ck.dir / "best.safetensors"
        found = ck.load(best_file) if best and best_file.exists() else ck.latest()
        if found is None:
            raise FileNotFoundError(f"no checkpoint in {str(run_dir).rstrip('/')}/checkpoints")
    tensors, meta = found
    model = build_policy(meta["policy_meta"])
    obs_rms, _ = load_policy_tensors(model, tensors)
    if video_dir:
        os.environ.setdefault("MUJOCO_GL", "egl")  # headless rendering on servers
    env = make_env(meta["env_id"], render_mode="rgb_array" if video_dir else None)
    returns, lengths, videos = [], [], []
    for ep in range(episodes):
        obs, _ = env.reset(seed=seed + ep)
        done, total, n = False, 0.0, 0
        frames = [_render(env)] if video_dir else []
        while not done:
            x = torch.as_tensor(normalize_obs(obs[None], obs_rms, model.spec))
            with torch.no_grad():
                action = model.env_action(model.deterministic_action(x))[0]
            obs, r, term, trunc, _ = env.step(action)
            total += float(r)
            n += 1
            done = bool(term or trunc)
            if video_dir:
                frames.append(_render(env))
        returns.append(total)
        lengths.append(n)
        if video_dir:
            videos.append(str(_save_gif(frames, Path(video_dir) / f"episode-{ep:03d}.gif")))
    env.close()
    return {
        "run": str(run_dir), "version": int(meta["version"]), "episodes": episodes,
        "mean_return": float(np.mean(returns)), "std_return": float(np.std(returns)),
        "returns": returns, "lengths": lengths, "videos": videos,
    }


def _render(env: Any) -> np.ndarray:
    try:
        frame = env.render()
    except Exception as exc:  # noqa: BLE001 - GL backends fail in many ways
        raise ValueError(f"rendering is not available here ({type(exc).__name__}: {exc}); "
                         "run without --video or set MUJOCO_GL (egl, osmesa)") from None
    if frame is None:
        raise ValueError("this environment cannot render rgb_array frames")
    return np.asarray(frame)


def _save_gif(frames: list[np.ndarray], path: Path, fps: int = 30) -> Path:
    import imageio.v3 as iio

    path.parent.mkdir(parents=True, exist_ok=True)
    # Every 2nd frame keeps files small; GIF needs no ffmpeg.
    iio.imwrite(path, np.stack(frames[::2]), duration=1000 * 2 / fps, loop=0)
    return path
