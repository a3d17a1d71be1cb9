"""The nested sections of a run's config: the paper's aggregation and the experimental knobs.

Why each default is what it is: docs/decisions.md, one anchored entry per default.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator


class AggregationConfig(BaseModel):
    """The paper's staleness-aware aggregation of the learners' gradients (docs/algorithm.md)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    staleness_weights: bool = Field(
        True, description="Weight a gradient 1 (staleness <= v0) or 1/sqrt(staleness).")
    v0: int = Field(1, ge=0, description="Staleness up to which a gradient keeps weight 1.")
    buffer_max: int | None = Field(
        None, ge=1, description="H_max: aggregate once this many gradients are buffered "
        "(unset: learners).")
    bound_decay: bool = Field(
        True, description="Decay the staleness bound beta_k = max(1, delta_max * decay^k).")
    decay: float = Field(0.9, gt=0, le=1, description="d of beta_k, applied once per round.")
    warmup_rounds: int = Field(
        1, ge=0, description="Rounds (learner_batch_steps consumed each) of fully async "
        "aggregation that measure delta_max.")
    timeout_s: float = Field(
        2.0, gt=0, description="Aggregate whatever is buffered after waiting this long.")
    drop_staleness: int | None = Field(
        None, ge=1, description="delta_drop: drop (and count) gradients staler than this.")
    share_batch: bool = Field(
        True, description="Learners in flight share a round's batch and its minibatches: 1/"
        "learners of each per learner (decisions.md#share-batch).")

    def h_max(self, learners: int) -> int:
        """H_max resolved: ``buffer_max``, else one gradient per learner in flight."""
        return self.buffer_max or learners


class ExperimentalConfig(BaseModel):
    """Performance and research knobs, each default measured; a run needs none of them."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    # -- learners ---------------------------------------------------------------------------
    learner_publishes: bool | None = Field(
        None, description="Async: the learner runs its whole update and publishes the version "
        "(unset: with one learner; decisions.md#learner-publishes).")
    learner_previews: bool = Field(
        True, description="A publishing learner shares its weights after each epoch with "
        "refreshing actors (decisions.md#learner-previews).")
    learner_lookahead: bool | None = Field(
        None, description="Gradient learners step a local copy with the master's Adam (unset: "
        "with one learner; decisions.md#learner-lookahead).")
    gradients_per_message: int | None = Field(
        None, ge=1, le=64, description="Gradients a learner sends per stream message (unset: 32 "
        "with one learner, 1 with several; decisions.md#gradients-per-message).")
    learner_compile: bool = Field(
        True, description="Learners run the minibatch loss through torch.compile, eager if "
        "that fails (decisions.md#learner-compile).")
    learner_cuda_graphs: bool = Field(
        True, description="On CUDA, each minibatch step is one captured CUDA graph replayed "
        "(ignored on the CPU).")
    master_adam_beta1: float = Field(
        0.9, ge=0.0, lt=1.0, description="Momentum of the async master's Adam "
        "(decisions.md#master-adam-beta1).")
    publish_interval_ms: float = Field(
        5.0, ge=0, description="The aggregator applies and publishes at most this often (0: on "
        "arrival; decisions.md#publish-interval-ms).")

    # -- actors -----------------------------------------------------------------------------
    actor_refresh_steps: int = Field(
        0, ge=0, description="Async actors check for a newer policy every this many steps (0: "
        "one version a rollout; decisions.md#actor-refresh-steps-0).")
    actor_start: Literal["eager", "just_in_time"] = Field(
        "just_in_time", description="Start an async rollout as soon as there is room, or to end "
        "when a learner needs it (decisions.md#actor-start-just-in-time).")
    filler_envs: int | Literal["auto"] = Field(
        "auto", description="Env streams a second actor samples while no learner runs (0: "
        "none; decisions.md#filler-envs-auto).")
    actor_nice: int = Field(
        0, ge=0, le=19, description="Niceness of an actor's worker process, local and lambda "
        "backends (decisions.md#actor-nice-0).")

    # -- runtime, store and drills ----------------------------------------------------------
    runtime_zygote: bool = Field(
        True, description="The local runtime forks its workers from a zygote process.")
    runtime_invoke_latency_ms: float = Field(
        0.0, ge=0, le=60_000, description="Local runtime: emulated median latency of each "
        "invoke in ms (0: loopback).")
    runtime_invoke_latency_sigma: float = Field(
        0.0, ge=0, le=5, description="Log-normal spread of that latency (0: fixed; 1: a p99 "
        "~10x the median).")
    keep_versions: int = Field(64, ge=2, description="Policy versions retained in Redis.")
    fault_kill_prob: float = Field(
        0.0, ge=0, le=1, description="Drills: probability that a function's process is killed "
        "mid-invocation.")

    @field_validator("filler_envs")
    @classmethod
    def _filler_not_negative(cls, v: int | str) -> int | str:
        if v != "auto" and v < 0:
            raise ValueError(f"filler_envs must be >= 0 or 'auto' (got {v})")
        return v

    @property
    def fixed_filler_envs(self) -> int:
        """The filler's env streams when set by number; 0 for ``auto`` (it starts at 0)."""
        return 0 if self.filler_envs == "auto" else self.filler_envs
