"""One typed configuration for a training run.

Sources, lowest to highest precedence: defaults < TOML file (``--config run.toml``) <
environment variables (``STELLARIS_<FIELD>``, e.g. ``STELLARIS_ACTORS=4``) < command-line flags.
The resolved config is saved as ``config.json`` in the run folder (secrets redacted).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import tomllib
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from functions.messages import PolicySpec, PPOHyper
from orchestrator.cost import PriceTable
from store import redact


class ConfigError(ValueError):
    """A configuration value is invalid; the message is one line naming the field."""


class TrainConfig(BaseModel):
    """Everything that defines a Stellaris training run."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    env: str = Field("Hopper-v5", description="gymnasium environment id (or package.module:EnvId).")
    mode: Literal["async", "sync"] = Field(
        "async", description="async = Stellaris (staleness-aware); sync = RLlib-style PPO baseline."
    )
    backend: Literal["inline", "local", "lambda", "ray"] = Field(
        "local",
        description="Where functions run: in-process threads, the local Lambda runtime over HTTP, "
        "any Lambda endpoint (AWS or local) via boto3, or Ray tasks.",
    )
    preset: Literal["paper"] | None = Field(
        None, description="A named shape whose fields are defaults below the TOML file, env "
        "vars and flags: paper = the SC'24 demo, 16 actors x 1 env x 256 steps, 4 learners "
        "whose gradients the orchestrator aggregates (staleness-aware)."
    )
    actors: int = Field(2, ge=1, le=1000, description="Actor invocations kept in flight (async: "
                        "at most actors_fed, the rollouts the learners' next batches take; "
                        "with several learners and no number given: actors_fed).")
    learners: int = Field(1, ge=1, le=100, description="Learner invocations in flight (async).")
    total_steps: int | None = Field(
        None, ge=1, description="Stop after this many environment steps."
    )
    minutes: float | None = Field(None, gt=0, description="Stop after this much wall-clock time.")
    stop_at_return: float | None = Field(
        None, description="Also stop once a logged row's mean return (the last 100 episodes) "
        "reaches this, as RLlib's stop={'env_runners/episode_return_mean': X}: a run measuring "
        "the time and $ to a return need not pay for the rest of its budget."
    )
    seed: int = Field(1, description="Seed of the policy initialisation and of every env.")
    run_id: str | None = Field(None, description="Run id (default: derived from env, mode, time).")
    run_dir: str | None = Field(None, description="Run folder (default: runs/<run_id>).")
    restart: bool = Field(False, description="Start over even if the run folder has a checkpoint.")
    init_from: str | None = Field(
        None, description="Warm start: a new run begins from this checkpoint file (a "
        "`.safetensors` from any run's checkpoints/ folder) — its weights, observation and "
        "return statistics and Adam moments — with its own counters (version, env steps, wall "
        "clock, $) at zero. A run folder holding a checkpoint of its own resumes from that "
        "instead (unless --restart)."
    )

    # -- rollouts and PPO ---------------------------------------------------------------
    n_envs: int = Field(8, ge=1, description="Vector envs per actor invocation.")
    rollout_steps: int = Field(256, ge=1, description="Steps per env per actor invocation.")
    actor_refresh_steps: int = Field(
        32, ge=0, description="Async actors check for a newer policy every this many steps "
        "(one GET of the latest version number) and sample on with it (0: one version per "
        "rollout). Each step is tagged with its version, so the learner's ratios stay exact. "
        "With a publishing learner that finishes before the rollout does, the steps sampled "
        "after its publish are on-policy for the next update: Hopper's data 0.66 of an update "
        "old instead of 1.0, at the same env steps/s (benchmarks/RESULTS.md, session 11). "
        "Sync rounds always sample with the round's version."
    )
    actor_start: Literal["eager", "just_in_time"] = Field(
        "just_in_time", description="When an async rollout starts: as soon as the learners have room "
        "for its data (eager), or held until it would finish about when a learner needs it "
        "(just_in_time: measured rollout and learner times plus a 25% margin), which keeps "
        "the data fresher when learning is slower than sampling."
    )
    filler_envs: int | Literal["auto"] = Field(
        "auto", description="Async, functions sharing a host's cores (the local runtime on a "
        "laptop or a 2-core VM): this many of each batch's n_envs env streams are sampled by a "
        "second, 'filler' actor that starts only while no learner runs, on the core the learner "
        "has just freed; the lead actor samples the other n_envs - filler_envs streams all the "
        "time. With one actor the learner's core idles between updates (on 2 cores, Hopper: "
        "~55% of the time); with two equal actors the learner shares a core with them and its "
        "data gets staler. Sized so both finish together, a batch takes about (sampling + "
        "learning) / 2 of CPU time per core instead of sampling alone, with the same share of "
        "steps sampled during an update (benchmarks/RESULTS.md, session 35). The batch keeps "
        "n_envs streams of rollout_steps steps. 0: one actor samples every stream. auto: "
        "start with 0 and, once the one actor's rollouts and the updates are timed, use the "
        "filler whose batches take least time (orchestrator/pacer.py: best_filler), chosen "
        "once, between batches (a smaller lead's timings would ask for a bigger filler than "
        "is measured best); 0 where a filler cannot work (sync, several learners, autoscale, "
        "one actor, a batch that is not n_envs x rollout_steps). A number needs actors >= 2 "
        "and learners = 1. auto by default: on Hopper it picks 2 (1 or 3 on a few seeds); over "
        "48 fresh seeds it reached 2,000 1.3x as fast as the lean PPO on the mean (1.65x on "
        "the median seed), and a filler of 2 1.7x as fast as one actor over 28 paired seeds "
        "(benchmarks/RESULTS.md, sessions 35-37)."
    )
    learner_batch_steps: int = Field(
        2048, ge=1, description="Env steps per PPO batch: what an async learner invocation "
        "consumes, and a sync round (split across the actors)."
    )
    hyper: PPOHyper = Field(default_factory=PPOHyper, description="PPO hyper-parameters.")
    policy: PolicySpec = Field(default_factory=PolicySpec, description="Policy network spec.")

    # -- staleness-aware aggregation (DESIGN.md) ----------------------------------------
    staleness_weights: bool = Field(
        True, description="Weight gradients 1 (delta <= v0) or 1/sqrt(delta) (paper)."
    )
    v0: int = Field(1, ge=0, description="Staleness up to which a gradient keeps weight 1.")
    buffer_max: int | None = Field(
        None, ge=1, description="H_max: aggregate when this many gradients are buffered "
        "(default: learners)."
    )
    bound_decay: bool = Field(True, description="Decay the staleness bound beta_k = d^k delta_max.")
    decay: float = Field(0.9, gt=0, le=1, description="d in beta_k = max(1, delta_max * d^k).")
    warmup_rounds: int = Field(
        1, ge=0, description="Training rounds (learner_batch_steps env steps consumed each) of "
        "fully asynchronous aggregation that measure delta_max; the bound's k counts rounds "
        "after them."
    )
    aggregate_timeout_s: float = Field(
        2.0, gt=0, description="Aggregate whatever is buffered after waiting this long."
    )
    publish_interval_ms: float = Field(
        5.0, ge=0, description="Batching window of the aggregator: read, apply and publish at "
        "most this often (0: as soon as gradients arrive). Every gradient is still its own "
        "aggregation and version; only the latest is published. On 2 cores 5 ms took Hopper "
        "from 3,900 to 4,600 env steps/s for ~2 more versions of gradient staleness "
        "(benchmarks/RESULTS.md)."
    )
    learner_lookahead: bool | None = Field(
        None, description="(None: on with one learner, off with several, whose IS truncation "
        "reads the versions the others hold.) ""Async learners apply each gradient they send to a local copy with "
        "the master's Adam and compute the next one there, tagged with the version the master "
        "will apply it at: no gradient staleness with one learner, checked against what the "
        "master publishes and rebased when it differs (functions/lookahead.py)."
    )
    learner_publishes: bool | None = Field(
        None, description="Async: the learner runs its whole PPO update (the steps a "
        "look-ahead learner takes anyway) and publishes the next version itself, as in sync "
        "mode, instead of streaming each minibatch gradient for the master to decode and "
        "apply again. The same weights (one look-ahead learner has no gradient staleness and "
        "the master steps its gradients bit for bit) and the same lag of the data, without "
        "the per-gradient encode, stream, decode and second Adam step: Hopper's learner "
        "invocation 518 vs 707 ms and 1.11x the env steps/s on 2 cores (benchmarks/"
        "RESULTS.md). Versions then count updates, not Adam steps. Needs learners = 1: "
        "learners in flight together send gradients for the aggregator to combine. None "
        "(default): publish when learners = 1."
    )
    learner_previews: bool = Field(
        True, description="Async with a publishing learner: it also stores its weights after "
        "each epoch but the last as a preview of the next version, and actors that refresh "
        "mid-rollout (actor_refresh_steps) sample with the newest preview until that version "
        "is out. The steps sampled while the learner works then come from a policy part of "
        "the way to the next version, not from the one before it: Hopper's data 0.42 of an "
        "update old instead of 0.65 (staleness_mean counts a preview after e of E epochs as "
        "e / E of a version), for one small store write per epoch; over 8 seeds async then "
        "needed no more env steps to a return than the lean PPO (benchmarks/RESULTS.md, "
        "session 12). A preview that cannot be written is skipped, never an error."
    )
    gradients_per_message: int | None = Field(
        None, ge=1, le=64, description="(None: 32 with one learner, 1 with several: grouped "
        "gradients arrive together, stale by the group's length times the learners.) ""Consecutive gradients a learner sends as one stream "
        "message (still applied one Adam step each): the encode, the Redis round trip and the "
        "master's decode are paid once for them. With look-ahead learners grouping costs no "
        "gradient staleness, only publish latency (~35 ms for 32 on Hopper). On 2 cores, "
        "Hopper: 4,000 env steps/s with 1, 4,400 with 4, 5,300 with 8-16, 5,600 with 32 "
        "(1-minute profiles, benchmarks/RESULTS.md)."
    )
    learner_compile: bool = Field(
        True, description="Learners run the minibatch loss through torch.compile "
        "(functions/compiled.py): forward and backward ~2.2x faster on Hopper's 64x64 MLPs, "
        "where per-op dispatch, not arithmetic, is the cost. The first compile in a process "
        "takes ~2 s with inductor's disk cache warm, ~15 s cold, and needs a C++ compiler; "
        "without one the learner warns once and computes eagerly. The sync baseline and the "
        "lean PPO benchmark use the same switch."
    )
    learner_cuda_graphs: bool = Field(
        True, description="On a CUDA learner (device cuda, or auto with a GPU), capture each "
        "minibatch step — forward, backward, clip, and in sync mode the Adam step — as one "
        "CUDA graph and replay it (functions/graphed.py): a small policy's step is kernel "
        "launches, not arithmetic. Ignored on the CPU."
    )
    master_adam_beta1: float = Field(
        0.9, ge=0.0, lt=1.0, description="Momentum coefficient of the async master's Adam. "
        "Stale gradients add momentum of their own (a gradient computed a few versions ago "
        "keeps pushing where the last ones did; Mitliagkas et al. 2016): without look-ahead, "
        "0.5 took back much of what 0.9 lost with gradients 6 versions stale on Hopper "
        "(benchmarks/RESULTS.md, staleness study); with it, PPO's usual 0.9."
    )
    drop_staleness: int | None = Field(
        None, ge=1, description="delta_drop: drop (and count) gradients staler than this."
    )

    # -- functions and invocation -------------------------------------------------------
    actor_memory_mb: int = Field(1769, ge=128, le=10240, description="Actor MemorySize (1769 = 1 vCPU).")
    learner_memory_mb: int = Field(1769, ge=128, le=10240, description="Learner MemorySize.")
    function_timeout_s: int = Field(300, ge=1, le=900, description="Function Timeout.")
    max_retries: int = Field(3, ge=0, description="Resubmissions of a failed invocation.")
    device: Literal["auto", "cpu", "cuda"] = Field("auto", description="Learner device.")
    redis_url: str | None = Field(
        None, description="Redis URL (default: $REDIS_URL, else an embedded redis-server)."
    )
    function_redis_url: str | None = Field(
        None, description="Redis URL as the functions see it (default: the orchestrator's)."
    )
    endpoint_url: str | None = Field(
        None, description="Lambda endpoint for --backend lambda (default: AWS for the region)."
    )
    region: str = Field("us-east-1", description="AWS region of the Lambda backend.")
    function_prefix: str = Field("stellaris", description="Deployed function names' prefix.")
    ray_address: str | None = Field(None, description="Ray cluster address (default: local Ray).")
    runtime_zygote: bool = Field(True, description="Local runtime forks workers from a zygote.")
    actor_nice: int = Field(
        0, ge=0, le=19, description="Niceness an actor's worker process runs at (Linux "
        "`nice`; local and lambda backends, where each function has processes of its own). "
        "When functions share a host's cores (the local runtime on a laptop), the learner is "
        "the critical path: every ms it waits for a core delays the weights all actors sample "
        "with next, while an actor that yields a core only samples a little less — but is "
        "billed while it waits (two 4-env actors at 10 on two cores: 10% more env steps/s, "
        "1.7x the $; benchmarks/RESULTS.md, session 33). 0: equal priority. Ignored by inline "
        "and ray backends (threads, or workers shared with learners, would keep the lower "
        "priority)."
    )
    runtime_invoke_latency_ms: float = Field(
        0.0, ge=0, le=60_000, description="Local runtime: emulated network + frontend latency of "
        "each invoke, median ms (AWS warm: tens of ms; 0 = loopback). Not billed, burns no CPU: "
        "shows what a real platform's round trips cost each mode (benchmarks/latency_study.py)."
    )
    runtime_invoke_latency_sigma: float = Field(
        0.0, ge=0, le=5, description="Log-normal spread of that latency: 0 fixed, 1 a p99 ~10x "
        "the median (stragglers)."
    )

    # -- scaling and budget -------------------------------------------------------------
    autoscale: bool = Field(False, description="Grow/shrink actors in flight to keep learners fed.")
    max_actors: int = Field(8, ge=1, description="Upper bound of actors in flight with --autoscale.")
    budget_usd: float | None = Field(None, gt=0, description="Stop when the run's cost reaches this.")
    redis_host: Literal["orchestrator", "elasticache"] = Field(
        "orchestrator", description="Where Redis runs, for the bill and its footprint check: on "
        "the orchestrator's instance (as docker compose and the embedded Redis run it; Lambda "
        "functions reach it in the VPC) or on its own ElastiCache node (cache.t4g.micro, "
        "prices.redis_hour_usd). The orchestrator's t3.micro then carries both: their CPU "
        "together above its baseline is billed as burst."
    )
    prices: dict[str, float] = Field(
        default_factory=dict, description="Overrides of the price table (orchestrator/cost.py "
        "PriceTable), e.g. --set prices.orchestrator_hour_usd=0.0416 to price a t3.medium "
        "orchestrator where a run outgrows the t3.micro (summary.json's footprint says when)."
    )

    # -- observability and checkpoints --------------------------------------------------
    eval_interval_s: float = Field(60.0, ge=0, description="Seconds between evaluations (0: off).")
    eval_episodes: int = Field(3, ge=1, description="Episodes per evaluation.")
    checkpoint_interval_s: float = Field(30.0, gt=0, description="Seconds between checkpoints.")
    keep_checkpoints: int = Field(3, ge=1, description="Recent checkpoints kept (plus the best).")
    log_interval_s: float = Field(2.0, gt=0, description="Seconds between metric rows.")
    progress: Literal["auto", "rich", "plain", "none"] = Field(
        "auto", description="Live display: rich in a terminal, plain lines otherwise."
    )
    keep_versions: int = Field(64, ge=2, description="Policy versions retained in Redis.")
    fault_kill_prob: float = Field(
        0.0, ge=0, le=1, description="Fault injection: probability that a function's process is "
        "killed mid-invocation (tests and reliability drills)."
    )

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
    def _budget_given(self) -> TrainConfig:
        if self.total_steps is None and self.minutes is None:
            raise ValueError("give a budget: total_steps or minutes")
        return self

    @model_validator(mode="after")
    def _lookahead_with_one_learner(self) -> TrainConfig:
        if self.learner_lookahead and self.mode == "async" and self.learners > 1:
            raise ValueError(
                f"learner_lookahead needs learners = 1 (got {self.learners}): a look-ahead "
                "learner computes with weights no other learner can read, and IS truncation "
                "takes its minimum over the versions the learners in flight hold")
        return self

    @model_validator(mode="after")
    def _actors_feed_the_learners(self) -> TrainConfig:
        # Several learners and no actor count given: as many actors as they can keep busy.
        if "actors" not in self.model_fields_set and self.learners > 1 and self.mode == "async":
            self.__dict__["actors"] = self.actors_fed
        return self

    @model_validator(mode="after")
    def _one_publishing_learner(self) -> TrainConfig:
        if self.learner_publishes is True and self.mode == "async" and self.learners != 1:
            raise ValueError(
                f"learner_publishes needs learners = 1 (got {self.learners}): several learners "
                "in flight send gradients for the aggregator to combine (learner_publishes=false)"
            )
        return self

    @model_validator(mode="after")
    def _filler_fits(self) -> TrainConfig:
        if self.filler_envs == "auto" or self.filler_envs == 0:
            return self
        if self.filler_envs < 0:
            raise ValueError(f"filler_envs must be >= 0 or 'auto' (got {self.filler_envs})")
        if (why_not := self._why_no_filler()) is not None:
            raise ValueError(why_not)
        if self.filler_envs >= self.n_envs:
            raise ValueError(f"filler_envs ({self.filler_envs}) must be below n_envs "
                             f"({self.n_envs}): the lead actor samples the other streams")
        return self

    def _why_no_filler(self) -> str | None:
        """Why this run cannot have a filler actor, or None: one place for the rule that a
        number breaks with an error and ``auto`` by staying at 0."""
        if self.mode != "async":
            return ("filler_envs packs async rollouts around the learner: it needs mode async "
                    "(sync rounds already sample on every actor at once)")
        if self.actors < 2 or self.autoscale or self.learners != 1:
            return ("filler_envs needs actors >= 2 (a lead and a filler in flight), one "
                    "learner (the filler waits for it) and no autoscale")
        return None

    @model_validator(mode="after")
    def _latency_needs_the_local_runtime(self) -> TrainConfig:
        # Only the local runtime can add it; elsewhere the latency is the platform's own.
        if self.runtime_invoke_latency_ms > 0 and self.backend != "local":
            raise ValueError(
                f"runtime_invoke_latency_ms emulates a platform's latency in the local runtime: "
                f"it needs --backend local, not {self.backend!r}"
            )
        return self

    @property
    def rollout_env_steps(self) -> int:
        """Env steps of a batch's rollouts: one actor's, or a lead's and a filler's together."""
        return self.n_envs * self.rollout_steps

    @property
    def filler_auto(self) -> bool:
        """Does the async loop size the filler itself (``filler_envs = "auto"`` where a filler
        can work: one publishing learner, two actors or more, batches of n_envs streams)?"""
        return (self.filler_envs == "auto" and self._why_no_filler() is None
                and self.publishing_learner and self.n_envs >= 2
                and self.learner_batch_steps == self.rollout_env_steps)

    @property
    def has_filler(self) -> bool:
        """Does an async batch come from a lead and a filler (a number, or ``auto`` where a
        filler can work)?"""
        return bool(self.fixed_filler_envs) or self.filler_auto

    @property
    def fixed_filler_envs(self) -> int:
        """The filler's env streams when set by number; 0 for ``auto`` (it starts at 0)."""
        return 0 if self.filler_envs == "auto" else self.filler_envs

    @property
    def actor_event_nice(self) -> int:
        """The niceness actor events ask for: ``actor_nice`` where each function has worker
        processes of its own (local runtime, Lambda), 0 where an actor runs on a thread of
        the orchestrator (inline) or on a worker Ray may hand a learner task next."""
        return self.actor_nice if self.backend in ("local", "lambda") else 0

    @property
    def steps_ahead(self) -> int:
        """Async backpressure: env steps sampled or waiting at most, what the learners take
        next (one batch per learner); rolling out further only makes the data staler."""
        return self.learner_batch_steps * self.learners

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
        return (
            f"{asked} actors asked for, but at most {self.actors_fed} will run at once: the "
            f"learners take {self.learners} x {self.learner_batch_steps} env steps at a time "
            f"and each rollout is {self.n_envs} envs x {self.rollout_steps} steps"
            f"{' (with a filler: two rollouts a batch)' if self.has_filler else ''}. "
            f"To sample with more actors, make the rollouts smaller (actors x n_envs x "
            f"rollout_steps ~ learners x learner_batch_steps, e.g. --n-envs "
            f"{max(1, self.steps_ahead // (asked * self.rollout_steps))}"
            f"{' --set filler_envs=0' if self.fixed_filler_envs else ''}) or add learners.")

    @property
    def publishing_learner(self) -> bool:
        """Does an async run's learner publish its updates (``learner_publishes`` resolved)?"""
        if self.learner_publishes is None:
            return self.learners == 1
        return self.learner_publishes

    @property
    def lookahead(self) -> bool:
        """``learner_lookahead`` resolved: on with one (gradient-streaming) learner."""
        return self.learners == 1 if self.learner_lookahead is None else self.learner_lookahead

    @property
    def grads_per_message(self) -> int:
        """``gradients_per_message`` resolved (32 with one learner, 1 with several)."""
        if self.gradients_per_message is not None:
            return self.gradients_per_message
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
        return self.buffer_max or self.learners

    def public_dict(self) -> dict[str, Any]:
        """The resolved config as JSON, with credentials in URLs redacted."""
        doc = self.model_dump(mode="json")
        for key in ("redis_url", "function_redis_url", "endpoint_url"):
            if doc.get(key):
                doc[key] = redact(doc[key])
        return doc

    def digest(self) -> str:
        """Hash of what defines the learning problem (not budgets or paths)."""
        doc = self.model_dump(
            mode="json", include={"env", "mode", "hyper", "policy", "n_envs", "rollout_steps", "seed"}
        )
        return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:16]


# The preset's fields sit below the TOML file, env vars and flags (any of which may name it).
PRESETS: dict[str, dict[str, Any]] = {
    "paper": {"mode": "async", "actors": 16, "n_envs": 1, "rollout_steps": 256, "learners": 4,
              "learner_publishes": False, "staleness_weights": True, "bound_decay": True,
              "hyper": {"is_correction": "decoupled"}},
}
RENAMED = {"warmup_aggregations": "warmup_rounds (the bound's k counts training rounds now, "
                                  "one per learner_batch_steps env steps consumed)"}


def _env_overrides() -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name in TrainConfig.model_fields:
        raw = os.environ.get(f"STELLARIS_{name.upper()}")
        if raw is not None:
            try:
                out[name] = json.loads(raw)
            except ValueError:
                out[name] = raw
    return out


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in over.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = _merge(out[k], v)
        else:
            out[k] = v
    return out


def load_config(
    path: str | os.PathLike[str] | None = None, overrides: dict[str, Any] | None = None
) -> TrainConfig:
    """Defaults < TOML < STELLARIS_* env vars < ``overrides`` (flags); one-line errors."""
    doc: dict[str, Any] = {}
    if path:
        try:
            doc = tomllib.loads(Path(path).read_text())
        except FileNotFoundError:
            raise ConfigError(f"config file not found: {path}") from None
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"config file {path} is not valid TOML: {exc}") from None
    doc = _merge(doc, _env_overrides())
    doc = _merge(doc, {k: v for k, v in (overrides or {}).items() if v is not None})
    for old, new in RENAMED.items():
        if old in doc:
            raise ConfigError(f"invalid config: {old} is no longer a field: use {new}")
    preset = doc.get("preset")
    if preset is not None:
        if preset not in PRESETS:
            raise ConfigError(f"invalid config: preset: unknown preset {preset!r} "
                              f"(known: {', '.join(PRESETS)})")
        doc = _merge(PRESETS[preset], doc)
    try:
        return TrainConfig.model_validate(doc)
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = ".".join(str(p) for p in err["loc"]) or "config"
        more = f" (and {len(exc.errors()) - 1} more)" if len(exc.errors()) > 1 else ""
        raise ConfigError(f"invalid config: {loc}: {err['msg']}{more}") from None
