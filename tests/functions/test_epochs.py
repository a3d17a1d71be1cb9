"""The update's epoch loop: every sample once per epoch, V-trace's targets rebuilt per epoch,
and CleanRL's target_kl early stop (on its own, and through both learner modes)."""

from __future__ import annotations

import pytest
import torch
from fn_helpers import ev, publish_init, sample

from functions import learner
from functions.batch import synthetic_batch
from functions.compiled import Stats
from functions.epochs import run_epochs
from functions.hyper import PPOHyper
from functions.policy import init_policy


@pytest.mark.parametrize("mode", ["update", "gradient"])
def test_target_kl_ends_the_update_after_the_epoch_that_exceeds_it(run_store, redis_url, mode):
    """CleanRL's ``target_kl``: with a bound the first epoch's steps already exceed, the
    update stops after that epoch (fewer steps/gradients, a preview-free early end); with a
    bound nothing reaches, every epoch runs."""
    publish_init(run_store, "Pendulum-v1")
    ids = sample(run_store, redis_url, "Pendulum-v1")
    base = {"update_epochs": 4, "num_minibatches": 4, "learning_rate": 3e-3}
    runs = {}
    for target_kl, version in ((1e-9, 1), (10.0, 2)):
        # gradient mode: with look-ahead its weights move as the master's will (without, they
        # move only when a master publishes, and none runs here)
        kw = ({"mode": "update", "target_version": version} if mode == "update"
              else {"lookahead": True})
        runs[target_kl] = learner.handler(ev(
            run_store, redis_url, trajectory_ids=ids, invocation_id=f"kl-{version}",
            hyper={**base, "target_kl": target_kl}, **kw))
    tight, loose = runs[1e-9], runs[10.0]
    assert tight["losses/update_epochs"] == 1 and loose["losses/update_epochs"] == 4
    assert tight["losses/approx_kl"] > 1e-9
    steps = "optimizer_steps" if mode == "update" else "gradients"
    assert tight[steps] == 4 and loose[steps] == 16
    if mode == "update":
        assert run_store.params.latest().version == 2  # both published their version


def _batch(n: int):
    model, _ = init_policy("Pendulum-v1", seed=0)
    return synthetic_batch(model, n)


def test_each_epoch_visits_every_sample_once_and_vtrace_rebuilds_its_targets():
    hyper = PPOHyper(update_epochs=3, num_minibatches=4, is_correction="vtrace", target_kl=None)
    first, rebuilt, starts, seen = _batch(50), [], [], []

    def rebuild():
        rebuilt.append(_batch(50))
        return rebuilt[-1]

    done = run_epochs(hyper, first, torch.Generator().manual_seed(0),
                      lambda b, mb: seen.append((mb.epoch, mb.index, b, mb.idx)), Stats(),
                      rebuild=rebuild, on_epoch=starts.append)
    assert done == (3, 12) and starts == [0, 1, 2] and len(rebuilt) == 2
    for epoch, batch in enumerate([first, *rebuilt]):  # once per epoch, from the second on
        mine = [s for s in seen if s[0] == epoch]
        assert [s[1] for s in mine] == [0, 1, 2, 3] and all(s[2] is batch for s in mine)
        assert torch.equal(torch.sort(torch.cat([s[3] for s in mine])).values, torch.arange(50))
        assert [len(s[3]) for s in mine] == [13, 13, 12, 12]


def test_an_epoch_whose_mean_approx_kl_exceeds_target_kl_is_the_last():
    def run(target_kl, kl_of_epoch):
        stats = Stats()
        hyper = PPOHyper(update_epochs=4, num_minibatches=2, target_kl=target_kl)
        return run_epochs(hyper, _batch(8), torch.Generator(),
                          lambda b, mb: stats.add({"approx_kl": torch.tensor(kl_of_epoch[mb.epoch])}),
                          stats)

    assert run(None, [1.0] * 4).epochs == 4
    assert run(0.02, [0.01, 0.03, 0.0, 0.0]) == (2, 4)  # the epoch's own mean, not the run's
    assert run(0.02, [0.01, 0.01, 0.01, 0.01]).epochs == 4
