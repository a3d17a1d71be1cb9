"""Loading a run's config: defaults < preset < TOML file < ``STELLARIS_*`` env vars < flags.

Keys of the old one-level layout (``staleness_weights``, ``learner_compile`` ...) still work
in every source: each is moved to its section with one warning line naming the new key.
"""

from __future__ import annotations

import json
import os
import sys
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from orchestrator.config.train import TrainConfig


class ConfigError(ValueError):
    """A configuration value is invalid; the message is one line naming the field."""


# The preset's fields sit below the TOML file, env vars and flags (any of which may name it).
PRESETS: dict[str, dict[str, Any]] = {
    # A round is one wave of the 16 actors (4,096 env steps), shared by the 4 learners;
    # a round's minibatch is 64 samples as the default's 2,048 / 32, 16 from each learner
    # (decisions.md#share-batch).
    "paper": {"mode": "async", "actors": 16, "n_envs": 1, "rollout_steps": 256, "learners": 4,
              "learner_batch_steps": 4096,
              "aggregation": {"staleness_weights": True, "bound_decay": True,
                              "share_batch": True},
              "experimental": {"learner_publishes": False},
              "hyper": {"is_correction": "decoupled", "num_minibatches": 64}},
}
PRESET_NOTES = {"paper": "the SC'24 demo: 16 actors x 1 env x 256 steps, 4 learners whose "
                         "gradients the orchestrator aggregates (staleness-aware)"}
RENAMED = {"warmup_aggregations": "aggregation.warmup_rounds (the bound's k counts training "
                                  "rounds now, one per learner_batch_steps env steps consumed)"}

# Where each key of the old one-level layout lives now: (section, field).
_OLD_AGGREGATION = ("staleness_weights", "v0", "buffer_max", "bound_decay", "decay",
                    "warmup_rounds", "drop_staleness")
_OLD_EXPERIMENTAL = (
    "actor_refresh_steps", "actor_start", "filler_envs", "publish_interval_ms",
    "learner_lookahead", "learner_publishes", "learner_previews", "gradients_per_message",
    "learner_compile", "learner_cuda_graphs", "master_adam_beta1", "runtime_zygote",
    "actor_nice", "runtime_invoke_latency_ms", "runtime_invoke_latency_sigma", "keep_versions",
    "fault_kill_prob")
MOVED: dict[str, tuple[str, str]] = {
    **{name: ("aggregation", name) for name in _OLD_AGGREGATION},
    "aggregate_timeout_s": ("aggregation", "timeout_s"),
    **{name: ("experimental", name) for name in _OLD_EXPERIMENTAL},
}


def _sections() -> dict[str, type[BaseModel]]:
    """The top-level fields that are models of their own (hyper, policy, aggregation ...)."""
    return {name: f.annotation for name, f in TrainConfig.model_fields.items()
            if isinstance(f.annotation, type) and issubclass(f.annotation, BaseModel)}


def _as_dict(node: Any, section: str) -> dict[str, Any]:
    if isinstance(node, BaseModel):
        return node.model_dump()
    if not isinstance(node, dict):
        raise ConfigError(f"invalid config: {section}: expected a table of fields, got {node!r}")
    return node


def move_old_keys(doc: dict[str, Any], source: str,
                  name: Callable[[str], str] = str) -> dict[str, Any]:
    """``doc`` with the old layout's flat keys moved into their sections, one warning line
    each; ``name`` spells a key as ``source`` does (an env var's name, say). The same setting
    given both ways with different values is ambiguous: a ConfigError naming the new key."""
    out = dict(doc)
    for old, (section, field) in MOVED.items():
        if old not in out:
            continue
        value = out.pop(old)
        node = _as_dict(out.get(section) or {}, section)
        if field in node and node[field] != value:
            raise ConfigError(
                f"invalid config: {name(old)} and {name(f'{section}.{field}')} both given in "
                f"{source}, with different values: keep {name(f'{section}.{field}')}")
        out[section] = {**node, field: value}
        print(f"warning: {name(old)} in {source} is now {name(f'{section}.{field}')}; "
              "the old name still works", file=sys.stderr)
    return out


def _env_name(key: str) -> str:
    return "STELLARIS_" + key.replace(".", "__").upper()


def _env_value(raw: str) -> Any:
    try:
        return json.loads(raw)
    except ValueError:
        return raw


def _env_overrides() -> dict[str, Any]:
    """``STELLARIS_<FIELD>`` (JSON if it parses), ``STELLARIS_<SECTION>__<FIELD>`` for a field
    of a section, and the old layout's flat names."""
    out: dict[str, Any] = {}
    for name in (*TrainConfig.model_fields, *MOVED):
        if (raw := os.environ.get(_env_name(name))) is not None:
            out[name] = _env_value(raw)
    nested: dict[str, Any] = {}
    for section, model in _sections().items():
        for field in model.model_fields:
            if (raw := os.environ.get(_env_name(f"{section}.{field}"))) is not None:
                nested.setdefault(section, {})[field] = _env_value(raw)
    out = _merge(out, nested)
    return move_old_keys(out, "the environment", _env_name)


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in over.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = _merge(out[k], v)
        else:
            out[k] = v
    return out


def _check_renamed(doc: dict[str, Any]) -> None:
    aggregation = doc.get("aggregation")
    for old, new in RENAMED.items():
        if old in doc or (isinstance(aggregation, dict) and old in aggregation):
            raise ConfigError(f"invalid config: {old} is no longer a field: use {new}")


def _read_toml(path: str | os.PathLike[str]) -> dict[str, Any]:
    try:
        return tomllib.loads(Path(path).read_text())
    except FileNotFoundError:
        raise ConfigError(f"config file not found: {path}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config file {path} is not valid TOML: {exc}") from None


def load_config(
    path: str | os.PathLike[str] | None = None, overrides: dict[str, Any] | None = None
) -> TrainConfig:
    """Defaults < preset < TOML < STELLARIS_* env vars < ``overrides`` (flags); one-line
    errors. Each source may use old flat keys: they are moved before the sources merge, so
    a nested key in a higher source still wins over a flat one below it."""
    layers = []
    if path:
        layers.append(move_old_keys(_read_toml(path), f"config file {path}"))
    layers.append(_env_overrides())
    given = {k: v for k, v in (overrides or {}).items() if v is not None}
    layers.append(move_old_keys(given, "the overrides"))
    doc: dict[str, Any] = {}
    for layer in layers:
        _check_renamed(layer)
        doc = _merge(doc, layer)
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
