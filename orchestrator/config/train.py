"""``TrainConfig``: what defines a training run, user fields at the top level.

The paper's aggregation is one nested section (``aggregation``), the measured performance and
research knobs another (``experimental``); hyper-parameters and the policy are the functions'
own models. Properties resolve the fields that default to "depends on the run".
"""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from functions.hyper import ENV_HYPER, PolicySpec, PPOHyper, env_hyper
from orchestrator.config.sections import AggregationConfig, ExperimentalConfig
from orchestrator.cost import PriceTable
from store import redact


class TrainConfig(BaseModel):
    """Everything that defines a Stellaris training run."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    # -- the run --------------------------------------------------------------------------
    env: str = Field("Hopper-v5", description="Gymnasium environment id (or package.module:EnvId).")
    mode: Literal["async", "sync"] = Field(
        "async", description="async: Stellaris (staleness-aware); sync: the RLlib-style PPO "
        "baseline.")
    backend: Literal["inline", "local", "lambda", "ray"] = Field(
        "local", description="Where functions run: threads here, the local Lambda runtime, a "
        "Lambda endpoint, or Ray.")
    preset: Literal["paper"] | None = Field(
        None, description="A named shape under the TOML file, env vars and flags (paper: the "
        "SC'24 demo).")
    actors: int = Field(
        2, ge=1, le=1000, description="Actor invocations in flight (async: at most actors_fed, "
        "its default with several learners).")
    learners: int = Field(
        1, ge=1, le=100, description="Learner invocations in flight (async); two or more run "
        "the paper's aggregation.")
    total_steps: int | None = Field(None, ge=1, description="Stop after this many env steps.")
    minutes: float | None = Field(None, gt=0, description="Stop after this much wall-clock time.")
    stop_at_return: float | None = Field(
        None, description="Also stop once a logged mean return (last 100 episodes) reaches this.")
    seed: int = Field(1, description="Seed of the policy initialisation and of every env.")
    run_id: str | None = Field(None, description="Run id (unset: from env, mode, time and seed).")
    run_dir: str | None = Field(None, description="Run folder (unset: runs/<run_id>).")
    restart: bool = Field(False, description="Start over even if the run folder has a checkpoint.")
    init_from: str | None = Field(
        None, description="Warm start from this checkpoint file: weights, normalisers, Adam "
        "moments; counters at zero.")

    # -- rollouts and PPO -----------------------------------------------------------------
    n_envs: int = Field(8, ge=1, description="Vector envs per actor invocation.")
    rollout_steps: int = Field(256, ge=1, description="Steps per env per actor invocation.")
    learner_batch_steps: int = Field(
        2048, ge=1, description="Env steps per PPO batch: an async learner invocation's, or a "
        "sync round's.")
    hyper: PPOHyper = Field(default_factory=PPOHyper, description="PPO hyper-parameters.")
    policy: PolicySpec = Field(
        default_factory=PolicySpec, description="Policy network and its normalisers.")

    # -- functions and invocation ---------------------------------------------------------
    device: Literal["auto", "cpu", "cuda"] = Field("auto", description="Learner device.")
    actor_memory_mb: int = Field(
        1769, ge=128, le=10240, description="Actor function memory, MB (1769: one vCPU).")
    learner_memory_mb: int = Field(
        1769, ge=128, le=10240, description="Learner function memory, MB.")
    function_timeout_s: int = Field(300, ge=1, le=900, description="Function timeout, seconds.")
    max_retries: int = Field(3, ge=0, description="Resubmissions of a failed invocation.")
    redis_url: str | None = Field(
        None, description="Redis URL (unset: $REDIS_URL, else an embedded redis-server).")
    function_redis_url: str | None = Field(
        None, description="Redis URL as the functions see it (unset: the orchestrator's).")
    preflight: bool = Field(
        True, description="Before the run, one actor invocation checks that the functions "
        "reach the store (local, lambda and ray backends; docs/clusters.md).")
    endpoint_url: str | None = Field(
        None, description="Lambda endpoint of the lambda backend (unset: AWS for the region).")
    region: str = Field("us-east-1", description="AWS region of the lambda backend.")
    function_prefix: str = Field(
        "stellaris", description="Prefix of the deployed functions' names.")
    ray_address: str | None = Field(
        None, description="Ray cluster address (unset: $RAY_ADDRESS, as in a Ray Job, else a "
        "local Ray).")
    learner_gpus: float | None = Field(
        None, ge=0, description="GPUs a learner task asks Ray for (unset: 1 if the cluster has "
        "a GPU; 0.25: four learners share one).")

    # -- scaling and budget ---------------------------------------------------------------
    autoscale: bool = Field(
        False, description="Grow and shrink the actors in flight to keep the learners fed.")
    max_actors: int = Field(8, ge=1, description="Most actors in flight with autoscale.")
    budget_usd: float | None = Field(
        None, gt=0, description="Stop when the run's cost reaches this many USD.")
    redis_host: Literal["orchestrator", "elasticache"] = Field(
        "orchestrator", description="Where Redis runs, for the bill: the orchestrator's instance "
        "or an ElastiCache node.")
    prices: dict[str, float] = Field(
        default_factory=dict, description="Overrides of the price table (orchestrator/cost.py), "
        "e.g. prices.orchestrator_hour_usd=0.0416.")

    # -- observability and checkpoints ----------------------------------------------------
    eval_interval_s: float = Field(60.0, ge=0, description="Seconds between evaluations (0: off).")
    eval_episodes: int = Field(3, ge=1, description="Episodes per evaluation.")
    checkpoint_interval_s: float = Field(30.0, gt=0, description="Seconds between checkpoints.")
    keep_checkpoints: int = Field(3, ge=1, description="Recent checkpoints kept (plus the best).")
    log_interval_s: float = Field(2.0, gt=0, description="Seconds between metric rows.")
    progress: Literal["auto", "rich", "plain", "none"] = Field(
        "auto", description="Live display: rich in a terminal, plain lines otherwise, or none.")

    # -- sections -------------------------------------------------------------------------
    aggregation: AggregationConfig = Field(
        default_factory=AggregationConfig, description="The paper's staleness-aware aggregation "
        "(several learners, or learner_publishes=false).")
    experimental: ExperimentalConfig = Field(
        default_factory=ExperimentalConfig, description="Performance and research knobs, each "
        "default measured; a run needs none of them.")

    @model_validator(mode="before")
    @classmethod
    def _env_hyper_under_the_runs(cls, data: Any) -> Any:
        # The env's own defaults (functions/hyper.py::ENV_HYPER) under the hyper fields given.
        if not isinstance(data, dict):
            return data
        env = data.get("env", cls.model_fields["env"].default)
        defaults = ENV_HYPER.get(env) if isinstance(env, str) else None
        if not defaults:
            return data
        given = data.get("hyper") or {}
        if isinstance(given, PPOHyper):  # a model stays one: an assignment keeps it as is
            return {**data, "hyper": env_hyper(env, **given.model_dump(exclude_unset=True))}
        if not isinstance(given, dict):
            return data  # not a table: the field's own validation says so
        return {**data, "hyper": {**defaults, **given}}  # validated as the field, errors named

    @model_validator(mode="after")
    def _known_prices(self) -> TrainConfig:
        PriceTable.from_overrides(self.prices)  # unknown names: a one-line error
        if any(v < 0 for v in self.prices.values()):
            raise ValueError("prices cannot be negative")
        return self

    @model_validator(mode="after")
    def _init_from_exists(self) -> TrainConfig:
        if self.init_from is not None and not Path(self.init_from).is_file():
            raise ValueError(f"init_from: no checkpoint file at {self.init_from}")
        return self

    @model_validator(mode="after")
    def _gpu_share_ray_accepts(self) -> TrainConfig:
        # Ray takes a fraction of one GPU or whole GPUs, nothing in between.
        share = self.learner_gpus
        if share is not None and share > 1 and share != int(share):
            raise ValueError(f"learner_gpus = {share}: give a share of one GPU (<= 1) or a "
                             "whole number of GPUs")
        return self

    @model_validator(mode="after")
    def _budget_given(self) -> TrainConfig:
        if self.total_steps is None and self.minutes is None:
            raise ValueError("give a budget: total_steps or minutes")
        return self

    @model_validator(mode="after")
    def _lookahead_with_one_learner(self) -> TrainConfig:
        if self.experimental.learner_lookahead and self.mode == "async" and self.learners > 1:
            raise ValueError(
                f"experimental.learner_lookahead needs learners = 1 (got {self.learners}): a "
                "look-ahead learner computes with weights no other learner can read, and IS "
                "truncation takes its minimum over the versions the learners in flight hold")
        return self

    @model_validator(mode="after")
    def _actors_feed_the_learners(self) -> TrainConfig:
        # Several learners and no actor count given: as many actors as they can keep busy.
        if "actors" not in self.model_fields_set and self.learners > 1 and self.mode == "async":
            self.__dict__["actors"] = self.actors_fed
        return self

    @model_validator(mode="after")
    def _one_publishing_learner(self) -> TrainConfig:
        if (self.experimental.learner_publishes is True and self.mode == "async"
                and self.learners != 1):
            raise ValueError(
                f"experimental.learner_publishes needs learners = 1 (got {self.learners}): "
                "several learners in flight send gradients for the aggregator to combine "
                "(experimental.learner_publishes=false)")
        return self

    @model_validator(mode="after")
    def _filler_fits(self) -> TrainConfig:
        filler = self.experimental.fixed_filler_envs
        if filler == 0:
            return self
        if (why_not := self._why_no_filler()) is not None:
            raise ValueError(why_not)
        if filler >= self.n_envs:
            raise ValueError(f"experimental.filler_envs ({filler}) must be below n_envs "
                             f"({self.n_envs}): the lead actor samples the other streams")
        return self

    def _why_no_filler(self) -> str | None:
        """Why this run cannot have a filler actor, or None: one place for the rule that a
        number breaks with an error and ``auto`` by staying at 0."""
        if self.mode != "async":
            return ("experimental.filler_envs packs async rollouts around the learner: it needs "
                    "mode async (sync rounds already sample on every actor at once)")
        if self.actors < 2 or self.autoscale or self.learners != 1:
            return ("experimental.filler_envs needs actors >= 2 (a lead and a filler in "
                    "flight), one learner (the filler waits for it) and no autoscale")
        return None

    @model_validator(mode="after")
    def _latency_needs_the_local_runtime(self) -> TrainConfig:
        # Only the local runtime can add it; elsewhere the latency is the platform's own.
        if self.experimental.runtime_invoke_latency_ms > 0 and self.backend != "local":
            raise ValueError(
                "experimental.runtime_invoke_latency_ms emulates a platform's latency in the "
                f"local runtime: it needs --backend local, not {self.backend!r}")
        return self

    # -- resolved values ------------------------------------------------------------------
    @property
    def rollout_env_steps(self) -> int:
        """Env steps of a batch's rollouts: one actor's, or a lead's and a filler's together."""
        return self.n_envs * self.rollout_steps

    @property
    def filler_auto(self) -> bool:
        """Does the async loop size the filler itself (``filler_envs = "auto"`` where a filler
        can work: one publishing learner, two actors or more, batches of n_envs streams)?"""
        return (self.experimental.filler_envs == "auto" and self._why_no_filler() is None
                and self.publishing_learner and self.n_envs >= 2
                and self.learner_batch_steps == self.rollout_env_steps)

    @property
    def has_filler(self) -> bool:
        """Does an async batch come from a lead and a filler (a number, or ``auto`` where a
        filler can work)?"""
        return bool(self.experimental.fixed_filler_envs) or self.filler_auto

    @property
    def actor_event_nice(self) -> int:
        """The niceness actor events ask for: ``actor_nice`` where each function has worker
        processes of its own (local runtime, Lambda), 0 where an actor runs on a thread of
        the orchestrator (inline) or on a worker Ray may hand a learner task next."""
        return self.experimental.actor_nice if self.backend in ("local", "lambda") else 0

    @property
    def learner_job_steps(self) -> int:
        """Env steps one async learner invocation takes. Several aggregated learners share a
        round's ``learner_batch_steps`` (``aggregation.share_batch``), in whole rollouts, each
        cut into the round's ``num_minibatches``: ``learners`` gradients aggregated are one
        step on a round's minibatch, as in data-parallel PPO. A whole batch each let the
        policy move ``learners`` rounds while each was learned (decisions.md#share-batch)."""
        if self.publishing_learner or self.learners == 1 or not self.aggregation.share_batch:
            return self.learner_batch_steps
        rollouts = math.ceil(self.learner_batch_steps / self.learners / self.rollout_env_steps)
        return max(1, rollouts) * self.rollout_env_steps

    @property
    def steps_ahead(self) -> int:
        """Async backpressure: env steps sampled or waiting at most, what the learners take
        next (one invocation's batch per learner); rolling out further only makes the data
        staler."""
        return self.learner_job_steps * self.learners

    @property
    def actors_fed(self) -> int:
        """Async: the most rollouts in flight at once under :attr:`steps_ahead`: no more
        actors than this are ever busy."""
        if self.has_filler:
            return 2  # a lead and a filler (one learner)
        return max(1, math.ceil(self.steps_ahead / self.rollout_env_steps))

    def idle_actors_warning(self) -> str | None:
        """Why ``actors`` (or ``max_actors``) is more than an async run can keep busy, and
        what to change; None when it is not."""
        field = "max_actors" if self.autoscale else "actors"
        asked = getattr(self, field)
        # only a number someone chose: the default 2 is for sync rounds (split across actors)
        if self.mode != "async" or field not in self.model_fields_set or asked <= self.actors_fed:
            return None
        fixed = self.experimental.fixed_filler_envs
        return (
            f"{asked} actors asked for, but at most {self.actors_fed} will run at once: the "
            f"learners take {self.learners} x {self.learner_job_steps} env steps at a time "
            f"and each rollout is {self.n_envs} envs x {self.rollout_steps} steps"
            f"{' (with a filler: two rollouts a batch)' if self.has_filler else ''}. "
            f"To sample with more actors, make the rollouts smaller (actors x n_envs x "
            f"rollout_steps ~ learners x learner_batch_steps, e.g. --n-envs "
            f"{max(1, self.steps_ahead // (asked * self.rollout_steps))}"
            f"{' --set experimental.filler_envs=0' if fixed else ''}) or add learners.")

    @property
    def publishing_learner(self) -> bool:
        """Does an async run's learner publish its updates (``learner_publishes`` resolved)?"""
        if self.experimental.learner_publishes is None:
            return self.learners == 1
        return self.experimental.learner_publishes

    @property
    def lookahead(self) -> bool:
        """``learner_lookahead`` resolved: on with one (gradient-streaming) learner."""
        chosen = self.experimental.learner_lookahead
        return self.learners == 1 if chosen is None else chosen

    @property
    def grads_per_message(self) -> int:
        """``gradients_per_message`` resolved (32 with one learner, 1 with several)."""
        if self.experimental.gradients_per_message is not None:
            return self.experimental.gradients_per_message
        return 32 if self.learners == 1 else 1

    @property
    def training_path(self) -> str:
        """Which path produces this run's results, in words (every result names it)."""
        if self.mode == "sync":
            return "sync PPO"
        if self.publishing_learner:
            return "one publishing learner (pipelined PPO)"
        return f"aggregation ({self.learners} learner{'s' if self.learners > 1 else ''})"

    @property
    def h_max(self) -> int:
        """The aggregation's H_max: ``aggregation.buffer_max``, else ``learners``."""
        return self.aggregation.h_max(self.learners)

    def public_dict(self) -> dict[str, Any]:
        """The resolved config as JSON, with credentials in URLs redacted."""
        doc = self.model_dump(mode="json")
        for key in ("redis_url", "function_redis_url", "endpoint_url"):
            if doc.get(key):
                doc[key] = redact(doc[key])
        return doc

    def digest(self) -> str:
        """Hash of what defines the learning problem (not budgets or paths)."""
        doc = self.model_dump(mode="json", include={
            "env", "mode", "hyper", "policy", "n_envs", "rollout_steps", "seed"})
        return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:16]
