"""The policies the other learners hold, for IS truncation's minimum over every version in
flight (docs/algorithm.md#ratios-and-is-truncation).

Given as ``versions_in_flight`` by the orchestrator, or — among several gradient-streaming
learners — read live: the versions the others hold now, renewed with each gradient the
writer sends (:class:`functions.gradient_writer.GradientWriter`).
"""

from __future__ import annotations

import math

import torch

from functions.batch import Flat
from functions.policy import ActorCritic, build_policy, load_policy_tensors
from store import RunStore
from store.errors import VersionNotFound


class OtherPolicies:
    """The policies of the versions other learners hold, for IS truncation's minimum.

    Modules are kept by version while they are held and loaded when a new one appears; a
    version the store no longer has is counted in ``missing``, never skipped silently.
    """

    def __init__(self, rs: RunStore, device: torch.device, live: bool = False) -> None:
        self.rs, self.device, self.live = rs, device, live
        self.models: dict[int, ActorCritic] = {}
        self.used: set[int] = set()
        self.missing: set[int] = set()
        self.asked: set[int] = set()  # the versions of the last update, found or not
        self._spare: list[ActorCritic] = []

    def update(self, versions: list[int] | set[int], exclude: int | None) -> list[ActorCritic]:
        """The modules of ``versions`` (but ``exclude``: ``r_self`` covers the version this
        learner holds), loading the ones not cached."""
        self.asked = {int(v) for v in versions}
        want = sorted(self.asked - ({exclude} if exclude is not None else set()))
        for v in [v for v in self.models if v not in want]:
            self._spare.append(self.models.pop(v))  # its module takes the next version's numbers
        out = []
        for v in want:
            if v not in self.models:
                try:
                    snap = self.rs.params.get(v)
                except VersionNotFound:
                    # gone because its learner moved on since we read the holds: not held,
                    # not missing; gone while still held: missing, and counted
                    if not self.live or v in self.rs.params.held().values():
                        self.missing.add(v)
                    continue
                m = self._spare.pop() if self._spare else build_policy(snap.meta).to(
                    self.device).eval()
                load_policy_tensors(m, snap.tensors)
                self.models[v] = m
            self.used.add(v)
            out.append(self.models[v])
        return out


@torch.no_grad()
def min_logratio_others(others: list[ActorCritic], batch: Flat,
                        idx: torch.Tensor | None = None) -> torch.Tensor:
    """``[B, 1]`` (or the rows ``idx``): ``min_i log(pi_i / mu)`` over ``others`` (+inf with
    none, which the truncation's minimum ignores). One column whatever their number, so a
    compiled loss keeps one graph while learners come and go."""
    obs, actions, logprobs = ((batch.obs, batch.actions, batch.logprobs) if idx is None else
                              (batch.obs[idx], batch.actions[idx], batch.logprobs[idx]))
    out = torch.full((len(obs), 1), math.inf, device=obs.device)
    for m in others:
        lr = m.log_prob_entropy(obs, actions)[0] - logprobs
        out = torch.minimum(out, lr.unsqueeze(-1))
    return out

