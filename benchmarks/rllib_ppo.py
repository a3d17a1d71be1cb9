"""RLlib 2.60 PPO (new API stack) for a wall budget: matched to Stellaris, or with the
normalisation and KL control a PPO user turns on for MuJoCo (``--norm``).

Matched (``rllib``): 64x64 tanh MLPs, separate actor and critic (``vf_share_layers=False``), a
state-independent log-std (``free_log_std=True``), train batch 2048 (``n_envs x rollout``),
minibatch 64 (2048 / 32), 10 epochs, Adam lr 3e-4, gamma 0.995 (our default), lambda 0.95, clip
0.2, vf coefficient 0.5, entropy bonus 0.003 (our default), global-norm gradient clip 0.5, no KL
penalty, and observation normalisation through the ``MeanStdFilter`` env-to-module connector
(clip 10). Not matchable in RLlib without custom code (every comparison says so): CleanRL's
reward scaling (RLlib has no return normaliser connector), the clipped value loss of CleanRL
(RLlib's ``vf_clip_param`` clips the *loss*; set very large here so the value function can learn
on unscaled Hopper returns), orthogonal init, and Adam eps 1e-5 (RLlib: 1e-8).

``--norm`` (``rllib-norm``): the matched settings plus reward normalisation, as a few lines of
env wrapper in the env creator (gymnasium's ``NormalizeReward`` at our gamma, then rewards
clipped to [-10, 10], CleanRL's and SB3's VecNormalize's recipe), and KL control. RLlib's PPO
has no KL early stop (CleanRL's ``target_kl``, which ours use: an update ends after the first
epoch whose KL passes 0.02); its closest is the adaptive KL penalty, so ``use_kl_loss`` with
``kl_target=0.02`` (our ``target_kl``) and RLlib's default initial ``kl_coeff`` 0.2, which it
raises when an update's KL overshoots the target. The returns logged are the raw env's, from
a wrapper below the normaliser, never the normalised rewards RLlib learns from.

2 cores, as an RLlib user would use them: ``num_env_runners=2`` sampling processes with 4 envs
each (8 envs in all, rollout fragments of 256 steps) and the learner on the driver. Ray runs
without its dashboard. The budget clock starts at the process's start (:mod:`benchmarks._common`):
Ray's start-up and building the algorithm count, as every system's start-up does (``setup_s``
in the summary says how much of it they took).

The return is the mean of the last 100 training episodes, the same statistic as every other
system's, computed here from each episode's return. Not RLlib's ``episode_return_mean``: in
RLlib 2.60 its window is emptied at every ``train()`` (``MeanStats.reduce``), so it averages the
few episodes that ended in the last iteration (~3 on Hopper) — a far noisier figure that
reaches a target on a lucky iteration. It is kept beside ours, per iteration, in the run
folder's ``rllib_returns.csv`` (column ``rllib_episode_return_mean``).

    python benchmarks/rllib_ppo.py --env Hopper-v5 --minutes 2 --seed 1 --out benchmarks/out/rllib
    python benchmarks/rllib_ppo.py --norm --env Hopper-v5 --minutes 2 --seed 1 --out benchmarks/out/rllib-norm

RLlib's APPO runs through the same loop: :mod:`benchmarks.rllib_appo`.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
# Ray's workers import this module by name (the env creator, the wrappers): they inherit this
os.environ["PYTHONPATH"] = os.pathsep.join(
    p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)
os.environ.setdefault("RAY_DEDUP_LOGS", "0")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

import gymnasium as gym  # noqa: E402

from benchmarks._common import (  # noqa: E402
    RunLog,
    _fmt,
    parse_budgeted,
    runner_parser,
    since_process_start,
)
from functions.hyper import PPOHyper, env_hyper  # noqa: E402
from functions.ppo import LR_FLOOR  # noqa: E402

# Every ended episode's return and length, as the env runners computed them (whole episodes,
# across sample() chunks), listed per train() result under ``env_runners``.
EPISODE_RETURNS = "stellaris_episode_returns"
EPISODE_LENGTHS = "stellaris_episode_lengths"
# The raw env's return of an episode, put in its last step's info below any reward wrapper
RAW_RETURN = "stellaris_raw_return"
REWARD_CLIP = 10.0
NORM_ENV = "stellaris-normalized-reward"
KL_TARGET = 0.02  # our target_kl, as the target of RLlib's adaptive KL penalty (--norm)


def normalized_env(ctx: Any) -> gym.Env:
    """The env creator of ``--norm``: ``ctx["env_id"]``, its raw return recorded at each
    episode's end (:class:`RawReturn`), then rewards normalised by a running estimate of the
    discounted return's sd (gymnasium's ``NormalizeReward`` at ``ctx["gamma"]``) and clipped."""
    env = gym.wrappers.NormalizeReward(RawReturn(gym.make(ctx["env_id"])),
                                       gamma=float(ctx["gamma"]))
    return gym.wrappers.ClipReward(env, -REWARD_CLIP, REWARD_CLIP)


class RawReturn(gym.Wrapper):
    """Adds the episode's raw return to the info of its last step (:data:`RAW_RETURN`)."""

    def reset(self, **kwargs: Any) -> Any:
        self.ret = 0.0
        return self.env.reset(**kwargs)

    def step(self, action: Any) -> Any:
        obs, reward, term, trunc, info = self.env.step(action)
        self.ret += float(reward)
        if term or trunc:
            info = {**info, RAW_RETURN: self.ret}
        return obs, reward, term, trunc, info


def episode_returns_runner() -> type:
    """RLlib's ``SingleAgentEnvRunner`` that also lists each ended episode's return and length
    (``reduce="item_series"``: the items themselves, not a mean), so the driver can keep the
    last-100-episode window every other system reports."""
    from ray.rllib.env.single_agent_env_runner import SingleAgentEnvRunner

    class EpisodeReturnsRunner(SingleAgentEnvRunner):
        def get_metrics(self) -> Any:
            # the raw returns of the episodes the base class is about to log, in its order
            # (an env without a reward wrapper leaves them out: its return is the raw one)
            self._raw: list[float | None] = []
            for eps in self._done_episodes_for_metrics:
                info = eps.get_infos(-1)
                self._raw.append(info.get(RAW_RETURN) if isinstance(info, dict) else None)
            return super().get_metrics()

        def _log_episode_metrics(self, length: Any, ret: Any, sec: Any) -> None:
            super()._log_episode_metrics(length, ret, sec)
            raw = self._raw.pop(0) if getattr(self, "_raw", None) else None
            self.metrics.log_value(EPISODE_RETURNS, float(ret if raw is None else raw),
                                   reduce="item_series")
            self.metrics.log_value(EPISODE_LENGTHS, int(length), reduce="item_series")

    return EpisodeReturnsRunner


def episodes_of(result: dict[str, Any]) -> tuple[list[float], list[int]]:
    """The returns and lengths of the episodes that ended in this ``train()`` result."""
    runners = result.get("env_runners") or {}
    rets, lens = runners.get(EPISODE_RETURNS), runners.get(EPISODE_LENGTHS)
    if not isinstance(rets, list | tuple):  # no episode ended: RLlib reports nan or nothing
        return [], []
    rets_f = [float(r) for r in rets]
    lens_i = [int(n) for n in lens] if isinstance(lens, list | tuple) else []
    return rets_f, lens_i if len(lens_i) == len(rets_f) else []


def build_config(env_id: str, seed: int, hyper: PPOHyper, n_envs: int = 8,
                 rollout_steps: int = 256, num_env_runners: int = 2,
                 anneal_lr_steps: int | None = None, norm: bool = False) -> Any:
    """RLlib's PPO with our hyper-parameters. ``anneal_lr_steps``: the learning rate decays
    linearly to ``LR_FLOOR`` of itself over that many env steps (RLlib's schedules count env
    steps; ours count the budget, so a wall-clock budget is turned into RLlib's steps by the
    caller). ``norm``: rewards normalised in the env and the adaptive KL penalty (the module's
    docstring)."""
    from ray.rllib.algorithms.ppo import PPOConfig
    from ray.rllib.connectors.env_to_module import MeanStdFilter
    from ray.rllib.core.rl_module.default_model_config import DefaultModelConfig

    batch = n_envs * rollout_steps
    runners = max(1, num_env_runners)
    cfg = PPOConfig()
    if norm:  # RLlib takes a creator by a registered name (kept by Ray for its workers)
        from ray.tune.registry import register_env

        register_env(NORM_ENV, normalized_env)
        cfg = cfg.environment(NORM_ENV, env_config={"env_id": env_id, "gamma": hyper.gamma})
    else:
        cfg = cfg.environment(env_id)
    return (
        cfg.framework("torch")
        .env_runners(
            num_env_runners=num_env_runners,
            num_envs_per_env_runner=max(1, n_envs // runners),
            env_runner_cls=episode_returns_runner(),
            rollout_fragment_length=rollout_steps,
            env_to_module_connector=lambda env, spaces=None, device=None: MeanStdFilter(
                clip_by_value=10.0),
        )
        .learners(num_learners=0)
        .training(
            train_batch_size_per_learner=batch,
            minibatch_size=batch // hyper.num_minibatches,
            num_epochs=hyper.update_epochs,
            lr=(hyper.learning_rate if not anneal_lr_steps else
                [[0, hyper.learning_rate], [anneal_lr_steps, hyper.learning_rate * LR_FLOOR]]),
            gamma=hyper.gamma,
            lambda_=hyper.gae_lambda,
            clip_param=hyper.clip_coef,
            vf_loss_coeff=hyper.vf_coef,
            entropy_coeff=hyper.ent_coef,
            use_kl_loss=norm,
            kl_coeff=0.2 if norm else 0.0,  # 0.2: RLlib's default initial coefficient
            kl_target=KL_TARGET,
            grad_clip=hyper.max_grad_norm,
            grad_clip_by="global_norm",
            vf_clip_param=1e9,
        )
        .rl_module(model_config=DefaultModelConfig(
            fcnet_hiddens=[64, 64], fcnet_activation="tanh", vf_share_layers=False,
            free_log_std=True,
        ))
        .reporting(metrics_num_episodes_for_smoothing=100)
        .debugging(seed=seed, log_level="ERROR")
    )


def _get(result: dict[str, Any], *paths: str) -> Any:
    for path in paths:
        cur: Any = result
        for key in path.split("/"):
            if not isinstance(cur, dict) or key not in cur:
                cur = None
                break
            cur = cur[key]
        if cur is not None:
            return cur
    return None


def baseline_hyper(env_id: str = "Hopper-v5", **fields: Any) -> PPOHyper:
    """The hyper-parameters RLlib's matched baseline runs with on ``env_id``: ours (the env's
    own defaults included), except what RLlib's PPO has no counterpart for: no IS correction,
    and every epoch (no ``target_kl``; RLlib's KL counterpart is a penalty, off to match
    ours)."""
    return env_hyper(env_id, **{"is_correction": "none", "target_kl": None, **fields})


def train(env_id: str, seed: int, out_dir: str | os.PathLike[str], minutes: float | None = None,
          total_steps: int | None = None, n_envs: int = 8, rollout_steps: int = 256,
          num_env_runners: int = 2, hyper: PPOHyper | None = None,
          anneal_lr_steps: int | None = None,
          stop_at_return: float | None = None, norm: bool = False,
          algo_config: Any = None, system: str | None = None,
          described: dict[str, Any] | None = None) -> dict[str, Any]:
    """Train RLlib's PPO (``norm``: ``rllib-norm``'s settings), or ``algo_config`` (an RLlib
    algorithm's config, e.g. APPO's, named ``system`` and ``described`` in config.json), for
    ``minutes`` of wall clock from the process's start (and/or ``total_steps``)."""
    import math

    import ray

    if minutes is None and total_steps is None:
        raise ValueError("give a budget: minutes or total_steps")
    hyper = hyper or baseline_hyper(env_id)
    system = system or ("rllib-norm" if norm else "rllib")
    since_start = since_process_start()
    t_setup = time.perf_counter()
    ray.init(include_dashboard=False, num_cpus=max(2, num_env_runners + 1),
             log_to_driver=False, configure_logging=True, logging_level="ERROR")
    try:
        cfg = algo_config or build_config(env_id, seed, hyper, n_envs, rollout_steps,
                                          num_env_runners, anneal_lr_steps, norm)
        algo = cfg.build_algo()
        setup_s = since_start + time.perf_counter() - t_setup  # imports included
        config = {"system": system, "env": env_id, "seed": seed, "minutes": minutes,
                  "total_steps": total_steps, "n_envs": n_envs, "rollout_steps": rollout_steps,
                  "num_env_runners": num_env_runners, "mode": "rllib", "backend": "ray",
                  "ray_version": ray.__version__, "anneal_lr_steps": anneal_lr_steps,
                  "stop_at_return": stop_at_return,
                  **(described if algo_config is not None else {
                      "hyper": hyper.model_dump(), "reward_norm": norm,
                      "kl_target": KL_TARGET if norm else None})}
        log = RunLog(out_dir, config, log_interval_s=0.0, stop_at_return=stop_at_return)
        budget_s = minutes * 60 if minutes is not None else float("inf")
        # RLlib's own per-iteration figure beside ours, to show what it would have said
        with open(Path(out_dir) / "rllib_returns.csv", "w", newline="") as own:
            own_csv = csv.writer(own)
            own_csv.writerow(["wall_s", "env_steps", "episodes_this_iter",
                              "rllib_num_episodes_lifetime", "rllib_episode_return_mean",
                              "episodic_return"])
            while log.running(budget_s, total_steps):
                res = algo.train()
                steps = _get(res, "env_runners/num_env_steps_sampled_lifetime",
                             "num_env_steps_sampled_lifetime")
                if steps is not None:
                    log.env_steps = int(steps)
                rets, lens = episodes_of(res)
                log.episodes_done(rets, lens)
                log.version += 1
                stats = {}
                for ours, theirs in (("losses/policy_loss", "policy_loss"),
                                     ("losses/value_loss", "vf_loss"), ("losses/entropy", "entropy"),
                                     ("losses/approx_kl", "mean_kl_loss"),
                                     ("losses/explained_variance", "vf_explained_var")):
                    v = _get(res, f"learners/default_policy/{theirs}")
                    if isinstance(v, int | float):
                        stats[ours] = float(v)
                lr = _get(res, "learners/default_policy/default_optimizer_learning_rate")
                if isinstance(lr, int | float):
                    stats["charts/learning_rate"] = float(lr)
                row = log.row(stats, force=True) or {}
                mean = _get(res, "env_runners/episode_return_mean")  # see the module docstring
                if isinstance(mean, float) and math.isnan(mean):  # no episode ended
                    mean = None
                lifetime = _get(res, "env_runners/num_episodes_lifetime")
                own_csv.writerow([_fmt(v) for v in (
                    row.get("wall_s"), log.env_steps, len(rets),
                    None if lifetime is None else int(lifetime), mean, row.get("episodic_return"))])
                own.flush()
        algo.stop()
        return log.close({"mode": "rllib", "backend": "ray", "env": env_id, "setup_s": setup_s,
                          "system": system})
    finally:
        ray.shutdown()


# PPOHyper fields build_config() hands to RLlib; a change to any other one would not reach it
RLLIB_HYPER = {"gamma", "gae_lambda", "clip_coef", "ent_coef", "vf_coef", "max_grad_norm",
               "update_epochs", "num_minibatches", "learning_rate"}


def _hyper(p: argparse.ArgumentParser, env_id: str, pairs: list[str]) -> PPOHyper:
    # parsed here, not with orchestrator.cli.parse_set: importing that module sets
    # OMP_NUM_THREADS=1, which Ray's learner would inherit and RLlib's runs would change
    fields: dict[str, Any] = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        if not sep:
            p.error(f"--hyper expects KEY=VALUE, got {pair!r}")
        try:
            fields[key] = json.loads(raw)
        except ValueError:
            fields[key] = raw
    unmatched = sorted(set(fields) - RLLIB_HYPER)
    if unmatched:
        p.error(f"--hyper: RLlib's PPO has no counterpart for {unmatched} here "
                f"(it takes {sorted(RLLIB_HYPER)}; anneal the learning rate with --anneal-lr-steps)")
    return baseline_hyper(env_id, **fields)


def main(argv: list[str] | None = None) -> int:
    p = runner_parser(__doc__, "RLlib's seed")
    p.add_argument("--n-envs", type=int, default=8, help="envs over all env runners")
    p.add_argument("--rollout-steps", type=int, default=256, help="rollout fragment length")
    p.add_argument("--num-env-runners", type=int, default=2, help="sampling processes")
    p.add_argument("--anneal-lr-steps", type=int,
                   help="decay the learning rate linearly over this many env steps")
    p.add_argument("--hyper", action="append", default=[], metavar="KEY=VALUE",
                   help="a PPOHyper field, e.g. --hyper ent_coef=0.005 (repeatable); those RLlib "
                   "has no counterpart for (the IS correction, value clipping) are refused")
    p.add_argument("--norm", action="store_true",
                   help="rllib-norm: rewards normalised (and clipped) in the env and the "
                   f"adaptive KL penalty with kl_target {KL_TARGET} (the module's docstring)")
    a = parse_budgeted(p, argv)
    s = train(a.env, a.seed, a.out, a.minutes, a.total_steps, a.n_envs, a.rollout_steps,
              a.num_env_runners, hyper=_hyper(p, a.env, a.hyper), anneal_lr_steps=a.anneal_lr_steps,
              stop_at_return=a.stop_at_return, norm=a.norm)
    print(f"RLlib PPO{' (norm)' if a.norm else ''} {a.env} seed {a.seed}: {s['env_steps']} steps in {s['wall_s']:.1f} s "
          f"({s['sps']:.0f}/s), return {s['mean_return']}, ${s['cost']['total_usd']:.6f} "
          f"(setup {s['setup_s']:.1f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
