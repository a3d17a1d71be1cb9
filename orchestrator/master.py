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

from functions.adam import ADAM_EPS, OPTIMIZER_STATE, FlatAdam
from functions.hyper import PolicySpec
from functions.normalizer import RunningMeanStd
from functions.policy import (
    init_policy,
    load_policy_tensors,
    param_layout,
    policy_meta,
    rms_tensors,
)
from functions.wire import Layout
from store import RunStore

OPTIMIZER_PREFIX = "optim."  # the checkpoint keys of the Adam moments


class MasterPolicy:
    def __init__(self, env_id: str, spec: PolicySpec, seed: int, learning_rate: float,
                 adam_beta1: float = 0.9) -> None:
        self.model, _ = init_policy(env_id, spec, seed)
        self._named = dict(self.model.named_parameters())
        # Adam steps one flat vector the parameters are views into; the aggregator takes one
        # step per gradient. (Learners that look ahead take the same steps: functions/lookahead.py.)
        # fused: one CPU/CUDA kernel for the whole step (35 -> 23 us on this machine)
        self.adam = FlatAdam(self.model, lr=learning_rate, eps=ADAM_EPS, betas=(adam_beta1, 0.999))
        self.flat, self._slices, self.optimizer = self.adam.flat, self.adam.slices, self.adam.optimizer
        self.obs_rms = RunningMeanStd((self.model.obs_dim,))
        self.ret_rms = RunningMeanStd(())
        self.version = 0
        self.published_version = -1  # the newest version the store has from us
        self.meta = policy_meta(self.model)
        self.layout: Layout = param_layout(self.model)

    # -- learning -------------------------------------------------------------------------------
    def apply(self, grads: Mapping[str, np.ndarray] | np.ndarray,
              layout: Layout | None = None, lr: float | None = None) -> None:
        """One Adam step with an aggregated gradient; the version moves on by one.

        ``lr``: the rate to step with (an annealed run's, as the learners stepped their
        look-ahead with it); None keeps the last one.

        ``grads``: named arrays, or one flat vector in ``named_parameters()`` order — the
        aggregator's form, passed as is (no split and re-join per step); with its ``layout``
        it must describe exactly this policy's parameters.
        """
        if isinstance(grads, np.ndarray):
            if layout is not None and tuple(layout) != self.layout:
                raise ValueError(f"aggregated gradient's layout {list(layout)} does not match "
                                 f"the policy's {list(self.layout)}")
            flat = np.asarray(grads, dtype=np.float32).reshape(-1)
            if flat.size != self.flat.numel():
                raise ValueError(f"flat gradient has {flat.size} numbers, the policy has "
                                 f"{self.flat.numel()}")
            grad = torch.from_numpy(np.array(flat, copy=True))
        else:
            missing = set(self._named) - set(grads)
            if missing:
                raise ValueError(f"aggregated gradient lacks parameters {sorted(missing)}")
            grad = torch.empty_like(self.flat.data)
            for name, p in self._named.items():
                g = np.asarray(grads[name], dtype=np.float32)
                if g.shape != tuple(p.shape):
                    raise ValueError(f"gradient {name!r} has shape {g.shape}, expected {tuple(p.shape)}")
                grad[self._slices[name]] = torch.from_numpy(g.reshape(-1))
        if lr is not None:
            self.adam.set_lr(lr)
        self.adam.step(grad)
        self.version += 1

    def merge_stats(self, obs_stats: Mapping[str, Any] | None, ret_stats: Mapping[str, Any] | None) -> None:
        for rms, stats in ((self.obs_rms, obs_stats), (self.ret_rms, ret_stats)):
            if stats and float(stats.get("count", 0)) > 0:
                rms.merge(float(stats["count"]), stats["mean"], stats["var"])

    # -- the store ------------------------------------------------------------------------------
    def tensors(self) -> dict[str, np.ndarray]:
        # Views into the flat vector, no copies: the caller encodes them at once, under the
        # trainer's lock, before the next Adam step can move them.
        flat = self.flat.detach().numpy()
        out = {name: flat[sl].reshape(self._named[name].shape) for name, sl in self._slices.items()}
        for prefix, rms in (("obs_rms", self.obs_rms), ("ret_rms", self.ret_rms)):
            for key, value in rms_tensors(rms).items():
                out[f"{prefix}.{key}"] = value
        return out

    def publish(self, rs: RunStore, allow_rewind: bool = False,
                applied: Mapping[str, tuple[int, int]] | None = None) -> None:
        """Publish the current version; ``applied``: lineage -> (seq, version) of the last
        gradient of each look-ahead learner applied since the previous publish."""
        rs.params.publish(self.version, self.tensors(), self.meta, allow_rewind=allow_rewind,
                          applied=applied)
        self.published_version = self.version

    def adopt_latest(self, rs: RunStore, keep_stats: bool = False) -> None:
        """Take the store's latest version as the master (the learner published it).

        ``keep_stats``: keep the master's normaliser statistics instead of the snapshot's —
        in async mode actors kept reporting theirs while the learner ran, and the snapshot
        has only what the learner was given.
        """
        snap = rs.params.latest()
        obs_rms, ret_rms = load_policy_tensors(self.model, snap.tensors)
        if not keep_stats:
            self.obs_rms, self.ret_rms = obs_rms, ret_rms
        self.version = self.published_version = snap.version
        state = rs.get_state(OPTIMIZER_STATE)
        if state is not None:
            self._load_optimizer_state(state[0])

    # -- checkpoints ----------------------------------------------------------------------------
    def state_tensors(self) -> dict[str, np.ndarray]:
        out = {k: np.array(v) for k, v in self.tensors().items()}
        out.update({f"{OPTIMIZER_PREFIX}{k}": v for k, v in self.optimizer_state().items()})
        return out

    def load_state(self, tensors: Mapping[str, np.ndarray], version: int) -> None:
        self.obs_rms, self.ret_rms = load_policy_tensors(self.model, tensors)
        self._load_optimizer_state(tensors, prefix=OPTIMIZER_PREFIX)
        self.version = int(version)

    def optimizer_state(self) -> dict[str, np.ndarray]:
        """Adam's moments per parameter name — the format the sync learner saves too."""
        return self.adam.state_arrays()

    def _load_optimizer_state(self, arrays: Mapping[str, np.ndarray], prefix: str = "") -> bool:
        """Install per-name Adam moments (all or nothing)."""
        return self.adam.load_state_arrays(arrays, prefix=prefix)
