"""The lean PPO's pipeline emulation (--lag, --grad-delay) and the staleness study's report."""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from benchmarks import lean_ppo, report, staleness_study  # noqa: E402
from benchmarks.records import read_records  # noqa: E402
from functions.hyper import PPOHyper  # noqa: E402

TINY = PPOHyper(update_epochs=1, num_minibatches=2)


def _train(tmp_path: Path, name: str, **kw) -> dict:
    return lean_ppo.train("Pendulum-v1", 3, tmp_path / name, total_steps=4 * 64, n_envs=2,
                          rollout_steps=32, hyper=TINY, log_interval_s=0.0, **kw)


def test_lag_learns_each_rollout_one_update_later(tmp_path: Path) -> None:
    """Four rollouts: lag 0 learns all four; lag 1 learns the first three, each one
    iteration after it was sampled, so the sampling of rollout k+1 saw k-1 updates."""
    plain = _train(tmp_path, "lag0")
    lagged = _train(tmp_path, "lag1", lag=1)
    assert plain["env_steps"] == lagged["env_steps"] == 256
    assert plain["version"] == 4 and lagged["version"] == 3
    assert json.loads((tmp_path / "lag1" / "config.json").read_text())["lag"] == 1


def _column(run_dir: Path, name: str) -> list[float]:
    with open(run_dir / "metrics.csv") as fh:
        return [float(r[name]) for r in csv.DictReader(fh) if r.get(name)]


def test_publish_epoch_samples_with_the_weights_partway_through_the_last_update(
        tmp_path: Path) -> None:
    """--publish-epoch E: the actors' weights are the learner's after E of its epochs; with
    E = update_epochs that is plain PPO exactly, with E = 0 the weights before the update."""
    hyper = PPOHyper(update_epochs=2, num_minibatches=2)
    kl = {}
    for name, kw in (("lag0", {}), ("pub2", {"publish_epoch": 2}), ("pub1", {"publish_epoch": 1}),
                     ("pub0", {"publish_epoch": 0})):
        lean_ppo.train("Pendulum-v1", 3, tmp_path / name, total_steps=4 * 64, n_envs=2,
                       rollout_steps=32, hyper=hyper, log_interval_s=0.0, **kw)
        kl[name] = _column(tmp_path / name, "losses/approx_kl")
    assert len(kl["lag0"]) == 4 and kl["pub2"] == kl["lag0"]  # no lag: the same run exactly
    assert kl["pub1"] != kl["pub2"] and kl["pub0"] != kl["pub1"]
    with pytest.raises(ValueError, match="lag=0"):
        _train(tmp_path, "both", lag=1, publish_epoch=1)


def test_anneal_lr_decays_the_lean_ppos_rate_over_its_budget(tmp_path: Path) -> None:
    lean_ppo.train("Pendulum-v1", 3, tmp_path / "anneal", total_steps=4 * 64, n_envs=2,
                   rollout_steps=32, hyper=TINY.model_copy(update={"anneal_lr": True}),
                   log_interval_s=0.0)
    lr0 = TINY.learning_rate
    assert _column(tmp_path / "anneal", "charts/learning_rate") == pytest.approx(
        [lr0 * 0.75, lr0 * 0.5, lr0 * 0.25, lr0 * 1e-3])


def test_grad_delay_takes_gradients_at_older_weights(tmp_path: Path, monkeypatch) -> None:
    """With --grad-delay 2 the loss of the k-th minibatch is evaluated at the weights before
    step k-2 (the first ones at the initial weights), and the update lands on the current."""
    seen: list[torch.Tensor] = []

    class Spy(lean_ppo.MinibatchLoss):
        def __call__(self, model, batch, idx):
            seen.append(torch.nn.utils.parameters_to_vector(model.parameters()).detach().clone())
            return super().__call__(model, batch, idx)

    monkeypatch.setattr(lean_ppo, "MinibatchLoss", Spy)
    _train(tmp_path, "delay", grad_delay=2)
    assert len(seen) == 8
    assert torch.equal(seen[0], seen[1]) and torch.equal(seen[1], seen[2])  # warm-up: step 0
    assert not torch.equal(seen[2], seen[3])  # from then on the window slides by one step
    assert all(not torch.equal(a, b) for a, b in zip(seen[3:], seen[4:], strict=False))


def test_study_report_reads_run_folders(tmp_path: Path) -> None:
    out = tmp_path / "study"
    _train(out, "lag0-truncate/seed1")
    lines = staleness_study.report("Pendulum-v1", out, [1], 256)
    row = next(x for x in lines if x.startswith("| lag0-truncate |"))
    assert "| 1 |" in row
    assert json.loads((out / "study.json").read_text())["lag0-truncate"][0]["env_steps"] == 256


def test_study_writes_a_record_that_the_results_page_shows(tmp_path: Path) -> None:
    out, records = tmp_path / "study", tmp_path / "records"
    _train(out / "Pendulum-v1", "lag0-truncate/seed1")
    rc = staleness_study.main(["--env", "Pendulum-v1", "--seeds", "1", "--steps", "256",
                               "--out", str(out), "--records", str(records), "--report-only"])
    (rec,) = read_records(records)
    assert rc == 0 and rec["kind"] == "staleness" and rec["path"] is None  # the lean PPO
    assert rec["rows"][0]["variant"] == "lag0-truncate" and rec["rows"][0]["seeds"] == "1"
    page = tmp_path / "results.md"
    assert report.main(["--records", str(records), "--out", str(page)]) == 0
    text = page.read_text()
    assert "| lag0-truncate | 1 |" in text and "python benchmarks/staleness_study.py" in text
