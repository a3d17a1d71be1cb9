"""RunningMeanStd: merging equals numpy on the concatenated data."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from functions.normalizer import RunningMeanStd, merge_stats

sizes = st.lists(st.integers(min_value=1, max_value=40), min_size=1, max_size=5)


@settings(max_examples=40, deadline=None)
@given(sizes=sizes, seed=st.integers(0, 2**31 - 1), dim=st.integers(1, 4))
def test_merge_equals_numpy_on_concatenated(sizes: list[int], seed: int, dim: int) -> None:
    rng = np.random.default_rng(seed)
    chunks = [rng.normal(loc=rng.normal() * 5, scale=rng.random() * 3 + 0.1, size=(n, dim))
              for n in sizes]
    rms = RunningMeanStd((dim,), epsilon=0.0)
    rms.count = 0.0
    for c in chunks:
        s = RunningMeanStd.from_batch(c, (dim,))
        rms.merge(s.count, s.mean, s.var)
    data = np.concatenate(chunks)
    np.testing.assert_allclose(rms.mean, data.mean(axis=0), rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(rms.var, data.var(axis=0), rtol=1e-9, atol=1e-10)
    assert rms.count == len(data)


def test_update_matches_cleanrl_semantics_with_pseudo_count() -> None:
    rng = np.random.default_rng(0)
    a, b = rng.normal(size=(100, 3)), rng.normal(2.0, 3.0, size=(50, 3))
    rms = RunningMeanStd((3,))
    rms.update(a)
    rms.update(b)
    # the 1e-4 pseudo-count at mean 0 / var 1 barely moves the result
    data = np.concatenate([a, b])
    np.testing.assert_allclose(rms.mean, data.mean(0), atol=1e-5)
    np.testing.assert_allclose(rms.var, data.var(0), atol=1e-5)
    assert rms.count == pytest.approx(150 + 1e-4)


def test_scalar_stats_round_trip_and_merge_stats() -> None:
    rng = np.random.default_rng(1)
    parts = [rng.normal(size=20), rng.normal(3.0, size=30)]
    base = RunningMeanStd(())
    reported = [RunningMeanStd.from_batch(p).to_dict() for p in parts]
    merged = merge_stats(base, reported)
    assert base.count == pytest.approx(1e-4)  # merge_stats does not mutate its input
    data = np.concatenate(parts)
    assert merged.mean == pytest.approx(data.mean(), abs=1e-4)
    assert merged.var == pytest.approx(data.var(), abs=1e-4)
    again = RunningMeanStd.from_dict(merged.to_dict())
    assert again.to_dict() == merged.to_dict()
    assert isinstance(merged.to_dict()["mean"], float)


def test_merge_ignores_empty_and_normalize_clips() -> None:
    rms = RunningMeanStd((2,))
    rms.merge(0, [5.0, 5.0], [1.0, 1.0])
    assert rms.mean.tolist() == [0.0, 0.0]
    out = rms.normalize(np.array([[100.0, -0.5]]), clip=10.0)
    assert out.dtype == np.float32
    assert out[0, 0] == 10.0 and out[0, 1] == pytest.approx(-0.5, rel=1e-6)
