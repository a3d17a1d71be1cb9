"""Wire formats: the tensor payloads that cross the store, as safetensors blobs.

A :class:`Trajectory` is one actor invocation's rollout, a :class:`Gradient` one minibatch's
gradient; several gradients of one learner travel as one message (:meth:`Gradient.pack`).
Decoding checks names, dtypes and shapes and raises :class:`~store.errors.CorruptBlob`, never
casts silently; nothing here unpickles.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from store import decode, encode
from store.errors import CorruptBlob

# ``(name, shape)`` of each parameter, in order: how a flat vector splits back into them
Layout = tuple[tuple[str, tuple[int, ...]], ...]

_TRAJ_ARRAYS = ("obs", "actions", "logprobs", "values", "next_values", "rewards",
                "terminated", "truncated", "next_obs", "final_obs", "final_index")
# numpy dtype kinds each array may have: a blob whose tensors decode but carry the wrong
# type (ints where floats belong, a relabelled header) is corrupt, never silently cast.
_TRAJ_KINDS = {"obs": "f", "actions": "fiu", "logprobs": "f", "values": "f", "next_values": "f",
               "rewards": "f", "terminated": "biu", "truncated": "biu", "next_obs": "f",
               "final_obs": "f", "final_index": "iu"}


def _check_kinds(what: str, arrays: dict[str, np.ndarray], kinds: dict[str, str]) -> None:
    for name, ok in kinds.items():
        if name in arrays and arrays[name].dtype.kind not in ok:
            raise CorruptBlob(f"{what} array {name!r} has dtype {arrays[name].dtype}, expected "
                              f"{'a float' if ok == 'f' else 'a numeric'} dtype")


@dataclass
class Trajectory:
    """One actor invocation's rollout, time-major ``[T, N, ...]``.

    ``obs`` are normalised as the behaviour policy saw them, ``rewards`` scaled with the
    behaviour version's return statistics. ``next_values[t, n]`` is the behaviour critic's
    value of the state that followed step ``t``: ``V(obs[t+1])`` inside an episode,
    ``V(final observation)`` when the step ended the episode (a terminal step's value is
    ignored by the maths), ``V(next_obs)`` after the last step. ``final_obs`` holds the
    normalised final observations of episode-ending steps at flat indices ``final_index``
    (``t * N + n``), so a learner can re-evaluate bootstrap values with its own critic.
    """

    obs: np.ndarray  # [T, N, D] float32
    actions: np.ndarray  # [T, N, A] float32 (Box) or [T, N] int64 (Discrete)
    logprobs: np.ndarray  # [T, N] behaviour log mu(a|s)
    values: np.ndarray  # [T, N] behaviour V(s_t)
    next_values: np.ndarray  # [T, N]
    rewards: np.ndarray  # [T, N] scaled
    terminated: np.ndarray  # [T, N] bool
    truncated: np.ndarray  # [T, N] bool
    next_obs: np.ndarray  # [N, D]
    final_obs: np.ndarray  # [K, D]
    final_index: np.ndarray  # [K] int64
    behaviour_version: int
    env_id: str
    invocation_id: str
    episode_returns: list[float] = field(default_factory=list)
    episode_lengths: list[int] = field(default_factory=list)
    obs_stats: dict[str, Any] = field(default_factory=dict)
    ret_stats: dict[str, Any] = field(default_factory=dict)
    # [T] int64: the version that sampled each step when the actor picked up newer versions
    # mid-rollout; None: every step by ``behaviour_version`` (then the oldest of them).
    step_versions: np.ndarray | None = None
    # Mean over steps of how far past its version each step's weights were: a step sampled
    # with a publishing learner's preview after e of E epochs counts e / E (0: no previews).
    preview_progress: float = 0.0
    preview_steps: int = 0  # time steps (rows of T) sampled with a preview

    @property
    def steps(self) -> int:
        return int(self.obs.shape[0])

    @property
    def versions(self) -> np.ndarray:
        """[T] the policy version that sampled each step."""
        if self.step_versions is not None:
            return self.step_versions
        return np.full(self.steps, self.behaviour_version, dtype=np.int64)

    @property
    def version_mean(self) -> float:
        """How old the data is, exactly: the mean version of its steps, a preview counting
        as its base version plus its progress (what staleness is measured from)."""
        return float(np.mean(self.versions)) + self.preview_progress

    @property
    def n_envs(self) -> int:
        return int(self.obs.shape[1])

    def meta(self) -> dict[str, Any]:
        return {
            "kind": "trajectory",
            "behaviour_version": int(self.behaviour_version),
            "env_id": self.env_id,
            "n_envs": self.n_envs,
            "steps": self.steps,
            "invocation_id": self.invocation_id,
            "episode_returns": [float(x) for x in self.episode_returns],
            "episode_lengths": [int(x) for x in self.episode_lengths],
            "obs_stats": self.obs_stats,
            "ret_stats": self.ret_stats,
            "preview_progress": float(self.preview_progress),
            "preview_steps": int(self.preview_steps),
        }

    def to_blob(self) -> bytes:
        arrays = {name: getattr(self, name) for name in _TRAJ_ARRAYS}
        arrays["terminated"] = arrays["terminated"].astype(np.uint8)
        arrays["truncated"] = arrays["truncated"].astype(np.uint8)
        if self.step_versions is not None:
            arrays["step_versions"] = np.asarray(self.step_versions, dtype=np.int64)
        return encode(arrays, self.meta())

    @classmethod
    def from_blob(cls, blob: bytes) -> Trajectory:
        arrays, meta = decode(blob)
        arrays = {k: np.array(v) for k, v in arrays.items()}  # writable copies, not views
        if meta.get("kind") != "trajectory":
            raise CorruptBlob(f"blob is not a trajectory (kind={meta.get('kind')!r})")
        missing = [n for n in _TRAJ_ARRAYS if n not in arrays]
        if missing:
            raise CorruptBlob(f"trajectory blob lacks arrays {missing}")
        _check_kinds("trajectory", arrays, _TRAJ_KINDS)
        arrays["terminated"] = arrays["terminated"].astype(bool)
        arrays["truncated"] = arrays["truncated"].astype(bool)
        t, n = arrays["obs"].shape[:2]
        for name in ("logprobs", "values", "next_values", "rewards", "terminated", "truncated"):
            if arrays[name].shape != (t, n):
                raise CorruptBlob(f"trajectory array {name!r} has shape {arrays[name].shape}, "
                                  f"expected {(t, n)}")
        step_versions = arrays.pop("step_versions", None)
        if step_versions is not None and (step_versions.shape != (t,) or step_versions.dtype.kind
                                          not in "iu"):
            raise CorruptBlob(f"trajectory array 'step_versions' must be {t} integers, has "
                              f"shape {step_versions.shape} and dtype {step_versions.dtype}")
        arrays = {k: v for k, v in arrays.items() if k in _TRAJ_ARRAYS}
        return cls(
            step_versions=step_versions,
            **arrays,
            behaviour_version=int(meta["behaviour_version"]),
            env_id=str(meta["env_id"]),
            invocation_id=str(meta.get("invocation_id", "")),
            episode_returns=list(meta.get("episode_returns", [])),
            episode_lengths=list(meta.get("episode_lengths", [])),
            preview_progress=float(meta.get("preview_progress", 0.0)),
            preview_steps=int(meta.get("preview_steps", 0)),
            obs_stats=dict(meta.get("obs_stats", {})),
            ret_stats=dict(meta.get("ret_stats", {})),
        )



def flat_layout(grads: Mapping[str, np.ndarray]) -> Layout:
    """``(name, shape)`` of each named array, in order: how a flat vector splits back."""
    return tuple((name, tuple(int(d) for d in np.shape(a))) for name, a in grads.items())


def split_flat(flat: np.ndarray, layout: Layout) -> dict[str, np.ndarray]:
    """Named views into ``flat`` (no copies) along its last axis, in ``layout`` order: a
    ``[n]`` vector splits into the layout's shapes, a ``[k, n]`` stack into ``[k, *shape]``."""
    out, offset = {}, 0
    lead, size = flat.shape[:-1], flat.shape[-1] if flat.ndim else 0
    for name, shape in layout:
        n = math.prod(shape)
        if min(shape, default=0) < 0 or offset + n > size:
            raise CorruptBlob(f"gradient layout entry {name!r} {shape} does not fit its "
                              f"{size} numbers")
        out[name] = flat[..., offset:offset + n].reshape(*lead, *shape)
        offset += n
    if offset != size:
        raise CorruptBlob(f"gradient has {size} numbers, its layout describes {offset}")
    return out


@dataclass
class Gradient:
    """One minibatch gradient, keyed by the policy's ``named_parameters()`` names.

    On the wire it is **one** flat float32 vector plus its layout (names and shapes) in the
    JSON metadata: one tensor to encode, decode, weight and apply instead of one per
    parameter — a gradient crosses two processes for every minibatch, so this path is hot.
    ``grads`` are views into ``flat``.
    """

    grads: dict[str, np.ndarray]
    invocation_id: str
    epoch: int
    minibatch: int
    version_used: int
    n_samples: int
    behaviour_versions: list[int] = field(default_factory=list)
    flat: np.ndarray | None = field(default=None, repr=False, compare=False)
    # A learner that looks ahead (functions/lookahead.py): its process-unique id and this
    # gradient's place in its sequence, which the master echoes back when it publishes.
    lineage: str | None = None
    seq: int | None = None
    # ``flat_layout(grads)``, kept when known (from the wire, or from the learner's module) so
    # the aggregator does not rebuild it for every gradient it applies.
    layout: Layout | None = field(default=None, repr=False, compare=False)
    # The learning rate the learner's look-ahead stepped it with (an annealed run's rate moves
    # between invocations): the master applies it with the same one, so the prediction holds.
    lr: float | None = None

    @classmethod
    def from_flat(cls, flat: np.ndarray, layout: Layout, **fields: Any) -> Gradient:
        flat = np.ascontiguousarray(flat, dtype=np.float32).reshape(-1)
        return cls(grads=split_flat(flat, layout), flat=flat, layout=tuple(layout), **fields)

    @property
    def dedupe_id(self) -> str:
        return f"{self.invocation_id}:{self.epoch}:{self.minibatch}"

    def param_layout(self) -> Layout:
        """``(name, shape)`` of each parameter, in ``grads`` order."""
        if self.layout is None:
            self.layout = flat_layout(self.grads)
        return self.layout

    def flat_vector(self) -> np.ndarray:
        """The gradient as one float32 vector in ``grads`` order."""
        if self.flat is None:
            self.flat = np.concatenate(
                [np.asarray(g, dtype=np.float32).reshape(-1) for g in self.grads.values()])
        return self.flat

    def meta(self) -> dict[str, Any]:
        return {
            "kind": "gradient",
            "invocation_id": self.invocation_id,
            "epoch": int(self.epoch),
            "minibatch": int(self.minibatch),
            "version_used": int(self.version_used),
            "n_samples": int(self.n_samples),
            "behaviour_versions": [int(v) for v in self.behaviour_versions],
            **({"lineage": self.lineage, "seq": int(self.seq)}
               if self.lineage is not None and self.seq is not None else {}),
            **({"lr": float(self.lr)} if self.lr is not None else {}),
        }

    def to_blob(self) -> bytes:
        meta = self.meta()
        meta["layout"] = [[name, list(shape)] for name, shape in self.param_layout()]
        return encode({"flat": self.flat_vector()}, meta)

    @classmethod
    def from_blob(cls, blob: bytes) -> Gradient:
        return cls._from_decoded(*decode(blob))

    @classmethod
    def _from_decoded(cls, arrays: dict[str, np.ndarray], meta: dict[str, Any]) -> Gradient:
        if meta.get("kind") != "gradient":
            raise CorruptBlob(f"blob is not a gradient (kind={meta.get('kind')!r})")
        _check_kinds("gradient", arrays, dict.fromkeys(arrays, "f"))
        fields = _gradient_fields(meta)
        parsed = _parse_layout(meta.get("layout"))
        if set(arrays) != {"flat"} or arrays["flat"].ndim != 1:
            raise CorruptBlob(f"flat gradient blob must hold one 1-D 'flat' array, has {sorted(arrays)}")
        flat = arrays["flat"].astype(np.float32, copy=False)
        return cls(grads=split_flat(flat, parsed), flat=flat, layout=parsed, **fields)

    # -- several gradients in one message ------------------------------------------------------
    @staticmethod
    def pack(grads: list[Gradient]) -> tuple[dict[str, Any], bytes, str]:
        """Consecutive gradients of one learner as one message: (stream meta, blob, dedupe id).

        One ``[k, n]`` float32 array and one JSON list of per-gradient metadata: one encode,
        one stream entry and one decode for ``k`` gradients. Each keeps its own identity,
        version and sequence number; the aggregator still applies them one by one. One
        gradient packs as the single-gradient format.
        """
        if not grads:
            raise ValueError("nothing to pack")
        first = grads[0]
        if len(grads) == 1:
            return first.meta(), first.to_blob(), first.dedupe_id
        flats = [g.flat_vector() for g in grads]
        if len({f.size for f in flats}) != 1:
            raise ValueError("gradients of one message must have the same size")
        items = [g.meta() for g in grads]
        meta = {"kind": "gradients", "invocation_id": first.invocation_id, "count": len(grads),
                "first": [first.epoch, first.minibatch], "version_used": first.version_used}
        blob_meta = {**meta, "items": items,
                     "layout": [[name, list(shape)] for name, shape in first.param_layout()]}
        return meta, encode({"flat": np.stack(flats)}, blob_meta), f"{first.dedupe_id}+{len(grads)}"

    @classmethod
    def unpack(cls, blob: bytes) -> list[Gradient]:
        """The gradients of a stream entry: a packed message or a single gradient."""
        arrays, meta = decode(blob)
        if meta.get("kind") == "gradient":
            return [cls._from_decoded(arrays, meta)]
        if meta.get("kind") != "gradients":
            raise CorruptBlob(f"blob is not a gradient message (kind={meta.get('kind')!r})")
        _check_kinds("gradients", arrays, dict.fromkeys(arrays, "f"))
        items, layout = meta.get("items"), meta.get("layout")
        flat = arrays.get("flat")
        if not isinstance(items, list) or layout is None or flat is None or set(arrays) != {"flat"}:
            raise CorruptBlob("packed gradient blob needs 'items', 'layout' and one 'flat' array")
        if flat.ndim != 2 or flat.shape[0] != len(items):
            raise CorruptBlob(f"packed gradients: 'flat' has shape {flat.shape} for "
                              f"{len(items)} items")
        parsed = _parse_layout(layout)
        flat = flat.astype(np.float32, copy=False)
        # Split the [k, n] array by columns once (checked once), then each row's named
        # views are plain indexing: splitting 32 rows one by one was most of the decode.
        columns = split_flat(flat, parsed)
        out = []
        for i, (row, item) in enumerate(zip(flat, items, strict=True)):
            if not isinstance(item, Mapping):
                raise CorruptBlob("packed gradient item is not an object")
            grads = {name: col[i] for name, col in columns.items()}
            out.append(cls(grads=grads, flat=row, layout=parsed, **_gradient_fields(item)))
        return out


def _gradient_fields(meta: Mapping[str, Any]) -> dict[str, Any]:
    try:
        return dict(
            invocation_id=str(meta["invocation_id"]),
            epoch=int(meta["epoch"]),
            minibatch=int(meta["minibatch"]),
            version_used=int(meta["version_used"]),
            n_samples=int(meta["n_samples"]),
            behaviour_versions=[int(v) for v in meta.get("behaviour_versions", [])],
            lineage=None if meta.get("lineage") is None else str(meta["lineage"]),
            seq=None if meta.get("seq") is None else int(meta["seq"]),
            lr=None if meta.get("lr") is None else _positive(float(meta["lr"]), "lr"),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise CorruptBlob(f"gradient blob metadata is incomplete: {exc!r}") from exc


def _positive(value: float, name: str) -> float:
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"{name} must be a positive number, got {value!r}")
    return value


def _parse_layout(layout: Any) -> Layout:
    try:
        return tuple((str(name), tuple(int(d) for d in shape)) for name, shape in layout)
    except (TypeError, ValueError) as exc:
        raise CorruptBlob(f"gradient blob metadata is incomplete: malformed layout {exc!r}") from exc
