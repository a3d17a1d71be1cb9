"""Update mode (sync rounds; async with ``learner_publishes``): the update's Adam steps taken
here, then ``target_version`` published.

It starts from the latest version and the Adam state kept in the store, runs the update's
epochs (:func:`functions.epochs.run_epochs`), one Adam step per minibatch, and publishes the
weights with the Adam moments in one store step (docs/decisions.md#learner-publishes). With
``previews`` (async) the weights after each epoch but the last are stored as a preview of
the version, which refreshing actors sample with meanwhile
(docs/decisions.md#learner-previews).
"""

from __future__ import annotations

import time
from typing import Any

import redis
import torch

from functions.adam import ADAM_EPS, OPTIMIZER_STATE, FlatAdam
from functions.batch import Rollouts, build_batch, explained_variance
from functions.epochs import run_epochs
from functions.events import LearnerEvent
from functions.normalizer import RunningMeanStd
from functions.policy import ActorCritic, policy_meta
from functions.policy import policy_tensors as to_tensors
from functions.step import make_step
from functions.warm import CachedPolicy, PolicyCache
from store import RunStore
from store.errors import StoreError


class StalePublish(RuntimeError):
    """Update mode's target version is not above the latest published one."""


def load_adam(rs: RunStore, model: ActorCritic, lr: float,
              betas: tuple[float, float] = (0.9, 0.999)) -> FlatAdam:
    """Adam over ``model`` with the moments the last published version left in the store."""
    adam = FlatAdam(model, lr=lr, eps=ADAM_EPS, betas=betas)
    saved = rs.get_state(OPTIMIZER_STATE)
    if saved is not None:
        adam.load_state_arrays(saved[0])
    return adam


class _Previews:
    """``on_epoch``: the weights so far stored as a preview of the version being made."""

    def __init__(self, ev: LearnerEvent, rs: RunStore, model: ActorCritic, start_version: int,
                 obs_rms: RunningMeanStd, ret_rms: RunningMeanStd) -> None:
        self.ev, self.rs, self.model, self.start_version = ev, rs, model, start_version
        self.obs_rms, self.ret_rms = obs_rms, ret_rms
        self.on, self.stored, self.seconds = ev.previews, 0, 0.0

    def __call__(self, epoch: int) -> None:
        if not (epoch and self.on):
            return
        # Async actors sample on while this update runs: give them its weights so far (the
        # store drops it if start_version is no longer the latest).
        tp = time.perf_counter()
        try:
            self.stored += self.rs.params.publish_preview(
                self.start_version, epoch, self.ev.hyper.update_epochs, self.ev.invocation_id,
                to_tensors(self.model, self.obs_rms, self.ret_rms), policy_meta(self.model))
        except StoreError:
            self.on = False  # only a fresher behaviour policy: never fail the update
        self.seconds += time.perf_counter() - tp


def update_mode(ev: LearnerEvent, rs: RunStore, pol: CachedPolicy, groups: list[Rollouts],
                others: list[ActorCritic], gen: torch.Generator,
                policies: PolicyCache) -> dict[str, Any]:
    """One invocation's update, published as ``ev.target_version``; the result fields."""
    hyper = ev.hyper
    model, start_version = pol.model, pol.version
    target = int(ev.target_version or 0)
    adam = load_adam(rs, model, hyper.learning_rate, ev.master_adam_betas)
    batch = build_batch(model, groups, hyper, others)
    explained = explained_variance(batch)
    step = make_step(hyper, model, batch, compile=ev.compile, cuda_graph=ev.cuda_graph,
                     adam=adam)
    obs_rms = RunningMeanStd.from_dict(ev.obs_stats) if ev.obs_stats else pol.obs_rms
    ret_rms = RunningMeanStd.from_dict(ev.ret_stats) if ev.ret_stats else pol.ret_rms
    previews = _Previews(ev, rs, model, start_version, obs_rms, ret_rms)
    done = run_epochs(hyper, batch, gen, lambda b, mb: step(model, b, mb.on_device),
                      step.stats, rebuild=lambda: build_batch(model, groups, hyper, others),
                      on_epoch=previews, index_device=step.index_device)
    adam.zero_grad()

    tw = time.perf_counter()
    try:
        rs.params.publish(target, to_tensors(model, obs_rms, ret_rms), policy_meta(model),
                          state=(OPTIMIZER_STATE, adam.state_arrays(), {"version": target}))
    except redis.ResponseError as exc:
        raise StalePublish(
            f"cannot publish version {target} of run {rs.run_id!r}: {exc}") from exc
    policies.set_version(rs, target, obs_rms, ret_rms)
    out: dict[str, Any] = step.result()
    out["losses/explained_variance"] = explained
    out["compiled"] = step.compiled
    out["fused_steps"] = step.fused_steps
    out["cuda_graph_replays"] = step.replays
    out["losses/update_epochs"] = done.epochs
    out.update({"published_version": target, "optimizer_steps": done.minibatches,
                "gradients": 0, "versions_used": [start_version],
                "previews": previews.stored,
                "_write_s": time.perf_counter() - tw + previews.seconds})
    return out
