"""Sample Factory 2 (APPO) on MuJoCo for a wall budget: SF2's own MuJoCo example, run in its
own virtual environment, its episode statistics converted to the run folder every system writes.

Why a second venv: sample-factory 2.1.1 pins numpy<2, gymnasium<1 and (for its MuJoCo example)
mujoco<=2.3.3, which clash with ours; ``scripts/make_sf2_venv.sh`` makes ``.venv-sf2`` with
them (compare.py runs it before the timed runs; installing is not part of any clock). So SF2
runs the **v4** MuJoCo envs of gymnasium 0.29 (MuJoCo 2.3.3), not the v5 envs of gymnasium 1.x
every other system runs. Hopper and HalfCheetah v5 keep v4's dynamics and default reward
(v5 added options and ``info`` fields; its healthy-reward fix applies only without
termination on falling, not the default); Walker2d-v5 fixed v4's left-foot friction (1.9, now
0.9 as the right's), so its dynamics differ; Humanoid-v5 drops the world body's and root's
entries from the observation (348 dims, v4 376) and its contact cost is no longer always 0.
Every run's config.json names the env SF2 ran (``sf2_env``).

Settings: SF2's MuJoCo example (``sf_examples.mujoco``, ``mujoco_params.py``) as it ships —
its recommended config: 8 envs per worker, rollout 64, batch 1024, 2 epochs x 4 minibatches,
lr 0.00295 linearly decayed, gamma 0.99, obs and return normalisation, KL loss 0.1, and
``async_rl=False`` (its MuJoCo example's choice; ``--async-rl`` runs it asynchronously) —
except ``num_workers``: 2 rollout workers (the example's 8 assume 8+ cores), so SF2's processes
(learner, inference worker, 2 rollout workers) share the same 2 cores as every system here.

The clock starts at this process's start; SF2's summaries carry their wall time, so each row's
``wall_s`` is that time minus this process's creation time (SF2's own start-up, imports and
venv start included). The return is SF2's ``reward/reward``: the mean of its last 100 episodes
(``stats_avg``), the same statistic as ours; SF2 writes it once 100 episodes have ended. Read
from SF2's TensorBoard event files with TensorBoard's reader (protobuf records; nothing is
unpickled). Cost: one 2-vCPU instance for the wall time, as the other serverful baselines.

    bash scripts/make_sf2_venv.sh
    python benchmarks/sf2_appo.py --env Hopper-v5 --minutes 2 --seed 1 --out benchmarks/out/sf2
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import time
from collections import deque
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks._common import RunLog, since_process_start  # noqa: E402

VENV = Path(os.environ.get("SF2_VENV", REPO / ".venv-sf2"))
MAKE_VENV = REPO / "scripts" / "make_sf2_venv.sh"
# our env id -> SF2's MuJoCo example's env name (its gymnasium 0.29 id is the v4 one)
SF2_ENVS = {"Hopper-v5": ("mujoco_hopper", "Hopper-v4"),
            "Walker2d-v5": ("mujoco_walker", "Walker2d-v4"),
            "HalfCheetah-v5": ("mujoco_halfcheetah", "HalfCheetah-v4"),
            "Humanoid-v5": ("mujoco_humanoid", "Humanoid-v4")}
RETURN_TAG, LENGTH_TAG = "reward/reward", "len/len"
WORKERS = 2
POLL_S = 2.0
STOP_GRACE_S = 30.0  # SF2 saves and joins its processes on SIGINT


def ensure_venv() -> Path:
    """The SF2 venv's python, made by ``scripts/make_sf2_venv.sh`` if missing or stale."""
    subprocess.run(["bash", str(MAKE_VENV)], check=True, env={**os.environ, "SF2_VENV": str(VENV)})
    return VENV / "bin" / "python"


def sf2_command(python: Path, env_id: str, seed: int, train_dir: Path, seconds: float,
                async_rl: bool) -> list[str]:
    name = SF2_ENVS[env_id][0]
    return [str(python), "-m", "sf_examples.mujoco.train_mujoco", f"--env={name}",
            "--experiment=sf2", f"--train_dir={train_dir}", f"--seed={seed}",
            f"--num_workers={WORKERS}", "--device=cpu", f"--async_rl={async_rl}",
            f"--train_for_seconds={max(1, int(seconds))}", "--restart_behavior=overwrite",
            "--flush_summaries_interval=2", "--save_every_sec=600", "--with_wandb=False"]


def read_scalars(train_dir: Path) -> dict[str, list[tuple[float, int, float]]]:
    """``(wall time, env steps, value)`` of the return and length summaries SF2 wrote (policy
    0), read with TensorBoard's event reader."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    out: dict[str, list[tuple[float, int, float]]] = {RETURN_TAG: [], LENGTH_TAG: []}
    for folder in sorted({p.parent for p in train_dir.rglob("events.out.tfevents.*")}):
        if folder.name != "0":  # .summary/<policy id>: the one policy
            continue
        acc = EventAccumulator(str(folder), size_guidance={"scalars": 0})
        acc.Reload()
        tags = set(acc.Tags().get("scalars", []))
        for tag in out:
            if tag in tags:
                out[tag] += [(e.wall_time, int(e.step), float(e.value)) for e in acc.Scalars(tag)]
    return {k: sorted(v) for k, v in out.items()}


class _Replay(RunLog):
    """A RunLog whose clock is set, not read: rows at the times SF2 wrote them."""

    now = 0.0

    def wall(self) -> float:
        return self.now


def convert(scalars: dict[str, list[tuple[float, int, float]]], started_unix: float,
            ended_s: float, run_dir: Path, config: dict[str, Any],
            stop_at_return: float | None = None) -> dict[str, Any]:
    """metrics.csv and summary.json from SF2's summaries: one row per return summary, its
    ``wall_s`` from ``started_unix`` (this process's creation), its cost at that time; the
    summary at ``ended_s``, when SF2 had stopped."""
    log = _Replay(run_dir, config, log_interval_s=0.0, stop_at_return=stop_at_return)
    # SF2 writes the two in the same pass: a length belongs to the return written with it
    lengths = scalars[LENGTH_TAG]
    last = None
    for wall, step, ret in scalars[RETURN_TAG]:
        log.now = max(0.0, wall - started_unix)
        log.env_steps = step
        length = next((v for w, n, v in lengths if n == step and abs(w - wall) < 0.5), None)
        if length is not None:
            log.lengths = deque([int(round(length))])
        log.row(force=True, episodic_return=ret)
        last = ret
    if last is not None:
        log.returns = deque([last])
    log.now = max(log.now, ended_s)
    return log.close({"mode": "sf2", "backend": "sample-factory", "env": config["env"],
                      "system": "sf2"})


def train(env_id: str, seed: int, out_dir: str | os.PathLike[str], minutes: float,
          stop_at_return: float | None = None, async_rl: bool = False) -> dict[str, Any]:
    if env_id not in SF2_ENVS:
        raise ValueError(f"SF2's MuJoCo example has no counterpart for {env_id}")
    started_unix = time.time() - since_process_start()
    run_dir = Path(out_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    train_dir = run_dir / "sf2_train"
    shutil.rmtree(train_dir, ignore_errors=True)
    python = VENV / "bin" / "python"
    if not python.exists():
        raise FileNotFoundError(f"{python}: make the SF2 venv first: bash {MAKE_VENV}")
    budget_s = minutes * 60
    cmd = sf2_command(python, env_id, seed, train_dir, budget_s - since_process_start(), async_rl)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    with open(run_dir / "sf2.log", "w") as fh:
        proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, env=env,
                                start_new_session=True)
        reached = False
        while proc.poll() is None:
            time.sleep(POLL_S)
            if stop_at_return is not None and any(
                    v >= stop_at_return for _, _, v in read_scalars(train_dir)[RETURN_TAG]):
                reached = True
            if reached or since_process_start() >= budget_s:
                _stop(proc)
    ended_s = since_process_start()
    config = {"system": "sf2", "env": env_id, "sf2_env": SF2_ENVS[env_id][1], "seed": seed,
              "minutes": minutes, "num_workers": WORKERS, "async_rl": async_rl,
              "stop_at_return": stop_at_return, "mode": "sf2", "backend": "sample-factory",
              "command": cmd, "rc": proc.returncode,
              "env_note": f"SF2 ran {SF2_ENVS[env_id][1]} (gymnasium 0.29, MuJoCo 2.3.3), "
                          f"not {env_id}: see benchmarks/sf2_appo.py"}
    return convert(read_scalars(train_dir), started_unix, ended_s, run_dir, config,
                   stop_at_return)


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """SIGINT to SF2's process group (it stops its workers and saves), then SIGKILL."""
    try:
        os.killpg(proc.pid, signal.SIGINT)
        proc.wait(timeout=STOP_GRACE_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    except ProcessLookupError:
        pass


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--env", default="Hopper-v5", choices=sorted(SF2_ENVS),
                   help="our env id (SF2 runs its v4 counterpart)")
    p.add_argument("--seed", type=int, default=1, help="SF2's --seed")
    p.add_argument("--minutes", type=float, required=True,
                   help="wall-clock budget from this process's start")
    p.add_argument("--stop-at-return", type=float,
                   help="also stop once SF2's mean return (last 100 episodes) reaches this")
    p.add_argument("--async-rl", action="store_true",
                   help="SF2's asynchronous mode (its MuJoCo example runs sync: async_rl=False)")
    p.add_argument("--make-venv", action="store_true",
                   help="run scripts/make_sf2_venv.sh first (its time counts against the clock)")
    p.add_argument("--out", required=True, help="run folder")
    a = p.parse_args(argv)
    if a.make_venv:
        ensure_venv()
    s = train(a.env, a.seed, a.out, a.minutes, a.stop_at_return, a.async_rl)
    print(f"SF2 APPO {a.env} seed {a.seed}: {s['env_steps']} steps in {s['wall_s']:.1f} s "
          f"({s['sps']:.0f}/s), return {s['mean_return']}, ${s['cost']['total_usd']:.6f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
