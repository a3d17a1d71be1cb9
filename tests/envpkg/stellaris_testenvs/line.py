"""``StellarisLine-v0``: walk along a line to a goal. Importing this module registers it."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np


class LineEnv(gym.Env[np.ndarray, int]):
    """Position in [-1, 1], start at 0, goal at 1: action 1 steps right, 0 left; +1 at the
    goal, -0.01 a step otherwise."""

    def __init__(self, step_size: float = 0.1) -> None:
        self.step_size = step_size
        self.observation_space = gym.spaces.Box(-1.0, 1.0, shape=(2,), dtype=np.float32)
        self.action_space = gym.spaces.Discrete(2)
        self.pos = 0.0

    def _obs(self) -> np.ndarray:
        return np.array([self.pos, 1.0 - self.pos], dtype=np.float32).clip(-1.0, 1.0)

    def reset(self, *, seed: int | None = None,
              options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        self.pos = float(self.np_random.uniform(-0.2, 0.2))
        return self._obs(), {}

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        self.pos = float(np.clip(self.pos + (self.step_size if action == 1 else -self.step_size),
                                 -1.0, 1.0))
        done = self.pos >= 1.0
        return self._obs(), 1.0 if done else -0.01, done, False, {}


gym.register(id="StellarisLine-v0", entry_point=LineEnv, max_episode_steps=50)
