"""Checkpoints (atomic, last k + best), master state round trip, evaluate and plot commands."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from functions.hyper import PolicySpec
from orchestrator.checkpoint import Checkpointer
from orchestrator.cli import main
from orchestrator.master import MasterPolicy


def test_keeps_last_k_and_best(tmp_path: Path) -> None:
    ck = Checkpointer(tmp_path, keep=2)
    for v, score in [(1, 5.0), (2, 9.0), (3, 1.0), (4, 2.0)]:
        ck.save(v, {"w": np.full(3, v, dtype=np.float32)}, {"env_id": "X"}, score=score)
    names = sorted(p.name for p in ck.dir.glob("ckpt-*.safetensors"))
    assert names == ["ckpt-00000003.safetensors", "ckpt-00000004.safetensors"]
    tensors, meta = ck.latest()  # type: ignore[misc]
    assert meta["version"] == 4 and tensors["w"].tolist() == [4, 4, 4]
    best, best_meta = ck.load(ck.dir / "best.safetensors")
    assert best_meta["version"] == 2 and best["w"][0] == 2
    assert not list(ck.dir.glob(".*tmp*"))  # no temp files left behind
    assert Checkpointer(tmp_path).best_score == 9.0  # survives a restart


def test_on_save_runs_after_the_pointer_and_the_pruning(tmp_path: Path) -> None:
    """An S3 run folder uploads from this hook: by then the pointer names the new file and
    the pruned files are gone, so the upload mirrors a consistent folder."""
    ck = Checkpointer(tmp_path, keep=1)
    seen: list[tuple[int, list[str]]] = []
    ck.on_save = lambda: seen.append((
        json.loads((ck.dir / "metadata.json").read_text())["version"],
        sorted(p.name for p in ck.dir.glob("ckpt-*.safetensors"))))
    for v in (1, 2):
        ck.save(v, {"w": np.zeros(2, dtype=np.float32)}, {})
    assert seen == [(1, ["ckpt-00000001.safetensors"]), (2, ["ckpt-00000002.safetensors"])]


def test_master_state_round_trip_includes_adam() -> None:
    a = MasterPolicy("CartPole-v1", PolicySpec(), seed=0, learning_rate=1e-3)
    grads = {n: np.ones(tuple(p.shape), dtype=np.float32) for n, p in a.model.named_parameters()}
    a.apply(grads)
    a.merge_stats({"count": 10, "mean": [1, 2, 3, 4], "var": [1, 1, 1, 1]}, None)
    state = a.state_tensors()
    b = MasterPolicy("CartPole-v1", PolicySpec(), seed=99, learning_rate=1e-3)
    b.load_state(state, version=a.version)
    for (n, pa), (_, pb) in zip(a.model.named_parameters(), b.model.named_parameters(), strict=True):
        assert torch.equal(pa, pb), n
    np.testing.assert_allclose(a.obs_rms.mean, b.obs_rms.mean)
    a.apply(grads)
    b.apply(grads)  # identical next step only if Adam's moments came along
    for pa, pb in zip(a.model.parameters(), b.model.parameters(), strict=True):
        assert torch.allclose(pa, pb)
    assert a.version == b.version == 2


def test_master_flat_adam_is_per_parameter_adam() -> None:
    """The master steps one flat vector with fused Adam: the same update as torch's Adam over
    the separate parameters, and the flat and named gradient forms agree."""
    m = MasterPolicy("Hopper-v5", PolicySpec(), seed=0, learning_rate=3e-4)
    ref = MasterPolicy("Hopper-v5", PolicySpec(), seed=0, learning_rate=3e-4).model
    opt = torch.optim.Adam(ref.parameters(), lr=3e-4, eps=1e-5)
    rng = np.random.default_rng(0)
    for step in range(5):
        grads = {n: rng.standard_normal(tuple(p.shape)).astype(np.float32)
                 for n, p in m.model.named_parameters()}
        if step % 2:
            m.apply(np.concatenate([g.reshape(-1) for g in grads.values()]))
        else:
            m.apply(grads)
        for n, p in ref.named_parameters():
            p.grad = torch.from_numpy(grads[n])
        opt.step()
    for (n, pa), (_, pb) in zip(m.model.named_parameters(), ref.named_parameters(), strict=True):
        torch.testing.assert_close(pa, pb, rtol=1e-5, atol=1e-7, msg=n)
    # the published tensors are the module's parameters
    for n, p in m.model.named_parameters():
        np.testing.assert_array_equal(m.tensors()[n], p.detach().numpy())
    state = m.optimizer_state()
    for n, p in ref.named_parameters():
        np.testing.assert_allclose(state[f"exp_avg.{n}"], opt.state[p]["exp_avg"].numpy(), rtol=1e-5)
        assert state[f"step.{n}"][0] == 5


def test_master_rejects_bad_gradients() -> None:
    m = MasterPolicy("CartPole-v1", PolicySpec(), seed=0, learning_rate=1e-3)
    with pytest.raises(ValueError, match="lacks"):
        m.apply({})
    grads = {n: np.ones((1,), dtype=np.float32) for n, _ in m.model.named_parameters()}
    with pytest.raises(ValueError, match="shape"):
        m.apply(grads)
    with pytest.raises(ValueError, match="numbers"):
        m.apply(np.ones(7, np.float32))
    with pytest.raises(ValueError, match="layout"):
        m.apply(np.zeros(m.flat.numel(), np.float32), layout=(("w", (m.flat.numel(),)),))


def test_evaluate_and_plot_commands(tmp_path: Path, redis_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    run = tmp_path / "run"
    rc = main(["train", "--env", "CartPole-v1", "--backend", "inline", "--total-steps", "2048",
               "--run-dir", str(run), "--redis-url", redis_url, "--n-envs", "4",
               "--rollout-steps", "128", "--progress", "none", "--eval-interval-s", "0",
               "--set", "learner_batch_steps=512", "--set", "hyper.update_epochs=1"])
    assert rc == 0
    capsys.readouterr()
    assert main(["evaluate", str(run), "--episodes", "2"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["episodes"] == 2 and len(out["returns"]) == 2 and out["mean_return"] > 0
    assert main(["plot", str(run), str(run), "--out", str(tmp_path / "figs")]) == 0
    assert (tmp_path / "figs" / "return_vs_cost.png").stat().st_size > 1000
    assert main(["evaluate", str(tmp_path / "nope")]) == 2


def test_evaluate_records_video(tmp_path: Path, redis_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    run = tmp_path / "pend"
    assert main(["train", "--env", "InvertedPendulum-v5", "--backend", "inline", "--total-steps",
                 "1024", "--run-dir", str(run), "--redis-url", redis_url, "--n-envs", "4",
                 "--rollout-steps", "128", "--progress", "none", "--eval-interval-s", "0",
                 "--set", "learner_batch_steps=512", "--set", "hyper.update_epochs=1"]) == 0
    capsys.readouterr()
    assert main(["evaluate", str(run), "--episodes", "1", "--video", str(tmp_path / "vid")]) == 0
    out = json.loads(capsys.readouterr().out)
    gif = Path(out["videos"][0])
    assert gif.exists() and gif.read_bytes()[:6] in (b"GIF89a", b"GIF87a")
