"""Gradient mode (the paper's learner): one gradient per minibatch, streamed to the master.

The update's epochs (:func:`functions.epochs.run_epochs`) with each minibatch's clipped
gradient sent as a :class:`~functions.wire.Gradient` (``gradients_per_message`` of them per
stream message), tagged with the version it was computed at and deduplicated by
``invocation:epoch:minibatch`` so a retried invocation cannot double-apply.

Before each minibatch the weights move on: with ``lookahead`` (functions/lookahead.py) each
gradient is applied locally with the master's Adam too, and the next one computed there,
tagged with the version the master will apply it at; without, the weights are refreshed
from the newest published version. Among several learners (``hold_lease_s``) IS truncation's
minimum is over the versions the other learners hold at that moment, as the writer last read
them.
"""

from __future__ import annotations

import time
from typing import Any

import torch

from functions.batch import Flat, Rollouts, build_batch, explained_variance
from functions.epochs import Minibatch, run_epochs
from functions.events import LearnerEvent
from functions.gradient_writer import GradientWriter
from functions.lookahead import Lookahead, rebase
from functions.other_policies import OtherPolicies, min_logratio_others
from functions.policy import ActorCritic, param_layout
from functions.step import make_step
from functions.warm import CachedPolicy, PolicyCache
from functions.wire import Gradient
from store import RunStore


class _Streamer:
    """What gradient mode does per minibatch: weights on, the others' versions on, one
    gradient computed and handed to the writer."""

    def __init__(self, ev: LearnerEvent, rs: RunStore, pol: CachedPolicy,
                 groups: list[Rollouts], others: list[ActorCritic], device: torch.device,
                 policies: PolicyCache, la: Lookahead | None,
                 pool: OtherPolicies | None) -> None:
        self.ev, self.rs, self.hyper, self.groups = ev, rs, ev.hyper, groups
        self.pol, self.model, self.others, self.device = pol, pol.model, others, device
        self.policies, self.la, self.pool = policies, la, pool
        self.live = pool is not None and pool.live  # the others' versions, read now
        self.others_held = set(pool.asked) if pool is not None else set()
        self.others_seen = self.minibatches = 0
        self.versions_used: list[int] = []
        self.layout = param_layout(self.model)
        self.batch = self.rebuild()
        # Graphed only with look-ahead: without it a newer version may rebuild the module
        # mid-invocation, and a graph holds on to the parameters it was captured with.
        self.step = make_step(self.hyper, self.model, self.batch, compile=ev.compile,
                              cuda_graph=ev.cuda_graph, fixed=la is not None)
        self.writer = GradientWriter(rs, pol.version, lineage=la.lineage if la else None,
                                     per_message=ev.gradients_per_message,
                                     holder=ev.invocation_id if self.live else None,
                                     lease_s=ev.hold_lease_s)

    def rebuild(self) -> Flat:
        batch = build_batch(self.model, self.groups, self.hyper, [] if self.live else self.others)
        if self.live:  # filled per minibatch with the others held then (_others_now)
            batch.logratio_others = min_logratio_others([], batch)
        return batch

    def _weights(self) -> int:
        """Pick up what the writer thread saw (no round trip); the version to compute at."""
        la = self.la
        if la is not None:
            applied = self.writer.take_applied()
            if applied is not None and la.diverged(applied):
                rebase(la, *self.rs.params.latest_with_applied(la.lineage))
            return la.version
        snap = self.writer.take_newest()
        if snap is not None and snap.version > self.pol.version:
            self.pol = self.policies.install(self.rs, snap, self.device)
            if self.pol.model is not self.model:  # rebuilt (new shape): new parameter objects
                self.model = self.pol.model
                self.layout = param_layout(self.model)
        return self.pol.version

    def _others_now(self, batch: Flat, mb: Minibatch) -> None:
        """The others' versions as read with the last write; the minibatch's log-ratios
        against them (only its rows: the others move every few minibatches)."""
        held = self.writer.take_others()
        if held is not None and set(held.values()) != self.others_held:
            self.others_held = set(held.values())
            assert self.pool is not None
            self.others = self.pool.update(self.others_held, exclude=None)
        idx = mb.on_device
        batch.logratio_others[idx] = min_logratio_others(self.others, batch, idx)
        self.others_seen += len(self.others)
        self.minibatches += 1

    def __call__(self, batch: Flat, mb: Minibatch) -> None:
        version_used = self._weights()
        if self.live:
            self._others_now(batch, mb)
        if not self.versions_used or self.versions_used[-1] != version_used:
            self.versions_used.append(version_used)
        # a fresh flat copy (the writer thread serialises it while the next backward runs),
        # or a graphed step's static buffer, copied off the device below
        flat_grad = self.step(self.model, batch, mb.on_device)
        assert flat_grad is not None
        seq = self.la.step(flat_grad)[0] if self.la is not None else None
        self.writer.submit(Gradient.from_flat(
            flat_grad.cpu().numpy(),
            self.layout,
            invocation_id=self.ev.invocation_id,
            epoch=mb.epoch,
            minibatch=mb.index,
            version_used=version_used,
            n_samples=int(mb.idx.numel()),
            behaviour_versions=sorted(set(batch.behaviour_version[mb.idx].tolist())),
            lineage=self.la.lineage if self.la is not None else None,
            seq=seq,
            lr=self.hyper.learning_rate,
        ))


def gradient_mode(ev: LearnerEvent, rs: RunStore, pol: CachedPolicy, groups: list[Rollouts],
                  others: list[ActorCritic], device: torch.device, gen: torch.Generator,
                  policies: PolicyCache, la: Lookahead | None = None,
                  pool: OtherPolicies | None = None) -> dict[str, Any]:
    """One invocation's update, its gradients streamed; the learner's result fields."""
    run = _Streamer(ev, rs, pol, groups, others, device, policies, la, pool)
    explained = explained_variance(run.batch)
    rebases_at_start = la.rebases if la else 0
    try:
        done = run_epochs(ev.hyper, run.batch, gen, run, run.step.stats, rebuild=run.rebuild,
                          index_device=run.step.index_device)
    except BaseException:
        run.writer.abort()
        raise
    tw = time.perf_counter()
    run.writer.close()
    run.model.zero_grad(set_to_none=True)
    out: dict[str, Any] = run.step.result()
    out["losses/explained_variance"] = explained
    out["compiled"] = run.step.compiled
    out["cuda_graph_replays"] = run.step.replays
    out["losses/update_epochs"] = done.epochs
    if run.live:
        # how many other learners' policies the truncation saw, per gradient on the mean
        out["is_others_mean"] = run.others_seen / max(run.minibatches, 1)
    out.update({"gradients": run.writer.written, "duplicates": run.writer.duplicates,
                "versions_used": sorted(set(run.versions_used)),
                "_write_s": time.perf_counter() - tw})
    if la is not None:
        out["lookahead_rebases"] = la.rebases - rebases_at_start
    return out
