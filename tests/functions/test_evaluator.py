"""The evaluator handler against a real Redis."""

from __future__ import annotations

import numpy as np
import pytest
from fn_helpers import ev, publish_init

from functions import evaluator


def test_evaluator_is_deterministic(run_store, redis_url):
    publish_init(run_store, "Pendulum-v1")
    e = ev(run_store, redis_url, episodes=2, seed=3, max_steps=50)
    a, b = evaluator.handler(e), evaluator.handler(e)
    assert a["returns"] == b["returns"] and a["lengths"] == [50, 50]
    assert a["version"] == 0 and a["mean_return"] == pytest.approx(np.mean(a["returns"]))
    assert a["std_return"] == pytest.approx(np.std(a["returns"]))
