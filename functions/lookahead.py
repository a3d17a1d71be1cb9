"""A learner's look-ahead: compute each gradient at the weights the master will apply it to.

The master applies a learner's gradients one Adam step each, a few versions after the learner
computed them — the writer's queue, the stream and the aggregator's batching window sit in
between (~5 versions on Hopper on two cores). The lag emulation measured what that costs:
with gradients 3-6 versions stale PPO reached 35-50% less return at 400k env steps, and Adam's
momentum only took part of it back (docs/decisions.md#learner-lookahead).

A learner that looks ahead applies every gradient it sends to its own copy of the policy with
the master's optimizer (the same fused Adam, lr, betas and eps) and computes the next
gradient there, tagged with the version the master will be at when it applies it
(``version_used``). The master stays the only writer of versions; the learner only chooses
*where* to take its next gradient. With one learner the prediction is exact (same numbers,
same kernel): staleness 0 at the cost of one fused Adam step per minibatch.

The prediction is checked, not trusted: each publish records, per learner *lineage* (one
per warm process), the last gradient it applied and the version that produced
(``params:applied``). When that disagrees with the prediction — another learner's gradients
in between, a dropped or de-duplicated one, a republished checkpoint — the learner rebases:
the master's weights plus its own steps the master has not applied yet. It also rebases at
the start of every invocation, which bounds any drift (Adam moments of a cold learner) to
one batch. A warm process keeps its look-ahead per run (:data:`LOOKAHEADS`), so its
unconfirmed steps carry over to the next invocation.
"""

from __future__ import annotations

import threading
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from functions.adam import ADAM_EPS, adam_step
from functions.normalizer import RunningMeanStd
from functions.policy import ActorCritic, build_policy, flatten_parameters, load_policy_tensors
from functions.warm import CachedPolicy, same_shape
from store import Applied, PolicySnapshot, RunStore

MAX_UNCONFIRMED = 1024  # bound on memory if the master stops confirming (one vector each)


@dataclass
class _Sent:
    seq: int
    version: int  # the master version this gradient is predicted to be applied at
    before: torch.Tensor  # the local weights before its local step


class Lookahead:
    """Local weights = the master's latest + this learner's gradients it has not applied yet."""

    def __init__(self, model: ActorCritic, version: int, lr: float,
                 betas: tuple[float, float], eps: float, meta: dict[str, Any] | None = None) -> None:
        self.model = model
        self.meta = dict(meta or {})  # the policy meta the module was built from
        self.flat, _ = flatten_parameters(model)
        self.optimizer = torch.optim.Adam([self.flat], lr=lr, betas=betas, eps=eps, fused=True)
        # what must match the master's Adam for the prediction to hold; the rate may move
        # between invocations (an annealed run): :meth:`set_lr`, moments kept
        self.hyper = (tuple(betas), eps)
        self.lr = float(lr)
        self.lineage = uuid.uuid4().hex[:16]
        self.version = int(version)  # the master version the local weights predict
        self.seq = 0  # of the last gradient sent
        self.sent: deque[_Sent] = deque()
        self.rebases = 0

    def set_lr(self, lr: float) -> None:
        """The rate of this invocation's steps; its gradients carry it to the master."""
        self.lr = float(lr)
        self.optimizer.param_groups[0]["lr"] = self.lr

    def step(self, flat_grad: torch.Tensor) -> tuple[int, int]:
        """Apply a gradient about to be sent as the master will; returns (seq, version_used)."""
        self.seq += 1
        sent = _Sent(self.seq, self.version, self.flat.detach().clone())
        self.sent.append(sent)
        while len(self.sent) > MAX_UNCONFIRMED:
            self.sent.popleft()  # its step stays in the weights; the next rebase keeps it
        adam_step(self.optimizer, self.flat, flat_grad.to(self.flat.device, self.flat.dtype))
        self.version += 1
        return sent.seq, sent.version

    def confirm(self, applied: Applied) -> bool:
        """Forget the gradients the master has applied; False when it applied the last of
        them at another version than predicted."""
        ok = True
        if applied.seq is not None:
            while self.sent and self.sent[0].seq <= applied.seq:
                sent = self.sent.popleft()
                if sent.seq == applied.seq:
                    ok = sent.version + 1 == applied.version
        return ok

    def diverged(self, applied: Applied) -> bool:
        """Confirm what ``applied`` reports; True when the master's weights are no longer the
        local ones minus the unconfirmed steps (then :meth:`rebase`)."""
        ok = self.confirm(applied)
        expected = self.sent[0].version if self.sent else self.version
        return not ok or applied.latest != expected

    def rebase(self, version: int, load_master_weights: Callable[[], object]) -> None:
        """Move onto the master's ``version``: ``load_master_weights()`` copies its weights
        into the module (the views keep), then the unconfirmed steps are added back."""
        pending = self.flat.detach() - self.sent[0].before if self.sent else None
        load_master_weights()
        with torch.no_grad():
            if pending is not None:
                shift = self.flat.detach() - self.sent[0].before  # before any is shifted
                self.flat.add_(pending)
                for i, sent in enumerate(self.sent):
                    sent.before.add_(shift)
                    sent.version = int(version) + i
        self.version = int(version) + len(self.sent)
        self.rebases += 1


class LookaheadCache(threading.local):
    """Each thread's (each execution environment's) look-ahead per run, kept warm across
    invocations like the learner's policy cache, so a learner's unconfirmed steps carry over."""

    def __init__(self) -> None:
        self.entries: dict[tuple[str, str], Lookahead] = {}

    def get(self, rs: RunStore) -> Lookahead | None:
        return self.entries.get((rs.store.url, rs.run_id))

    def put(self, rs: RunStore, la: Lookahead) -> None:
        self.entries.pop((rs.store.url, rs.run_id), None)
        self.entries[(rs.store.url, rs.run_id)] = la
        while len(self.entries) > 2:
            self.entries.pop(next(iter(self.entries)))

    def drop(self, rs: RunStore) -> None:
        self.entries.pop((rs.store.url, rs.run_id), None)


LOOKAHEADS = LookaheadCache()


def lookahead_policy(rs: RunStore, lr: float, betas: tuple[float, float],
                     device: torch.device) -> tuple[CachedPolicy, Lookahead]:
    """The policy a look-ahead learner starts from: the master's latest plus this learner's
    steps the master has not applied yet (a fresh look-ahead when the process is cold)."""
    adam_hyper = (tuple(betas), ADAM_EPS)
    la = LOOKAHEADS.get(rs)
    if la is not None and (la.hyper != adam_hyper or la.flat.device.type != device.type):
        la = None
    snap, applied = rs.params.latest_with_applied(la.lineage if la else "-")
    if la is not None and not same_shape(la.meta, snap.meta):
        la = None
    if la is None:
        model = build_policy(snap.meta).to(device)
        obs_rms, ret_rms = load_policy_tensors(model, snap.tensors)
        la = Lookahead(model, snap.version, lr, *adam_hyper, meta=snap.meta)
    else:
        obs_rms, ret_rms = rebase(la, snap, applied)
        la.set_lr(lr)
    LOOKAHEADS.put(rs, la)
    return CachedPolicy(snap.version, la.model, obs_rms, ret_rms, dict(snap.meta)), la


def rebase(la: Lookahead, snap: PolicySnapshot,
           applied: Applied) -> tuple[RunningMeanStd, RunningMeanStd]:
    """Onto the master's ``snap`` (read with ``applied``, atomically); returns its normalisers."""
    la.confirm(applied)
    loaded: list[tuple[RunningMeanStd, RunningMeanStd]] = []
    la.rebase(snap.version, lambda: loaded.append(load_policy_tensors(la.model, snap.tensors)))
    return loaded[0]
