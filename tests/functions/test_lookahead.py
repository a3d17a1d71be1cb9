"""Look-ahead learners: the prediction of the master's weights, exact with one learner, and
the rebase when the master's sequence differs (real Redis, the real learner handler)."""

from __future__ import annotations

import torch
from fn_helpers import SMALL, ev, sample

from functions import actor, learner
from functions.adam import ADAM_EPS
from functions.batch import build_batch, group_rollouts, load_trajectories
from functions.compiled import MinibatchLoss
from functions.epochs import minibatches
from functions.hyper import PPOHyper
from functions.lookahead import LOOKAHEADS, Lookahead
from functions.policy import init_policy
from functions.wire import Gradient
from orchestrator.master import MasterPolicy
from store import Applied, RunStore

LR, BETAS, EPS = 3e-4, (0.9, 0.999), ADAM_EPS


def _grad(la: Lookahead, seed: int) -> torch.Tensor:
    return torch.randn(la.flat.numel(), generator=torch.Generator().manual_seed(seed))


def test_confirmations_that_match_the_prediction_need_no_rebase():
    model, _ = init_policy("CartPole-v1", SMALL, 0)
    la = Lookahead(model, 5, LR, BETAS, EPS)
    assert [la.step(_grad(la, i)) for i in range(3)] == [(1, 5), (2, 6), (3, 7)]
    assert la.version == 8
    # nothing applied yet: the master is still at 5, where the first unconfirmed one applies
    assert not la.diverged(Applied(latest=5))
    # the master applied seq 2 at version 6 -> published 7: as predicted
    assert not la.diverged(Applied(latest=7, seq=2, version=7))
    assert [s.seq for s in la.sent] == [3]
    # another learner's gradient came in after seq 2: latest 8, not the predicted 7
    assert la.diverged(Applied(latest=8, seq=2, version=7))


def test_a_gradient_applied_at_another_version_is_a_divergence():
    model, _ = init_policy("CartPole-v1", SMALL, 0)
    la = Lookahead(model, 0, LR, BETAS, EPS)
    la.step(_grad(la, 0))
    la.step(_grad(la, 1))
    assert la.diverged(Applied(latest=3, seq=1, version=3))  # predicted to produce version 1


def test_rebase_keeps_the_unconfirmed_steps_on_top_of_the_masters_weights():
    model, _ = init_policy("CartPole-v1", SMALL, 0)
    la = Lookahead(model, 0, LR, BETAS, EPS)
    la.step(_grad(la, 0))  # confirmed below
    before_pending = la.flat.detach().clone()
    la.step(_grad(la, 1))
    la.step(_grad(la, 2))
    pending = la.flat.detach() - before_pending
    master = torch.randn(la.flat.numel(), generator=torch.Generator().manual_seed(9))
    la.confirm(Applied(latest=2, seq=1, version=1))  # a foreign step made it version 2

    def load() -> None:
        with torch.no_grad():
            for p, sl in zip(model.parameters(), _slices(model), strict=True):
                p.copy_(master[sl].view_as(p))  # as load_policy_tensors does: into the views

    la.rebase(2, load)
    torch.testing.assert_close(la.flat.detach(), master + pending)
    assert la.version == 4 and [s.version for s in la.sent] == [2, 3]
    torch.testing.assert_close(la.sent[0].before, master)
    assert not la.diverged(Applied(latest=2, seq=1, version=1))


def _slices(model: torch.nn.Module) -> list[slice]:
    out, offset = [], 0
    for p in model.parameters():
        out.append(slice(offset, offset + p.numel()))
        offset += p.numel()
    return out


def _apply_all(rs: RunStore, master: MasterPolicy, seen: list[Gradient] | None = None) -> list[int]:
    """The aggregator's part, one Adam step per gradient in stream order; returns the
    staleness of each and publishes with what it applied per lineage."""
    rs.grads.ensure_group("agg", start_id="0")
    staleness, applied = [], {}
    for entry in rs.grads.read("agg", "t", count=10_000, block_ms=None):
        g = Gradient.from_blob(entry.blob)
        if seen is not None:
            seen.append(g)
        staleness.append(master.version - g.version_used)
        master.apply(g.flat_vector(), lr=g.lr)
        applied[g.lineage] = (g.seq, master.version)
        rs.grads.ack("agg", [entry.id])
    master.publish(rs, applied=applied)
    return staleness


def test_one_lookahead_learner_predicts_the_master_exactly(run_store, redis_url):
    master = MasterPolicy("CartPole-v1", SMALL, seed=0, learning_rate=LR)
    master.publish(run_store)
    hyper = {"update_epochs": 2, "num_minibatches": 4}
    for k in range(2):  # two invocations: the second starts from the first's state
        ids = sample(run_store, redis_url, n=1)
        out = learner.handler(ev(run_store, redis_url, trajectory_ids=ids, hyper=hyper,
                                 invocation_id=f"L{k}", lookahead=True))
        assert out["gradients"] == 8 and out["lookahead_rebases"] == 0
        assert out["versions_used"] == list(range(8 * k, 8 * k + 8))  # predicted versions
        assert _apply_all(run_store, master) == [0] * 8
        la = LOOKAHEADS.get(run_store)
        assert la is not None and la.version == master.version == 8 * (k + 1)
        assert torch.equal(la.flat.detach(), master.flat.detach())  # same numbers, same kernel


def test_an_annealed_learning_rate_keeps_the_prediction_exact(run_store, redis_url):
    # anneal_lr: each invocation gets its own rate; the warm look-ahead keeps its Adam moments,
    # steps with the new rate, and tags every gradient with it for the master
    master = MasterPolicy("CartPole-v1", SMALL, seed=0, learning_rate=LR)
    master.publish(run_store)
    first = None
    for k, rate in enumerate((LR, LR / 2, LR / 10)):
        ids = sample(run_store, redis_url, n=1)
        out = learner.handler(ev(run_store, redis_url, trajectory_ids=ids, invocation_id=f"A{k}",
                                 hyper={"update_epochs": 2, "num_minibatches": 4,
                                        "learning_rate": rate}, lookahead=True))
        assert out["gradients"] == 8 and out["lookahead_rebases"] == 0
        seen: list[Gradient] = []
        assert _apply_all(run_store, master, seen) == [0] * 8
        assert {g.lr for g in seen} == {rate}
        la = LOOKAHEADS.get(run_store)
        first = first or la
        assert la is first  # the same warm look-ahead, not a cold one per rate
        assert master.adam.lr == la.lr == rate
        assert torch.equal(la.flat.detach(), master.flat.detach())


def test_lookahead_learner_rebases_onto_foreign_steps(run_store, redis_url):
    master = MasterPolicy("CartPole-v1", SMALL, seed=0, learning_rate=LR)
    master.publish(run_store)
    warm_up = {"update_epochs": 8, "num_minibatches": 8}  # Adam's moments past their start
    learner.handler(ev(run_store, redis_url, trajectory_ids=sample(run_store, redis_url),
                       hyper=warm_up, invocation_id="A", lookahead=True))
    seen: list[Gradient] = []
    assert _apply_all(run_store, master, seen) == [0] * 64
    # another learner's step (a real gradient, as another learner would send): version 65
    # holds weights this learner did not predict
    master.apply(seen[0].flat_vector())
    master.publish(run_store)
    at_5 = master.flat.detach().clone()
    out = learner.handler(ev(run_store, redis_url, trajectory_ids=sample(run_store, redis_url),
                             hyper={"update_epochs": 1, "num_minibatches": 4},
                             invocation_id="B", lookahead=True))
    assert out["versions_used"] == [65, 66, 67, 68]  # started from the master's version 65
    assert _apply_all(run_store, master) == [0] * 4
    la = LOOKAHEADS.get(run_store)
    # Only Adam's moments differ (they lack the foreign step): the prediction misses by a
    # part of the 4 steps it predicts (0.1-0.3 of them here, with the data the warm env gives)
    miss = torch.linalg.vector_norm(la.flat.detach() - master.flat.detach())
    moved = torch.linalg.vector_norm(master.flat.detach() - at_5)
    assert float(miss) < 0.5 * float(moved), (float(miss), float(moved))


def test_a_learner_invocation_equals_the_lean_ppo_update(run_store, redis_url):
    """The async learner (look-ahead, packed messages) and the lean PPO's update loop
    (torch.optim.Adam on the module, clip_grad_norm_) end one batch at the same weights from
    the same trajectory, start and minibatch order: the benchmarks' reference runs the same
    maths, so a gap between them in env steps is not in the learner."""
    import zlib

    master = MasterPolicy("Pendulum-v1", SMALL, seed=0, learning_rate=LR)
    master.publish(run_store)
    ids = sample(run_store, redis_url, "Pendulum-v1", n=1)
    hyper = PPOHyper(update_epochs=3, num_minibatches=4, learning_rate=LR)
    out = learner.handler(ev(run_store, redis_url, trajectory_ids=ids, invocation_id="L0",
                             hyper=hyper.model_dump(), lookahead=True, seed=1, compile=False))
    assert out["gradients"] == 12
    la = LOOKAHEADS.get(run_store)

    model, _ = init_policy("Pendulum-v1", SMALL, 0)
    start = torch.cat([p.detach().reshape(-1) for p in model.parameters()]).clone()
    opt = torch.optim.Adam(model.parameters(), lr=LR, eps=EPS, betas=BETAS)
    batch = build_batch(model, group_rollouts(load_trajectories(run_store, ids),
                                              torch.device("cpu")), hyper, [])
    gen = torch.Generator().manual_seed((1 * 1_000_003 + zlib.crc32(b"L0")) % (2**63))
    loss_fn = MinibatchLoss(hyper, compile=False)
    for _ in range(hyper.update_epochs):
        for idx in minibatches(len(batch), hyper, gen):
            loss, _ = loss_fn(model, batch, idx)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), hyper.max_grad_norm)
            opt.step()
    lean = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    moved = torch.linalg.vector_norm(lean - start)
    assert float(moved) > 1e-3  # it learned something
    assert float(torch.linalg.vector_norm(lean - la.flat.detach())) < 1e-4 * float(moved)


def _rollout(rs: RunStore, redis_url: str, k: int) -> list[str]:
    """One actor invocation whose noise depends on ``k`` only (not on the run id)."""
    out = actor.handler(ev(rs, redis_url, env_id="CartPole-v1", n_envs=4, steps=32, seed=k,
                           invocation_id=f"a-{k}"))
    return [out["trajectory_id"]]


def test_a_publishing_learner_ends_where_the_master_applying_its_gradients_ends(
        run_store, store, redis_url):
    """``learner_publishes``: one learner in update mode with the master's Adam ends two
    invocations at the weights the look-ahead learner's streamed gradients give the master
    (the Adam moments carried over in the store) — the same learning, without the stream."""
    betas = (0.5, 0.999)  # not Adam's default: the event's betas must reach the update
    other = RunStore(store, run_store.run_id + "-publishes")
    try:
        master = MasterPolicy("CartPole-v1", SMALL, seed=0, learning_rate=LR, adam_beta1=0.5)
        master.publish(run_store)
        MasterPolicy("CartPole-v1", SMALL, seed=0, learning_rate=LR, adam_beta1=0.5).publish(other)
        for k in range(2):
            common = {"hyper": {"update_epochs": 2, "num_minibatches": 4, "learning_rate": LR},
                      "invocation_id": f"L{k}", "seed": k, "master_adam_betas": list(betas),
                      "compile": False}
            ids = _rollout(run_store, redis_url, k)
            learner.handler(ev(run_store, redis_url, trajectory_ids=ids, lookahead=True, **common))
            _apply_all(run_store, master)
            out = learner.handler(ev(other, redis_url, trajectory_ids=_rollout(other, redis_url, k),
                                     mode="update", target_version=k + 1, **common))
            assert out["published_version"] == k + 1 and out["optimizer_steps"] == 8
        published = other.params.latest()
        start, _ = init_policy("CartPole-v1", SMALL, 0)
        for name, p in start.named_parameters():
            want = master.tensors()[name]
            moved = float(torch.linalg.vector_norm(torch.from_numpy(want) - p.detach()))
            assert moved > 1e-4, name  # it learned something
            gap = float(torch.linalg.vector_norm(torch.from_numpy(published.tensors[name] - want)))
            assert gap <= 1e-5 * moved, (name, gap, moved)
    finally:
        other.clear()
