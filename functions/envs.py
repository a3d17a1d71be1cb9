"""Gymnasium environments: ids (incl. ``package.module:EnvId``), spaces, vector envs.

Vector envs use ``AutoresetMode.SAME_STEP``: the step that ends an episode returns the reset
observation of the next one and puts the true final observation in ``info["final_obs"]``, so
every row of a rollout is a real transition and truncated episodes can be bootstrapped from
their final observation.
"""

from __future__ import annotations

import importlib
import os
import sys
import sysconfig
import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode, SyncVectorEnv


class UnknownEnv(ValueError):
    """The environment id is not registered (or its module cannot be imported)."""


class UnsupportedSpace(ValueError):
    """The environment's observation or action space is not one a policy here supports."""


AUTORESET_MODE = AutoresetMode.SAME_STEP


class WithoutStepInfo(gym.Wrapper):
    """An env whose ``step`` returns an empty ``info``.

    No function reads an env's per-step info (Hopper's x_position, reward_forward, ...): the
    actor needs only the vector env's own ``final_obs``, which SyncVectorEnv adds itself. But
    SyncVectorEnv merges every key of every env's info into arrays on every step, ~8 µs of
    the ~150 µs an env step costs an actor on Hopper-v5. ``reset``'s info is kept.
    """

    def step(self, action: Any) -> tuple[Any, Any, Any, Any, dict[str, Any]]:
        obs, reward, terminated, truncated, _ = self.env.step(action)
        return obs, reward, terminated, truncated, {}


def _import_for(env_id: str) -> str:
    """Import ``package.module`` of ``package.module:EnvId`` (it registers the env)."""
    if ":" not in env_id:
        return env_id
    module, _, name = env_id.partition(":")
    if not module or not name:
        raise UnknownEnv(f"malformed env id {env_id!r}: use 'EnvId' or 'package.module:EnvId'")
    _path_from_environment()
    try:
        importlib.import_module(module)
    except ImportError as exc:
        raise UnknownEnv(
            f"env id {env_id!r}: cannot import module {module!r}: {exc} (install its package, "
            "or put the folder that holds it on PYTHONPATH)") from exc
    return name


def _path_from_environment() -> None:
    """Put this process's ``PYTHONPATH`` entries on ``sys.path``.

    A process started with it has them already; a local-runtime worker forked from the
    runtime's zygote inherited the zygote's ``sys.path`` and got its function's ``PYTHONPATH``
    (where a custom env's package lives) only as an environment variable.
    """
    for entry in os.environ.get("PYTHONPATH", "").split(os.pathsep):
        if entry and entry not in sys.path:
            sys.path.append(entry)


def custom_env_source(env_id: str) -> str | None:
    """Where the code that registers a ``package.module:EnvId`` id lives, so the backends ship
    it with the functions: the folder of its top-level package (or its file, for a top-level
    module). None for a plain id and for an installed distribution (site-packages, the
    standard library): the function's image must carry those, like gymnasium itself.
    Raises :class:`UnknownEnv` if the module cannot be imported."""
    if ":" not in env_id:
        return None
    _import_for(env_id)
    top = importlib.import_module(env_id.partition(":")[0].split(".")[0])
    origin = getattr(top, "__file__", None)
    if origin is None:  # a namespace package: no single folder to ship
        raise UnknownEnv(f"env id {env_id!r}: {top.__name__!r} is a namespace package; give "
                         "it an __init__.py so it can be shipped with the functions")
    source = os.path.dirname(origin) if os.path.basename(origin) == "__init__.py" else origin
    source = os.path.realpath(source)
    installed = {os.path.realpath(p) for key in ("purelib", "platlib", "stdlib", "platstdlib")
                 if (p := sysconfig.get_paths().get(key))}
    if any(source == p or source.startswith(p + os.sep) for p in installed):
        return None
    return source


def make_env(env_id: str, **kwargs: Any) -> gym.Env:
    """``gymnasium.make`` with a clear :class:`UnknownEnv` for ids that are not registered."""
    name = _import_for(env_id)
    try:
        return gym.make(name, **kwargs)
    except gym.error.Error as exc:  # NameNotFound, VersionNotFound, NamespaceNotFound, ...
        raise UnknownEnv(f"unknown environment id {env_id!r}: {exc}") from exc


@dataclass(frozen=True)
class SpaceInfo:
    """What a policy needs to know about an env: flat obs size and the action space."""

    obs_dim: int
    action_space: dict[str, Any]  # {"type": "box", "shape", "low", "high"} | {"type": "discrete", "n"}


def describe_spaces(env_id: str, obs_space: gym.Space, act_space: gym.Space) -> SpaceInfo:
    if not isinstance(obs_space, gym.spaces.Box):
        raise UnsupportedSpace(
            f"env {env_id!r}: observation space {obs_space} is not supported (need a Box)"
        )
    obs_dim = int(np.prod(obs_space.shape))
    if isinstance(act_space, gym.spaces.Discrete):
        if int(act_space.start) != 0:
            raise UnsupportedSpace(f"env {env_id!r}: Discrete action space must start at 0")
        return SpaceInfo(obs_dim, {"type": "discrete", "n": int(act_space.n)})
    if isinstance(act_space, gym.spaces.Box) and len(act_space.shape) == 1:
        return SpaceInfo(obs_dim, {
            "type": "box",
            "shape": [int(act_space.shape[0])],
            "low": [float(x) for x in act_space.low],
            "high": [float(x) for x in act_space.high],
        })
    raise UnsupportedSpace(
        f"env {env_id!r}: action space {act_space} is not supported "
        "(need Discrete or a 1-D Box)"
    )


_SPACES: dict[str, SpaceInfo] = {}


def space_info(env_id: str) -> SpaceInfo:
    """The env's spaces (cached per process: building an env to read them is not free)."""
    if env_id not in _SPACES:
        env = make_env(env_id)
        try:
            _SPACES[env_id] = describe_spaces(env_id, env.observation_space, env.action_space)
        finally:
            env.close()
    return _SPACES[env_id]


def make_vec_env(env_id: str, n_envs: int) -> SyncVectorEnv:
    """``n_envs`` copies in one process (a function owns one core: no subprocess vector env),
    each without per-step info (:class:`WithoutStepInfo`)."""
    space_info(env_id)  # fail early with UnknownEnv / UnsupportedSpace
    name = _import_for(env_id)
    return SyncVectorEnv(
        [lambda: WithoutStepInfo(gym.make(name)) for _ in range(n_envs)],
        autoreset_mode=AUTORESET_MODE,
    )


class WarmEnv:
    """A vector env kept alive across warm invocations, with its per-env running state.

    Episodes continue across invocations (as in CleanRL, where envs persist across rollouts),
    so long episodes are not cut at every invocation boundary.
    """

    def __init__(self, env_id: str, n_envs: int, seed: int) -> None:
        self.env_id = env_id
        self.n_envs = n_envs
        self.envs = make_vec_env(env_id, n_envs)
        self.info = space_info(env_id)
        obs, _ = self.envs.reset(seed=seed)
        self.obs = self._flat(obs)
        # Discounted return per env for reward scaling (CleanRL NormalizeReward).
        self.disc_return = np.zeros(n_envs, dtype=np.float64)
        # Raw (unscaled) running episode return and length per env.
        self.ep_return = np.zeros(n_envs, dtype=np.float64)
        self.ep_length = np.zeros(n_envs, dtype=np.int64)

    def _flat(self, obs: np.ndarray) -> np.ndarray:
        return np.asarray(obs, dtype=np.float64).reshape(self.n_envs, -1)

    def close(self) -> None:
        self.envs.close()


_WARM_MAX = 2
_LOCAL = threading.local()


def _warm() -> OrderedDict[tuple[str, str, int], WarmEnv]:
    """This thread's warm envs: concurrent in-process invocations never share an env."""
    cache = getattr(_LOCAL, "envs", None)
    if cache is None:
        cache = _LOCAL.envs = OrderedDict()
    return cache


def warm_env(run_id: str, env_id: str, n_envs: int, seed: int) -> tuple[WarmEnv, bool]:
    """The cached env of (run, env, n_envs), else a fresh one reset with ``seed``.

    Returns (env, reused). An LRU of two keeps memory bounded when a worker serves runs in
    turn; another run never inherits this run's episode state.
    """
    key = (run_id, env_id, n_envs)
    cache = _warm()
    env = cache.get(key)
    if env is not None:
        cache.move_to_end(key)
        return env, True
    env = WarmEnv(env_id, n_envs, seed)
    cache[key] = env
    while len(cache) > _WARM_MAX:
        _, old = cache.popitem(last=False)
        old.close()
    return env, False


def drop_warm_env(run_id: str, env_id: str, n_envs: int) -> None:
    env = _warm().pop((run_id, env_id, n_envs), None)
    if env is not None:
        env.close()
