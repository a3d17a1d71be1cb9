"""The wire formats' blob round trips, packed gradients, and corrupt blobs refused."""

from __future__ import annotations

import numpy as np
import pytest

from functions.wire import Gradient, Trajectory
from store import encode
from store.errors import CorruptBlob


def _traj() -> Trajectory:
    rng = np.random.default_rng(0)
    T, N, D = 5, 2, 3
    return Trajectory(
        obs=rng.normal(size=(T, N, D)).astype(np.float32),
        actions=rng.integers(0, 2, size=(T, N)),
        logprobs=rng.normal(size=(T, N)).astype(np.float32),
        values=rng.normal(size=(T, N)).astype(np.float32),
        next_values=rng.normal(size=(T, N)).astype(np.float32),
        rewards=rng.normal(size=(T, N)).astype(np.float32),
        terminated=rng.random((T, N)) < 0.2,
        truncated=rng.random((T, N)) < 0.2,
        next_obs=rng.normal(size=(N, D)).astype(np.float32),
        final_obs=rng.normal(size=(1, D)).astype(np.float32),
        final_index=np.array([3]),
        behaviour_version=4,
        env_id="CartPole-v1",
        invocation_id="inv",
        episode_returns=[1.5],
        episode_lengths=[7],
        obs_stats={"count": 10.0, "mean": [0.0] * 3, "var": [1.0] * 3},
        ret_stats={"count": 10.0, "mean": 0.0, "var": 1.0},
    )


def test_trajectory_blob_round_trip() -> None:
    tr = _traj()
    back = Trajectory.from_blob(tr.to_blob())
    for name in ("obs", "actions", "logprobs", "values", "next_values", "rewards", "terminated",
                 "truncated", "next_obs", "final_obs", "final_index"):
        a, b = getattr(tr, name), getattr(back, name)
        assert a.dtype == b.dtype and np.array_equal(a, b), name
    assert back.meta() == tr.meta() and back.steps == 5 and back.n_envs == 2


def test_gradient_blob_round_trip() -> None:
    g = Gradient(grads={"actor.0.weight": np.ones((2, 3), np.float32)}, invocation_id="i",
                 epoch=1, minibatch=2, version_used=3, n_samples=64, behaviour_versions=[1, 2])
    back = Gradient.from_blob(g.to_blob())
    assert back.meta() == g.meta() and back.dedupe_id == "i:1:2"
    assert np.array_equal(back.grads["actor.0.weight"], g.grads["actor.0.weight"])


def _grad(mb: int, **kw) -> Gradient:
    flat = np.arange(10, dtype=np.float32) + mb
    return Gradient.from_flat(flat, (("w", (2, 3)), ("b", (4,))), invocation_id="i", epoch=0,
                              minibatch=mb, version_used=7 + mb, n_samples=64, **kw)


def test_packed_gradients_round_trip_each_with_its_own_identity() -> None:
    grads = [_grad(mb, lineage="L", seq=mb + 1) for mb in range(3)]
    meta, blob, dedupe = Gradient.pack(grads)
    assert dedupe == "i:0:0+3" and meta["count"] == 3 and meta["kind"] == "gradients"
    back = Gradient.unpack(blob)
    assert [g.meta() for g in back] == [g.meta() for g in grads]
    for a, b in zip(back, grads, strict=True):
        assert np.array_equal(a.flat_vector(), b.flat_vector())
        assert np.array_equal(a.grads["w"], b.grads["w"]) and a.grads["b"].shape == (4,)
    # one gradient packs as the single-gradient format, which unpack also reads
    meta1, blob1, dedupe1 = Gradient.pack(grads[:1])
    assert meta1["kind"] == "gradient" and dedupe1 == "i:0:0"
    assert [g.meta() for g in Gradient.unpack(blob1)] == [grads[0].meta()]


def test_corrupt_packed_gradients() -> None:
    _, blob, _ = Gradient.pack([_grad(0), _grad(1)])
    with pytest.raises(CorruptBlob):
        Gradient.unpack(blob[:60])
    with pytest.raises(CorruptBlob, match="shape"):  # rows and items disagree
        Gradient.unpack(encode({"flat": np.zeros((3, 10), np.float32)},
                               {"kind": "gradients", "items": [_grad(0).meta()],
                                "layout": [["w", [10]]]}))
    with pytest.raises(CorruptBlob, match="incomplete"):
        Gradient.unpack(encode({"flat": np.zeros((1, 10), np.float32)},
                               {"kind": "gradients", "items": [{"epoch": 0}],
                                "layout": [["w", [10]]]}))
    with pytest.raises(CorruptBlob, match="dtype"):
        Gradient.unpack(encode({"flat": np.zeros((1, 10), np.int32)},
                               {"kind": "gradients", "items": [_grad(0).meta()],
                                "layout": [["w", [10]]]}))
    with pytest.raises(CorruptBlob, match="not a gradient message"):
        Gradient.unpack(encode({"x": np.zeros(1)}, {"kind": "trajectory"}))
    with pytest.raises(ValueError, match="nothing"):
        Gradient.pack([])


def test_corrupt_or_wrong_blobs() -> None:
    blob = _traj().to_blob()
    with pytest.raises(CorruptBlob):
        Trajectory.from_blob(blob[:50])
    with pytest.raises(CorruptBlob, match="not a trajectory"):
        Trajectory.from_blob(encode({"x": np.zeros(1)}, {"kind": "gradient"}))
    with pytest.raises(CorruptBlob, match="not a gradient"):
        Gradient.from_blob(blob)
    with pytest.raises(CorruptBlob, match="lacks arrays"):
        Trajectory.from_blob(encode({"obs": np.zeros((1, 1, 1))}, {"kind": "trajectory"}))
    with pytest.raises(CorruptBlob, match="incomplete"):
        Gradient.from_blob(encode({"x": np.zeros(1)}, {"kind": "gradient"}))


def test_a_gradient_carries_the_learning_rate_it_was_stepped_with() -> None:
    grads = [_grad(mb, lineage="L", seq=mb + 1, lr=1.5e-4) for mb in range(2)]
    assert [g.lr for g in Gradient.unpack(Gradient.pack(grads)[1])] == [1.5e-4, 1.5e-4]
    assert Gradient.from_blob(grads[0].to_blob()).lr == 1.5e-4
    assert "lr" not in _grad(0).meta() and Gradient.from_blob(_grad(0).to_blob()).lr is None
    for bad in (-1e-4, 0.0, float("nan")):
        with pytest.raises(CorruptBlob, match="lr"):
            Gradient.unpack(encode({"flat": np.zeros((1, 10), np.float32)},
                                   {"kind": "gradients", "items": [{**_grad(0).meta(), "lr": bad}],
                                    "layout": [["w", [10]]]}))


def test_a_gradient_blob_without_a_layout_is_corrupt() -> None:
    """Every gradient travels as one flat vector and its layout; per-parameter arrays with
    no layout are no gradient this code wrote."""
    meta = {**_grad(0).meta()}
    with pytest.raises(CorruptBlob, match="layout"):
        Gradient.from_blob(encode({"w": np.zeros(6, np.float32), "b": np.zeros(4, np.float32)},
                                  meta))
