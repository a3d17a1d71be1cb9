"""Stable-Baselines3 PPO with a SubprocVecEnv for a wall budget: what many users reach for first.

Settings (``--settings zoo``, the default): rl-baselines3-zoo's tuned PPO hyper-parameters for
these MuJoCo envs (``hyperparams/ppo.yml``: its ``Hopper``/``Walker2d``/``HalfCheetah``/
``Humanoid`` entries, keyed ``-v3`` in the version read; v5 keeps Hopper's and HalfCheetah's
dynamics), written out below: ``VecNormalize`` of observations and rewards at the algorithm's
gamma (the zoo's ``normalize: true``), 256x256 ReLU actor and critic, ``log_std_init=-2``, no
orthogonal init, and per env the batch, rollout, epochs, learning rate, gamma, lambda, clip,
entropy and value coefficients and gradient clip. One change for two cores: the zoo runs one
env (``n_envs: 1``, 512-step rollouts); here 2 envs in a ``SubprocVecEnv`` (one process each)
with 256-step rollouts, the same 512 steps per update.

``--settings ours``: our ``PPOHyper`` defaults in SB3 (64x64 tanh, lr 3e-4, 2048 steps per
update as 2 envs x 1024, minibatch 64, 10 epochs, gamma 0.995, lambda 0.95, clip 0.2, entropy
0.003, value 0.5, gradient clip 0.5, ``target_kl`` 0.02 — SB3 stops an update at the first
*minibatch* whose KL passes 1.5 x target_kl, CleanRL and ours at the end of an epoch past it),
with ``VecNormalize`` at our gamma (CleanRL's obs and reward normalisation, clip 10).

Cores: the learner in this process with one torch thread, each env in its own process;
SB3 samples and learns in turn (the env processes wait while it learns), so the two cores
are used for sampling only. The clock starts at this process's start (:mod:`benchmarks._common`).
Episodes' returns are the raw env's (the ``Monitor`` ``make_vec_env`` puts on each env, below
``VecNormalize``).

    python benchmarks/sb3_ppo.py --env Hopper-v5 --minutes 2 --seed 1 --out benchmarks/out/sb3
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

os.environ.setdefault("OMP_NUM_THREADS", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._common import RunLog, parse_budgeted, runner_parser, since_process_start  # noqa: E402

N_ENVS = 2  # one env process per core
# rl-baselines3-zoo, hyperparams/ppo.yml (tuned MuJoCo entries); n_steps is per env, the zoo's
# 512 with one env halved for two
_ZOO_NET = {"log_std_init": -2, "ortho_init": False, "activation_fn": "relu",
            "net_arch": {"pi": [256, 256], "vf": [256, 256]}}
ZOO: dict[str, dict[str, Any]] = {
    "Hopper": dict(batch_size=32, n_steps=256, gamma=0.999, learning_rate=9.80828e-05,
                   ent_coef=0.00229519, clip_range=0.2, n_epochs=5, gae_lambda=0.99,
                   max_grad_norm=0.7, vf_coef=0.835671),
    "Walker2d": dict(batch_size=32, n_steps=256, gamma=0.99, learning_rate=5.05041e-05,
                     ent_coef=0.000585045, clip_range=0.1, n_epochs=20, gae_lambda=0.95,
                     max_grad_norm=1.0, vf_coef=0.871923),
    "HalfCheetah": dict(batch_size=64, n_steps=256, gamma=0.98, learning_rate=2.0633e-05,
                        ent_coef=0.000401762, clip_range=0.1, n_epochs=20, gae_lambda=0.92,
                        max_grad_norm=0.8, vf_coef=0.58096),
    "Humanoid": dict(batch_size=256, n_steps=256, gamma=0.95, learning_rate=3.56987e-05,
                     ent_coef=0.00238306, clip_range=0.3, n_epochs=5, gae_lambda=0.9,
                     max_grad_norm=2.0, vf_coef=0.431892),
}
_OURS_NET = {"activation_fn": "tanh", "net_arch": {"pi": [64, 64], "vf": [64, 64]}}


def settings(env_id: str, which: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """(PPO's keyword arguments, policy_kwargs) of ``which`` ("zoo" or "ours") for ``env_id``;
    activation functions by name (JSON-able for config.json)."""
    if which == "ours":
        from functions.hyper import env_hyper

        h = env_hyper(env_id)
        return (dict(n_steps=2048 // N_ENVS, batch_size=2048 // h.num_minibatches,
                     n_epochs=h.update_epochs, learning_rate=h.learning_rate, gamma=h.gamma,
                     gae_lambda=h.gae_lambda, clip_range=h.clip_coef, ent_coef=h.ent_coef,
                     vf_coef=h.vf_coef, max_grad_norm=h.max_grad_norm, target_kl=h.target_kl),
                dict(_OURS_NET))
    family = env_id.split("-")[0]
    if family not in ZOO:
        raise ValueError(f"no zoo settings for {env_id} (have {sorted(ZOO)}); use --settings ours")
    return dict(ZOO[family]), dict(_ZOO_NET)


def _policy_kwargs(net: dict[str, Any]) -> dict[str, Any]:
    import torch

    acts = {"relu": torch.nn.ReLU, "tanh": torch.nn.Tanh}
    return {**net, "activation_fn": acts[net["activation_fn"]]}


def train(env_id: str, seed: int, out_dir: str | os.PathLike[str], minutes: float | None = None,
          total_steps: int | None = None, which: str = "zoo",
          stop_at_return: float | None = None) -> dict[str, Any]:
    """Train for ``minutes`` of wall clock from the process's start (and/or ``total_steps``)."""
    if minutes is None and total_steps is None:
        raise ValueError("give a budget: minutes or total_steps")
    import torch
    from stable_baselines3 import PPO
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.vec_env import SubprocVecEnv, VecNormalize

    torch.set_num_threads(1)
    kwargs, net = settings(env_id, which)
    venv = make_vec_env(env_id, n_envs=N_ENVS, seed=seed, vec_env_cls=SubprocVecEnv)
    venv = VecNormalize(venv, gamma=kwargs["gamma"], clip_obs=10.0, clip_reward=10.0)
    model = PPO("MlpPolicy", venv, seed=seed, device="cpu", verbose=0,
                policy_kwargs=_policy_kwargs(net), **kwargs)
    setup_s = since_process_start()
    config = {"system": "sb3", "env": env_id, "seed": seed, "minutes": minutes,
              "total_steps": total_steps, "settings": which, "n_envs": N_ENVS,
              "vec_env": "SubprocVecEnv", "sb3_hyper": kwargs, "policy": net,
              "normalize": "VecNormalize(obs, reward)", "mode": "sb3", "backend": "sb3",
              "stop_at_return": stop_at_return}
    log = RunLog(out_dir, config, stop_at_return=stop_at_return)
    budget_s = minutes * 60 if minutes is not None else float("inf")

    class Log(BaseCallback):
        """Each ended episode's raw return (its Monitor's), a row every log interval, and the
        budget: SB3 stops learning when this returns False."""

        def _on_step(self) -> bool:
            log.env_steps = self.num_timesteps
            done = [i["episode"] for i in self.locals["infos"] if "episode" in i]
            if done:
                log.episodes_done([d["r"] for d in done], [d["l"] for d in done])
            log.row()
            return log.running(budget_s, total_steps)

        def _on_rollout_end(self) -> None:
            log.version += 1

    model.learn(total_timesteps=10**12 if total_steps is None else total_steps,
                callback=Log(), progress_bar=False)
    venv.close()
    return log.close({"mode": "sb3", "backend": "sb3", "env": env_id, "setup_s": setup_s,
                      "system": "sb3"})


def main(argv: list[str] | None = None) -> int:
    p = runner_parser(__doc__, "SB3's and the envs' seed")
    p.add_argument("--settings", choices=["zoo", "ours"], default="zoo",
                   help="rl-baselines3-zoo's tuned hyper-parameters (default) or our PPOHyper's")
    a = parse_budgeted(p, argv)
    s = train(a.env, a.seed, a.out, a.minutes, a.total_steps, a.settings, a.stop_at_return)
    print(f"SB3 PPO ({a.settings}) {a.env} seed {a.seed}: {s['env_steps']} steps in "
          f"{s['wall_s']:.1f} s ({s['sps']:.0f}/s), return {s['mean_return']}, "
          f"${s['cost']['total_usd']:.6f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
