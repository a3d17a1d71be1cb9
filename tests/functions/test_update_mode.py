"""The learner in update mode against a real Redis: the version it publishes with its Adam
state, and the previews it stores on the way."""

from __future__ import annotations

import numpy as np
import pytest
from fn_helpers import ev, publish_init, sample

from functions import actor, learner
from functions.normalizer import RunningMeanStd
from store import RunStore


def test_update_mode_publishes_and_keeps_adam_state(run_store, redis_url):
    publish_init(run_store, "CartPole-v1")
    ids = sample(run_store, redis_url, n=2)
    stats = RunningMeanStd((4,))
    stats.merge(100, [1.0, 2.0, 3.0, 4.0], [1.0, 1.0, 1.0, 1.0])
    hyper = {"update_epochs": 2, "num_minibatches": 4}
    out = learner.handler(ev(run_store, redis_url, mode="update", trajectory_ids=ids,
                             target_version=1, hyper=hyper, obs_stats=stats.to_dict()))
    assert out["published_version"] == 1 and out["optimizer_steps"] == 8
    assert out["versions_used"] == [0]
    snap = run_store.params.latest()
    assert snap.version == 1 and snap.meta["env_id"] == "CartPole-v1"
    np.testing.assert_allclose(snap.tensors["obs_rms.mean"], stats.mean)
    before = run_store.params.get(0).tensors
    assert not np.array_equal(before["actor.0.weight"], snap.tensors["actor.0.weight"])
    arrays, meta = run_store.get_state("optimizer")
    assert meta["version"] == 1 and arrays["step.actor.0.weight"][0] == 8
    # the next round continues from the stored Adam state (and a warm cached module)
    out2 = learner.handler(ev(run_store, redis_url, mode="update", trajectory_ids=ids,
                              target_version=2, hyper=hyper))
    assert out2["versions_used"] == [1]
    arrays, _ = run_store.get_state("optimizer")
    assert arrays["step.actor.0.weight"][0] == 16
    # without obs_stats the version's own statistics are carried over
    np.testing.assert_allclose(run_store.params.latest().tensors["obs_rms.mean"], stats.mean)
    with pytest.raises(learner.StalePublish, match="version 2"):
        learner.handler(ev(run_store, redis_url, mode="update", trajectory_ids=ids,
                           target_version=2, hyper=hyper))


def test_update_mode_previews_change_nothing_but_the_preview(redis_url, monkeypatch):
    """With previews the update publishes the same version bit for bit, and stores its
    weights after each epoch but the last as a preview of it while it runs."""
    from store import ParamStore, Store

    stamps: list[str] = []
    orig = ParamStore.publish_preview

    def spy(self, *a, **k):
        ok = orig(self, *a, **k)
        stamps.append(self.fetch_newest(None).token)
        return ok

    monkeypatch.setattr(ParamStore, "publish_preview", spy)
    published = []
    for previews in (False, True):
        rs = RunStore(Store(redis_url), f"preview-{previews}-{np.random.randint(1 << 30)}")
        try:
            publish_init(rs, "CartPole-v1")
            ids = [actor.handler(ev(rs, redis_url, env_id="CartPole-v1", n_envs=4, steps=32,
                                    seed=i, invocation_id=f"a-{i}"))["trajectory_id"]
                   for i in range(2)]
            learner.POLICIES.clear()
            out = learner.handler(ev(rs, redis_url, mode="update", trajectory_ids=ids, seed=3,
                                     target_version=1, previews=previews, invocation_id="u-p",
                                     hyper={"update_epochs": 3, "num_minibatches": 4}))
            assert out["previews"] == (2 if previews else 0)
            published.append(rs.params.latest().tensors)
            assert rs.params.fetch_newest(None).token == "1"  # type: ignore[union-attr]
        finally:
            rs.clear()
    assert stamps == ["0:u-p:1", "0:u-p:2"]
    assert published[0].keys() == published[1].keys()
    for name in published[0]:
        np.testing.assert_array_equal(published[0][name], published[1][name])


def test_a_failed_preview_never_fails_the_update(run_store, redis_url, monkeypatch):
    """A preview is only a fresher behaviour policy: a store error writing one stops the
    previews of that invocation, and the update still publishes its version."""
    from store import ParamStore
    from store.errors import StoreUnavailable

    calls = []

    def down(self, *a, **k):
        calls.append(a)
        raise StoreUnavailable("redis://127.0.0.1:1", ConnectionError("outage"))

    monkeypatch.setattr(ParamStore, "publish_preview", down)
    publish_init(run_store, "CartPole-v1")
    ids = sample(run_store, redis_url, n=1)
    out = learner.handler(ev(run_store, redis_url, mode="update", trajectory_ids=ids,
                             target_version=1, previews=True,
                             hyper={"update_epochs": 4, "num_minibatches": 2}))
    assert out["published_version"] == 1 and out["previews"] == 0 and len(calls) == 1
    assert run_store.params.latest_version() == 1
