"""The handlers' events: what an invocation is asked to do, validated before any work.

Events carry keys, never tensors (claim-check pattern): the tensors travel through the store
as blobs (:mod:`functions.wire`). A malformed event raises :class:`InvalidEvent` naming the
offending field(s). The ``schema`` strings are the wire names: they change only with the
event's meaning.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from functions.hyper import DEFAULT_GAMMA, PPOHyper
from store.keys import validate_run_id


class InvalidEvent(ValueError):
    """A handler event failed validation; the message names the bad field(s)."""


class _Event(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    run_id: str
    redis_url: str | None = None  # None -> $REDIS_URL (store.resolve_url)
    # Stable across retries of one logical invocation (dedupe key of its outputs). When absent
    # the handler takes the Lambda context's aws_request_id, else a fresh uuid.
    invocation_id: str | None = None

    def to_event(self) -> dict[str, Any]:
        """The JSON-able event dict a handler accepts (``schema`` under its wire name)."""
        return self.model_dump(mode="json", by_alias=True)

    @field_validator("run_id")
    @classmethod
    def _run_id(cls, v: str) -> str:
        return validate_run_id(v)

    @field_validator("invocation_id")
    @classmethod
    def _inv(cls, v: str | None) -> str | None:
        if v is not None and (not v or len(v) > 200 or any(c.isspace() for c in v)):
            raise ValueError("invocation_id must be 1-200 characters without whitespace")
        return v


VersionRef = Literal["latest"] | int


class ActorEvent(_Event):
    schema_: Literal["stellaris.actor/1"] = Field("stellaris.actor/1", alias="schema")
    env_id: str = Field(min_length=1)
    n_envs: int = Field(8, ge=1, le=1024)
    steps: int = Field(256, ge=1, le=100_000)
    seed: int = 0
    policy_version: VersionRef = "latest"
    gamma: float = Field(DEFAULT_GAMMA, ge=0.0, le=1.0)
    refresh_steps: int = Field(
        0, ge=0, le=100_000, description="Check for a newer policy every this many steps and "
        "sample on with it (0: the whole rollout with one version, as a sync round needs).")
    nice: int = Field(
        0, ge=0, le=19, description="Raise the worker process's niceness to at least this "
        "before sampling (never lowered): the learner keeps its core when they share one.")


class LearnerEvent(_Event):
    schema_: Literal["stellaris.learner/1"] = Field("stellaris.learner/1", alias="schema")
    mode: Literal["gradient", "update"] = "gradient"
    trajectory_ids: list[str] = Field(min_length=1)
    versions_in_flight: list[int] = Field(default_factory=list)
    # Gradient mode among several learners: hold the version this learner computes with for
    # this many seconds (renewed with every gradient it sends, released by the orchestrator)
    # and take IS truncation over the versions the *other* learners hold now, read with each
    # gradient; None: over ``versions_in_flight`` as given.
    hold_lease_s: float | None = Field(None, gt=0, le=3600)
    hyper: PPOHyper = Field(default_factory=PPOHyper)
    target_version: int | None = Field(None, ge=1)
    obs_stats: dict[str, Any] | None = None
    ret_stats: dict[str, Any] | None = None
    device: Literal["auto", "cpu", "cuda"] = "auto"
    seed: int = 0
    # Gradient mode: apply each gradient locally with the master's Adam too, so the next one
    # is computed at the weights the master will have when it arrives (functions/lookahead.py).
    lookahead: bool = False
    master_adam_betas: tuple[float, float] = (0.9, 0.999)
    # Gradient mode: consecutive gradients sent as one stream message (Gradient.pack)
    gradients_per_message: int = Field(1, ge=1, le=64)
    # The minibatch step through torch.compile (functions/step.py); eager if that fails
    compile: bool = False
    # On CUDA: each minibatch step as one CUDA graph replay (functions/step.py)
    cuda_graph: bool = True
    # Update mode: store the weights after each epoch but the last as a preview of
    # target_version (ParamStore.publish_preview), for async actors that refresh mid-rollout
    previews: bool = False

    @field_validator("obs_stats", "ret_stats")
    @classmethod
    def _stats(cls, v: dict[str, Any] | None) -> dict[str, Any] | None:
        if v is not None and not {"count", "mean", "var"} <= set(v):
            raise ValueError('normaliser stats need the keys "count", "mean", "var"')
        return v

    @model_validator(mode="after")
    def _update_needs_target(self) -> LearnerEvent:
        if self.mode == "update" and self.target_version is None:
            raise ValueError("target_version is required in update mode")
        return self


class LearnerWarmup(_Event):
    """Compile a learner's step for a run before its first batch arrives (a "warmer").

    The first update of a compiled learner spends seconds in ``torch.compile`` while the
    actors, held by backpressure, wait for it. Sent at a run's start, this invocation compiles
    the same step for the run's policy on a synthetic batch of the real batch's shape, in the
    execution environment the first update will then find warm, while the first rollouts are
    sampled. It changes nothing in the store.
    """

    schema_: Literal["stellaris.learner-warmup/1"] = Field(
        "stellaris.learner-warmup/1", alias="schema")
    mode: Literal["gradient", "update"] = "update"
    # samples in the learner's batches: the compiled step specialises on it
    batch_size: int = Field(2048, ge=1, le=1_000_000)
    hyper: PPOHyper = Field(default_factory=PPOHyper)
    device: Literal["auto", "cpu", "cuda"] = "auto"
    compile: bool = True
    master_adam_betas: tuple[float, float] = (0.9, 0.999)


class EvaluatorEvent(_Event):
    schema_: Literal["stellaris.evaluator/1"] = Field("stellaris.evaluator/1", alias="schema")
    policy_version: VersionRef = "latest"
    env_id: str | None = None  # None -> the env the policy was trained on
    episodes: int = Field(5, ge=1, le=10_000)
    seed: int = 0
    max_steps: int = Field(1000, ge=1)


E = TypeVar("E", bound=_Event)


def _decoded(event: Any, name: str) -> Any:
    """A raw event as Lambda hands it (a dict) or as JSON text, decoded."""
    if isinstance(event, bytes | bytearray | str):
        try:
            return json.loads(event)
        except ValueError as exc:
            raise InvalidEvent(f"{name}: event is not valid JSON: {exc}") from None
    return event


def event_schema(event: Any) -> str | None:
    """The ``schema`` a raw event names, for handlers that take more than one kind; None if
    it names none or is not a JSON object (``parse_event`` then says what is wrong)."""
    try:
        event = _decoded(event, "event")
    except InvalidEvent:
        return None
    return event.get("schema") if isinstance(event, Mapping) else None


def parse_event(cls: type[E], event: Any, context: Any = None) -> E:
    """Validate a raw event (dict or JSON text) into ``cls``; :class:`InvalidEvent` if bad."""
    name = cls.__name__
    event = _decoded(event, name)
    if not isinstance(event, Mapping):
        raise InvalidEvent(f"{name}: event must be a JSON object, got {type(event).__name__}")
    try:
        parsed = cls.model_validate(dict(event))
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc']) or '<event>'}: {err['msg']}"
            for err in exc.errors()
        )
        raise InvalidEvent(f"invalid {name}: {problems}") from None
    if parsed.invocation_id is None:
        rid = getattr(context, "aws_request_id", None)
        parsed.invocation_id = str(rid) if rid else uuid.uuid4().hex
    return parsed
