"""The orchestrator's master copy of the policy: parameters, Adam state, normaliser statistics.

In async mode it is the only writer of versions: one Adam step per aggregation, then publish.
Observation/return statistics reported by actors are merged here (parallel-variance formula)
and published with the next version, so a cold actor never starts from zero.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from functions.learner import ADAM_EPS, OPTIMIZER_STATE, adam_state_tensors, load_adam_state
from functions.messages import PolicySpec
from functions.normalizer import RunningMeanStd
from functions.policy import init_policy, load_policy_tensors, policy_meta, policy_tensors
from store import RunStore

_OPT_PREFIX = "optim."


class MasterPolicy:
    def __init__(self, env_id: str, spec: PolicySpec, seed: int, learning_rate: float) -> None:
        self.model, _ = init_policy(env_id, spec, seed)
        # foreach: one fused pass over the parameter list (about 2x faster on CPU for a small
        # MLP); the aggregator takes one step per gradient, so this is on the hot path.
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=learning_rate, eps=ADAM_EPS,
                                          foreach=True)
        self.obs_rms = RunningMeanStd((self.model.obs_dim,))
        self.ret_rms = RunningMeanStd(())
        self.version = 0
        self.published_version = -1  # the newest version the store has from us
        self._params = dict(self.model.named_parameters())
        self.meta = policy_meta(self.model)

    # -- learning -------------------------------------------------------------------------------
    def apply(self, grads: Mapping[str, np.ndarray]) -> None:
        """One Adam step with an aggregated gradient; the version moves on by one."""
        missing = set(self._params) - set(grads)
        if missing:
            raise ValueError(f"aggregated gradient lacks parameters {sorted(missing)}")
        for name, p in self._params.items():
            g = np.asarray(grads[name], dtype=np.float32)
            if g.shape != tuple(p.shape):
                raise ValueError(f"gradient {name!r} has shape {g.shape}, expected {tuple(p.shape)}")
            p.grad = torch.from_numpy(np.array(g, copy=True))
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.version += 1

    def merge_stats(self, obs_stats: Mapping[str, Any] | None, ret_stats: Mapping[str, Any] | None) -> None:
        for rms, stats in ((self.obs_rms, obs_stats), (self.ret_rms, ret_stats)):
            if stats and float(stats.get("count", 0)) > 0:
                rms.merge(float(stats["count"]), stats["mean"], stats["var"])

    # -- the store ------------------------------------------------------------------------------
    def tensors(self) -> dict[str, np.ndarray]:
        return policy_tensors(self.model, self.obs_rms, self.ret_rms)

    def publish(self, rs: RunStore, allow_rewind: bool = False) -> None:
        rs.params.publish(self.version, self.tensors(), self.meta, allow_rewind=allow_rewind)
        self.published_version = self.version

    def adopt_latest(self, rs: RunStore) -> None:
        """Take the store's latest version as the master (sync mode: the learner publishes)."""
        snap = rs.params.latest()
        self.obs_rms, self.ret_rms = load_policy_tensors(self.model, snap.tensors)
        self.version = self.published_version = snap.version
        state = rs.get_state(OPTIMIZER_STATE)
        if state is not None:
            load_adam_state(self.optimizer, self.model, state[0])

    # -- checkpoints ----------------------------------------------------------------------------
    def state_tensors(self) -> dict[str, np.ndarray]:
        out = self.tensors()
        out.update({f"{_OPT_PREFIX}{k}": v for k, v in adam_state_tensors(self.model, self.optimizer).items()})
        return out

    def load_state(self, tensors: Mapping[str, np.ndarray], version: int) -> None:
        self.obs_rms, self.ret_rms = load_policy_tensors(self.model, tensors)
        load_adam_state(self.optimizer, self.model, tensors, prefix=_OPT_PREFIX)
        self.version = int(version)

    def optimizer_state(self) -> dict[str, np.ndarray]:
        return adam_state_tensors(self.model, self.optimizer)
