"""A lean single-process PPO: the overhead-free reference for the Stellaris benchmarks.

CleanRL ``ppo_continuous_action`` style, in one process with no functions, no store and no
threads: sample ``n_envs x rollout_steps`` with the current policy, merge the rollout's
observation/return statistics into the normalisers, then ``update_epochs x num_minibatches``
Adam steps, and repeat. It runs *the same code* as Stellaris wherever that makes sense: the
actor's ``rollout`` (vector env, obs normalisation, reward scaling, bootstrap on truncation),
the learner's batch building (GAE / V-trace), epoch loop and minibatch step (those of an
update-mode learner), the same ``ActorCritic`` and ``RunningMeanStd`` and ``PPOHyper``
defaults. So any difference to Stellaris is system, not maths.

    python benchmarks/lean_ppo.py --env Hopper-v5 --minutes 2 --seed 1 --out benchmarks/out/lean
    python benchmarks/lean_ppo.py --two-core --env Hopper-v5 --minutes 2 --seed 1 --out benchmarks/out/lean2

``--two-core`` (``lean2``): the same PPO update, with sampling in a second process
(:mod:`benchmarks.lean_sampler`) overlapped with learning, one rollout ahead at most — the
one-core ``--lag 1`` pipeline on two cores, so what overlap buys is measured at equal cores.
The clock starts at the process's start (:mod:`benchmarks._common`), compilation included.

Writes ``metrics.csv`` / ``config.json`` / ``summary.json`` like ``stellaris train``; cost is
serverful (one 2-vCPU instance for the whole wall time).
"""

from __future__ import annotations

import argparse
import copy
import importlib
import os
import sys
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

os.environ.setdefault("OMP_NUM_THREADS", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402
import torch  # noqa: E402

from benchmarks._common import RunLog  # noqa: E402
from benchmarks.lean_sampler import RemoteSampler  # noqa: E402
from functions.actor import rollout  # noqa: E402
from functions.adam import ADAM_EPS, FlatAdam  # noqa: E402
from functions.batch import Flat, build_batch, explained_variance, group_rollouts  # noqa: E402
from functions.compiled import MinibatchLoss, Stats, clipped_grad  # noqa: E402
from functions.envs import WarmEnv  # noqa: E402
from functions.epochs import Minibatch, run_epochs  # noqa: E402
from functions.events import ActorEvent  # noqa: E402
from functions.hyper import PolicySpec, PPOHyper, env_hyper  # noqa: E402
from functions.normalizer import RunningMeanStd  # noqa: E402
from functions.policy import flatten_parameters, init_policy, load_policy_tensors  # noqa: E402
from functions.ppo import annealed_lr  # noqa: E402
from functions.step import make_step  # noqa: E402
from functions.warm import CachedPolicy  # noqa: E402
from functions.wire import Trajectory  # noqa: E402
from orchestrator.cli import parse_set  # noqa: E402
from orchestrator.master import OPTIMIZER_PREFIX  # noqa: E402
from runtime.spawner import DEFAULT_PRELOAD  # noqa: E402
from store import decode  # noqa: E402


def train(env_id: str, seed: int, out_dir: str | os.PathLike[str], minutes: float | None = None,
          total_steps: int | None = None, n_envs: int = 8, rollout_steps: int = 256,
          hyper: PPOHyper | None = None, spec: PolicySpec | None = None,
          log_interval_s: float = 2.0, lag: int = 0, grad_delay: int = 0,
          adam_beta1: float = 0.9, compile: bool = True, publish_epoch: int | None = None,
          stop_at_return: float | None = None,
          init_from: str | os.PathLike[str] | None = None,
          two_core: bool = False) -> dict[str, Any]:
    """Train for ``minutes`` of wall clock (and/or ``total_steps``); returns the summary.

    ``lag`` emulates a pipeline in one process: each PPO update learns from the rollout
    sampled ``lag`` updates earlier (with the policy of that time), as an async learner does
    while the actors sample the next batch. It isolates the *algorithmic* cost of stale data
    (env steps to a return) from any system effect; ``lag=0`` is plain PPO. ``grad_delay``
    computes each minibatch's gradient at the weights of that many Adam steps earlier and
    applies it to the current ones: the gradient staleness of the aggregator's pipeline.
    ``compile``: the minibatch step through torch.compile, as Stellaris' learners do by
    default (``learner_compile``), so the reference is not slower for want of it.
    ``publish_epoch`` (with ``lag=0``): each rollout is sampled with the weights the previous
    update had after this many of its epochs — a pipeline whose actors start sampling batch
    k+1 once the learner is that far into batch k, so the data is a *fraction* of an update
    old (``update_epochs``: no lag; 0: one whole update, like ``lag=1`` without the queue).
    """
    if minutes is None and total_steps is None:
        raise ValueError("give a budget: minutes or total_steps")
    if publish_epoch is not None and lag:
        raise ValueError("publish_epoch is a lag of its own: use it with lag=0")
    if two_core and (lag or grad_delay or publish_epoch is not None):
        raise ValueError("two_core is a pipeline of its own: no lag, grad_delay or publish_epoch")
    hyper = hyper or env_hyper(env_id)
    spec = spec or PolicySpec()
    torch.set_num_threads(1)
    torch.manual_seed(seed)
    np.random.seed(seed)

    t_setup = time.perf_counter()
    if compile:
        # The modules Stellaris' runtime zygote imports (torch's compiler stack among them),
        # the same list so the two cannot drift apart; on the clock, which starts at the
        # process's start for every system.
        for module in DEFAULT_PRELOAD:
            importlib.import_module(module)
    model, _ = init_policy(env_id, spec, seed)
    adam = FlatAdam(model, lr=hyper.learning_rate, eps=ADAM_EPS, betas=(adam_beta1, 0.999))
    # two_core: the envs live in the sampler process, started now so its start-up overlaps ours
    remote = RemoteSampler(env_id, n_envs, rollout_steps, seed, hyper.gamma) if two_core else None
    wenv = None if two_core else WarmEnv(env_id, n_envs, seed)
    obs_rms, ret_rms = RunningMeanStd((model.obs_dim,)), RunningMeanStd(())
    if init_from is not None:
        tensors, _ = decode(Path(init_from).read_bytes())
        obs_rms, ret_rms = load_policy_tensors(model, tensors)
        if not adam.load_state_arrays(tensors, prefix=OPTIMIZER_PREFIX):
            raise ValueError(f"{init_from} holds no Adam moments for this policy")
    # the actor's own policy type, so the rollout is the actor's code path exactly
    pol = CachedPolicy(0, model, obs_rms, ret_rms, {})
    gen = torch.Generator()
    gen.manual_seed(seed)
    setup_s = time.perf_counter() - t_setup  # (the imports before it are on the clock too)

    config = {"system": "lean2" if two_core else "lean", "env": env_id, "seed": seed, "minutes": minutes,
              "total_steps": total_steps, "n_envs": n_envs, "rollout_steps": rollout_steps,
              "hyper": hyper.model_dump(), "policy": spec.model_dump(), "mode": "lean",
              "lag": lag, "grad_delay": grad_delay, "adam_beta1": adam_beta1,
              "publish_epoch": publish_epoch,
              "compile": compile, "backend": "single-process", "stop_at_return": stop_at_return,
              "init_from": None if init_from is None else str(init_from), "two_core": two_core}
    log = RunLog(out_dir, config, log_interval_s, stop_at_return=stop_at_return)
    budget_s = minutes * 60 if minutes is not None else float("inf")
    t_sample = t_learn = 0.0
    stats: dict[str, float] = {}
    it = 0
    queue: deque[Any] = deque()  # rollouts sampled, not yet learned (``lag`` of them)
    delayed = _DelayedGradients(model, adam, hyper, compile, grad_delay) if grad_delay else None
    # publish_epoch: the actors sample with a copy, set part-way through each update
    sampler = pol
    if publish_epoch is not None:
        sampler = CachedPolicy(0, copy.deepcopy(model), pol.obs_rms, pol.ret_rms, {})
        sample_flat, _ = flatten_parameters(sampler.model)

    if remote is not None:
        remote.publish(pol.version, model, pol.obs_rms, pol.ret_rms)

    def publish(epoch: int) -> None:  # the actors' next rollout starts from here
        if epoch == publish_epoch:
            with torch.no_grad():
                sample_flat.copy_(adam.flat)
            sampler.version = pol.version

    while log.running(budget_s, total_steps):
        it += 1
        t0 = time.perf_counter()
        ev = ActorEvent(run_id="lean", env_id=env_id, n_envs=n_envs, steps=rollout_steps,
                        seed=seed, gamma=hyper.gamma, invocation_id=f"lean-{it}")
        traj = remote.next_rollout() if remote is not None else rollout(wenv, sampler, ev)
        # The rollout was sampled with the current statistics; fold its own into the next
        # version's (as the orchestrator does with an actor's report).
        for rms, st in ((pol.obs_rms, traj.obs_stats), (pol.ret_rms, traj.ret_stats)):
            if st["count"] > 0:
                rms.merge(st["count"], st["mean"], st["var"])
        log.env_steps += n_envs * rollout_steps
        log.episodes_done(traj.episode_returns, traj.episode_lengths)
        t1 = time.perf_counter()
        queue.append(traj)
        if len(queue) <= lag:
            t_sample += t1 - t0
            continue
        traj = queue.popleft()

        if hyper.anneal_lr:  # as the orchestrator's learner_hyper(): the budget used so far
            used = max(log.env_steps / total_steps if total_steps else 0.0,
                       log.wall() / budget_s)
            adam.set_lr(annealed_lr(hyper.learning_rate, used))
        stats = _update(model, adam, traj, hyper, gen, compile, delayed,
                        publish if publish_epoch is not None else None)
        pol.version += 1
        log.version = pol.version
        if remote is not None:  # the sampler's next rollout but one samples with these
            remote.publish(pol.version, model, pol.obs_rms, pol.ret_rms)
        if publish_epoch is not None and publish_epoch >= stats["losses/update_epochs"]:
            publish(publish_epoch)  # not reached: published after the whole update, no lag
        stats["charts/learning_rate"] = adam.lr
        t2 = time.perf_counter()
        t_sample += t1 - t0
        t_learn += t2 - t1
        log.row(stats)
    if remote is not None:
        remote.close()
    else:
        wenv.close()
    return log.close({
        "mode": "lean", "backend": "two-process" if two_core else "single-process",
        "env": env_id, "setup_s": setup_s,
        "timings": {"sample_s": t_sample, "learn_s": t_learn},
    })


def _update(model: torch.nn.Module, adam: FlatAdam, traj: Trajectory, hyper: PPOHyper,
            gen: torch.Generator, compile: bool, delayed: _DelayedGradients | None,
            on_epoch: Callable[[int], None] | None) -> dict[str, float]:
    """One PPO update on ``traj`` (the sync learner's, functions/update_mode.py, in one
    process); its ``losses/*`` statistics."""
    groups = group_rollouts([traj], torch.device("cpu"))
    batch = build_batch(model, groups, hyper, [])
    step = make_step(hyper, model, batch, compile=compile, adam=adam)
    sums = delayed.start() if delayed is not None else step.stats
    done = run_epochs(hyper, batch, gen,
                      delayed if delayed is not None else lambda b, mb: step(model, b, mb.idx),
                      sums, rebuild=lambda: build_batch(model, groups, hyper, []),
                      on_epoch=on_epoch)
    stats = sums.result()
    stats["losses/explained_variance"] = explained_variance(batch)
    stats["losses/update_epochs"] = done.epochs
    return stats


class _DelayedGradients:
    """``grad_delay``: each minibatch's gradient taken at the weights of ``delay`` Adam steps
    earlier (a copy of the module), applied to the current ones."""

    def __init__(self, model: torch.nn.Module, adam: FlatAdam, hyper: PPOHyper, compile: bool,
                 delay: int) -> None:
        self.adam, self.max_grad_norm = adam, hyper.max_grad_norm
        self.loss = MinibatchLoss(hyper, compile)
        self.stale_model = copy.deepcopy(model)
        self.stale = FlatAdam(self.stale_model, lr=0.0, eps=ADAM_EPS)  # its views
        # the weights of the last delay + 1 steps; gradients are taken at the oldest
        self.history: deque[torch.Tensor] = deque(maxlen=delay + 1)
        self.sums = Stats()

    def start(self) -> Stats:
        """A new update's statistics."""
        self.sums = Stats()
        return self.sums

    def __call__(self, batch: Flat, mb: Minibatch) -> None:
        self.history.append(self.adam.flat.detach().clone())
        self.stale.flat.data.copy_(self.history[0])
        grad, stats = clipped_grad(self.loss, self.stale_model, self.stale.params, batch, mb.idx,
                                   self.max_grad_norm)
        self.adam.step(grad)
        self.sums.add(stats)


def _hyper(env_id: str, is_correction: str | None, pairs: list[str]) -> PPOHyper:
    fields = parse_set(pairs)  # KEY=VALUE, values parsed as JSON where they can be
    if is_correction:
        fields["is_correction"] = is_correction
    return env_hyper(env_id, **fields)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--env", default="Hopper-v5")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--minutes", type=float)
    p.add_argument("--total-steps", type=int)
    p.add_argument("--n-envs", type=int, default=8)
    p.add_argument("--rollout-steps", type=int, default=256)
    p.add_argument("--is-correction", choices=["none", "truncate", "vtrace", "decoupled"],
                   help="default: PPOHyper's, the same as Stellaris'")
    p.add_argument("--hyper", action="append", default=[], metavar="KEY=VALUE",
                   help="a PPOHyper field, e.g. --hyper gae_values=learner (repeatable)")
    p.add_argument("--lag", type=int, default=0,
                   help="learn from the rollout sampled this many updates earlier (pipeline emulation)")
    p.add_argument("--grad-delay", type=int, default=0,
                   help="take each gradient at the weights of this many Adam steps earlier")
    p.add_argument("--adam-beta1", type=float, default=0.9, help="Adam's momentum coefficient")
    p.add_argument("--publish-epoch", type=int,
                   help="sample each rollout with the weights the previous update had after "
                        "this many epochs (a fraction of an update of lag)")
    p.add_argument("--no-compile", action="store_true",
                   help="eager minibatch loss (default: torch.compile, as Stellaris' learners)")
    p.add_argument("--stop-at-return", type=float,
                   help="also stop once a logged mean return (last 100 episodes) reaches this")
    p.add_argument("--init-from", help="start from this Stellaris checkpoint file")
    p.add_argument("--two-core", action="store_true",
                   help="lean2: sample in a second process, overlapped with learning (one "
                   "rollout of lag at most)")
    p.add_argument("--out", required=True, help="run folder")
    a = p.parse_args(argv)
    if a.minutes is None and a.total_steps is None:
        p.error("give --minutes or --total-steps")
    s = train(a.env, a.seed, a.out, a.minutes, a.total_steps, a.n_envs, a.rollout_steps,
              _hyper(a.env, a.is_correction, a.hyper), lag=a.lag,
              grad_delay=a.grad_delay, adam_beta1=a.adam_beta1,
              compile=not a.no_compile, publish_epoch=a.publish_epoch, stop_at_return=a.stop_at_return,
              init_from=a.init_from, two_core=a.two_core)
    print(f"lean PPO{' (two cores)' if a.two_core else ''} {a.env} seed {a.seed}: {s['env_steps']} steps in {s['wall_s']:.1f} s "
          f"({s['sps']:.0f}/s), return {s['mean_return']}, ${s['cost']['total_usd']:.6f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
