"""Warm execution environments: per-thread envs and modules for in-process invocations."""

from __future__ import annotations

import concurrent.futures as cf

import numpy as np
import torch
from fn_helpers import ev, publish_init

from functions import actor, learner
from functions.wire import Trajectory


def test_concurrent_in_process_invocations_do_not_share_envs_or_modules(run_store, redis_url,
                                                                      monkeypatch):
    """An inline invoker runs handlers on a thread pool: each thread is its own warm env."""
    import threading
    import warnings

    model = publish_init(run_store, "CartPole-v1")
    # two invocations provably inside their rollouts at the same time
    barrier, seen, orig = threading.Barrier(2, timeout=60), [], actor.rollout

    def rollout(wenv, pol, ev_, refresh=None):
        seen.append((id(wenv), id(pol.model)))
        barrier.wait()
        return orig(wenv, pol, ev_, refresh)

    monkeypatch.setattr(actor, "rollout", rollout)
    e0 = ev(run_store, redis_url, env_id="CartPole-v1", n_envs=2, steps=8)
    with cf.ThreadPoolExecutor(2) as pool:
        for f in [pool.submit(actor.handler, {**e0, "seed": i}) for i in range(2)]:
            f.result(timeout=120)
    assert len({s[0] for s in seen}) == 2 and len({s[1] for s in seen}) == 2
    monkeypatch.setattr(actor, "rollout", orig)

    e = ev(run_store, redis_url, env_id="CartPole-v1", n_envs=4, steps=200)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # e.g. gymnasium's "step() after terminated"
        with cf.ThreadPoolExecutor(3) as pool:
            actors = [pool.submit(actor.handler, {**e, "seed": i}) for i in range(6)]
            outs = [f.result(timeout=120) for f in actors]
            ids = [o["trajectory_id"] for o in outs]
            learners = [pool.submit(learner.handler, ev(run_store, redis_url,
                                                        trajectory_ids=ids[i:i + 2],
                                                        hyper={"update_epochs": 2}))
                        for i in range(0, 6, 2)]
            assert all(f.result(timeout=120)["gradients"] == 64 for f in learners)
    for entry in run_store.traj.get(ids):
        tr = Trajectory.from_blob(entry.blob)
        with torch.no_grad():
            logp, _ = model.log_prob_entropy(torch.from_numpy(tr.obs), torch.from_numpy(tr.actions))
        np.testing.assert_allclose(tr.logprobs, logp.numpy(), rtol=1e-5, atol=1e-5)
        # SAME_STEP autoreset: rows after an episode end start a fresh episode
        assert tr.terminated.any()
