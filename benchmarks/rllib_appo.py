"""RLlib 2.60 APPO (new API stack), RLlib's asynchronous PPO, for a wall budget on 2 cores.

Settings: RLlib's own tuned example for MuJoCo, ``rllib/tuned_examples/appo/halfcheetah_appo.py``
(hyper-parameters from the IMPALA/APPO paper, per its comments): train batch 4096, circular
buffer of 16 batches each learned from 20 times, target network updated every 2 updates,
target-worker clipping 2.0, clip 0.4, gradient clip 0.5 by value, lr 5e-4, vf coefficient
0.5, gamma 0.995, lambda 0.995, no entropy bonus, KL loss (coefficient 1.0, target 0.04), and
RLlib's default model. Changed for two cores: 2 env runners of 8 envs each (the example: 32
envs per runner on many runners), rollout fragments of 512 steps (the example's), one request
in flight per runner (the example's), and the learner on the driver. No observation filter,
as in the example. ``train()`` returns every second (APPO's default: 10), so the curve's rows
are as fine as the other systems'. The same runner, episode bookkeeping and clock as the PPO baseline
(:func:`benchmarks.rllib_ppo.train`): the mean of the last 100 episodes' raw returns, from the
process's start.

    python benchmarks/rllib_appo.py --env Hopper-v5 --minutes 2 --seed 1 --out benchmarks/out/rllib-appo
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks import rllib_ppo  # noqa: E402  (sets Ray's environment before Ray loads)
from benchmarks._common import parse_budgeted, runner_parser  # noqa: E402

N_ENV_RUNNERS, ENVS_PER_RUNNER, FRAGMENT = 2, 8, 512
# halfcheetah_appo.py's .training(...), less its GPU loader threads (no GPU here)
TUNED: dict[str, Any] = dict(
    train_batch_size_per_learner=4096, circular_buffer_num_batches=16,
    circular_buffer_iterations_per_batch=20, target_network_update_freq=2,
    target_worker_clipping=2.0, clip_param=0.4, grad_clip=0.5, grad_clip_by="value",
    lr=0.0005, vf_loss_coeff=0.5, gamma=0.995, lambda_=0.995, entropy_coeff=0.0,
    use_kl_loss=True, kl_coeff=1.0, kl_target=0.04)


def build_config(env_id: str, seed: int) -> Any:
    from ray.rllib.algorithms.appo import APPOConfig

    return (
        APPOConfig()
        .environment(env_id)
        .framework("torch")
        .env_runners(num_env_runners=N_ENV_RUNNERS, num_envs_per_env_runner=ENVS_PER_RUNNER,
                     rollout_fragment_length=FRAGMENT, max_requests_in_flight_per_env_runner=1,
                     env_runner_cls=rllib_ppo.episode_returns_runner())
        .learners(num_learners=0)
        .training(**TUNED)
        # APPO's train() otherwise returns every 10 s (its min_time_s_per_iteration): rows
        # that coarse would round every time to a target up to the next 10 s
        .reporting(metrics_num_episodes_for_smoothing=100, min_time_s_per_iteration=1)
        .debugging(seed=seed, log_level="ERROR")
    )


def train(env_id: str, seed: int, out_dir: str, minutes: float | None = None,
          total_steps: int | None = None, stop_at_return: float | None = None) -> dict[str, Any]:
    return rllib_ppo.train(
        env_id, seed, out_dir, minutes, total_steps, n_envs=N_ENV_RUNNERS * ENVS_PER_RUNNER,
        rollout_steps=FRAGMENT, num_env_runners=N_ENV_RUNNERS, stop_at_return=stop_at_return,
        algo_config=build_config(env_id, seed), system="rllib-appo",
        described={"algo": "APPO", "appo": TUNED,
                   "settings": "rllib/tuned_examples/appo/halfcheetah_appo.py, 2 env runners"})


def main(argv: list[str] | None = None) -> int:
    p = runner_parser(__doc__, "RLlib's seed")
    a = parse_budgeted(p, argv)
    s = train(a.env, a.seed, a.out, a.minutes, a.total_steps, a.stop_at_return)
    print(f"RLlib APPO {a.env} seed {a.seed}: {s['env_steps']} steps in {s['wall_s']:.1f} s "
          f"({s['sps']:.0f}/s), return {s['mean_return']}, ${s['cost']['total_usd']:.6f} "
          f"(setup {s['setup_s']:.1f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
