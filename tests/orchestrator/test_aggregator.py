"""The staleness-aware aggregator: weights, buffer rule, bound decay, timeout, de-dup, drop."""

from __future__ import annotations

import math

import numpy as np
import pytest

from functions.wire import Gradient
from orchestrator.aggregator import StalenessAggregator, staleness_weight
from orchestrator.config import AggregationConfig


def grad(value: float, version: int, inv: str = "inv", mb: int = 0, epoch: int = 0) -> Gradient:
    return Gradient(grads={"w": np.full(3, value, dtype=np.float32)}, invocation_id=inv,
                    epoch=epoch, minibatch=mb, version_used=version, n_samples=64)


def test_weights_follow_the_paper() -> None:
    assert staleness_weight(0, 1) == 1.0
    assert staleness_weight(1, 1) == 1.0
    assert staleness_weight(4, 1) == pytest.approx(0.5)
    assert staleness_weight(9, 1) == pytest.approx(1 / 3)
    assert staleness_weight(4, 4) == 1.0


def test_weighted_mean_is_one_step_over_h() -> None:
    agg = StalenessAggregator(AggregationConfig(buffer_max=3, warmup_rounds=0))
    agg.delta_max = 0.0  # beta = 1
    v_now = 10
    assert agg.offer(grad(1.0, 6, mb=0), "e0", v_now, 0.0) == "buffered"  # delta 4 -> w 0.5
    assert agg.should_aggregate(v_now, 0.0) is None  # mean staleness 4 > beta 1
    agg.offer(grad(2.0, 1, mb=1), "e1", v_now, 0.0)  # delta 9 -> w 1/3
    agg.offer(grad(3.0, 10, mb=2), "e2", v_now, 0.0)  # delta 0 -> w 1
    assert agg.should_aggregate(v_now, 0.0) == "full"
    out = agg.take(v_now, "full")
    expected = (0.5 * 1.0 + (1 / 3) * 2.0 + 1.0 * 3.0) / 3
    np.testing.assert_allclose(out.grads["w"], np.full(3, expected), rtol=1e-6)
    assert out.staleness == [4, 9, 0] and out.entry_ids == ["e0", "e1", "e2"]
    assert agg.aggregations == 1 and not agg.buffer


def test_unweighted_ablation() -> None:
    agg = StalenessAggregator(AggregationConfig(buffer_max=2, warmup_rounds=0, staleness_weights=False))
    agg.offer(grad(1.0, 0, mb=0), "a", 9, 0.0)
    agg.offer(grad(3.0, 9, mb=1), "b", 9, 0.0)
    out = agg.take(9, "full")
    np.testing.assert_allclose(out.grads["w"], np.full(3, 2.0))


def test_warmup_is_fully_async_and_measures_delta_max() -> None:
    agg = StalenessAggregator(AggregationConfig(buffer_max=8, warmup_rounds=1))
    assert agg.beta() == math.inf
    for i, delta in enumerate([2, 5, 3]):
        agg.offer(grad(1.0, 10 - delta, mb=i), f"e{i}", 10, 0.0)
        assert agg.should_aggregate(10, 0.0) == "warmup"
        agg.take(10, "warmup")
    assert agg.delta_max == 5
    assert agg.in_warmup  # aggregations do not end the warm-up: a round does
    assert agg.consumed(2048, batch_steps=2048) == 1
    assert not agg.in_warmup
    assert agg.beta() == pytest.approx(5.0)  # k = 0


def test_bound_decays_per_round_not_per_aggregation() -> None:
    rule = AggregationConfig(buffer_max=100, warmup_rounds=1, decay=0.5)
    agg = StalenessAggregator(rule)
    agg.offer(grad(1.0, 2, mb=0), "e", 10, 0.0)
    agg.take(10, "warmup")  # delta_max = 8
    agg.consumed(2048, 2048)
    betas = []
    for k in range(5):
        betas.append(agg.beta())
        for j in range(50):  # hundreds of aggregations within a round leave k alone
            agg.offer(grad(1.0, 10, mb=100 * k + j + 1), f"e{k}.{j}", 10, 0.0)
            agg.take(10, "bound")
        assert agg.beta() == betas[-1]
        # a batch of 1,000 steps is half a round: k moves once per 2,048 consumed
        agg.consumed(1000, 2048)
        agg.consumed(1048, 2048)
    assert betas == [8.0, 4.0, 2.0, 1.0, 1.0]
    assert [r for r, _, _ in agg.bound_trajectory] == [1, 2, 3, 4, 5, 6]
    assert agg.bound_trajectory[1] == (2, 4096, 4.0)
    no_decay = StalenessAggregator(AggregationConfig(buffer_max=100, warmup_rounds=0, bound_decay=False))
    no_decay.delta_max = 8.0
    no_decay.rounds = 50
    assert no_decay.beta() == 8.0


def test_bound_rule_fires_when_mean_staleness_is_low_enough() -> None:
    agg = StalenessAggregator(AggregationConfig(buffer_max=10, warmup_rounds=0))
    agg.delta_max = 2.0  # beta 2
    agg.offer(grad(1.0, 5, mb=0), "a", 10, 0.0)  # delta 5
    assert agg.should_aggregate(10, 0.1) is None
    agg.offer(grad(1.0, 10, mb=1), "b", 10, 0.1)  # delta 0 -> mean 2.5
    assert agg.should_aggregate(10, 0.2) is None
    agg.offer(grad(1.0, 10, mb=2), "c", 10, 0.2)  # mean 5/3 <= 2
    assert agg.should_aggregate(10, 0.3) == "bound"


def test_timeout_never_blocks_forever() -> None:
    agg = StalenessAggregator(AggregationConfig(buffer_max=10, warmup_rounds=0, timeout_s=2.0))
    agg.offer(grad(1.0, 0, mb=0), "a", 100, now=50.0)
    assert agg.should_aggregate(100, 51.0) is None
    assert agg.should_aggregate(100, 52.0) == "timeout"


def test_duplicates_are_never_applied_twice() -> None:
    agg = StalenessAggregator(AggregationConfig(buffer_max=1, warmup_rounds=0))
    assert agg.offer(grad(1.0, 0, inv="x", mb=3), "a", 0, 0.0) == "buffered"
    assert agg.offer(grad(1.0, 0, inv="x", mb=3), "a2", 0, 0.0) == "duplicate"  # in buffer
    agg.take(0, "full")
    assert agg.offer(grad(1.0, 0, inv="x", mb=3), "a3", 1, 0.0) == "duplicate"  # applied
    assert agg.offer(grad(1.0, 0, inv="x", mb=3, epoch=1), "a4", 1, 0.0) == "buffered"
    assert agg.duplicates == 2


def test_hard_drop_is_counted() -> None:
    agg = StalenessAggregator(AggregationConfig(buffer_max=1, warmup_rounds=0, drop_staleness=3))
    assert agg.offer(grad(1.0, 0, mb=0), "a", 10, 0.0) == "dropped"
    assert agg.offer(grad(1.0, 8, mb=1), "b", 10, 0.0) == "buffered"
    assert agg.dropped == 1
    assert agg.offer(grad(1.0, 0, mb=0), "a", 10, 0.0) == "duplicate"


def test_an_aggregate_steps_with_its_gradients_learning_rate() -> None:
    agg = StalenessAggregator(AggregationConfig(buffer_max=2, warmup_rounds=0))
    agg.offer(grad(1.0, 9, mb=0), "a", 9, 0.0)
    assert agg.take(9, "full").lr is None  # no rate given: the master keeps its own
    for mb, lr in enumerate((2e-4, 1e-4)):
        g = grad(1.0, 9, mb=mb + 1)
        g.lr = lr
        agg.offer(g, f"e{mb}", 9, 0.0)
    assert agg.take(9, "full").lr == pytest.approx(1.5e-4)  # H > 1: their mean
