"""The learner on a GPU: the same maths as on the CPU, through the real handler and runtime.

Selected with ``pytest -m cuda`` on a machine with CUDA (the default run deselects them: CI
has no GPU). Where CUDA is missing they fail, they do not skip: a GPU check that silently
passes on a CPU proves nothing. ``STELLARIS_TEST_DEVICE=cpu`` runs the same checks on the
CPU against themselves, to debug the tests without a GPU.
"""

from __future__ import annotations

import os
import zlib
from pathlib import Path

import numpy as np
import pytest
import torch

from functions import learner
from functions.adam import ADAM_EPS
from functions.batch import build_batch, group_rollouts, load_trajectories
from functions.compiled import MinibatchLoss
from functions.epochs import minibatches as minibatch_indices
from functions.hyper import PolicySpec, PPOHyper
from functions.lookahead import LOOKAHEADS
from functions.policy import init_policy, policy_meta
from functions.wire import Gradient
from orchestrator.config import load_config
from orchestrator.master import MasterPolicy
from orchestrator.run import train
from store import RunStore

DEVICE = os.environ.get("STELLARIS_TEST_DEVICE", "cuda")
SMALL = PolicySpec(hidden_sizes=[16, 16])
LR = 3e-4
pytestmark = pytest.mark.cuda


@pytest.fixture(autouse=True)
def _needs_the_device() -> None:
    if DEVICE == "cuda" and not torch.cuda.is_available():
        pytest.fail("these tests check the learner on CUDA, and CUDA is not available here")


def _ev(rs: RunStore, redis_url: str, **kw):
    return {"run_id": rs.run_id, "redis_url": redis_url, **kw}


def _sample(rs: RunStore, redis_url: str, env_id: str, n: int) -> list[str]:
    from functions import actor
    return [actor.handler(_ev(rs, redis_url, env_id=env_id, n_envs=4, steps=64, seed=i,
                              invocation_id=f"a-{rs.run_id}-{i}"))["trajectory_id"]
            for i in range(n)]


def _flat(model: torch.nn.Module) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1).cpu() for p in model.parameters()])


@pytest.mark.parametrize(("compile_loss", "cuda_graph", "minibatches", "replays"), [
    (False, False, 4, 0), (True, False, 4, 0), (False, True, 4, 9), (True, True, 4, 9),
    # 512 samples in 3 minibatches: sizes 171, 171, 170 — a graph for each size after its
    # warm-up (3 steps for the first size, 1 for the second): 5 of 9 steps replayed
    (True, True, 3, 5)])
def test_a_cuda_lookahead_learner_equals_the_cpu_update(run_store, redis_url, compile_loss,
                                                        cuda_graph, minibatches, replays):
    """Gradient mode on the GPU (look-ahead, packed messages, maybe compiled, maybe replayed
    as a CUDA graph) ends one batch where the CPU's reference PPO loop ends, from the same
    trajectory and minibatch order."""
    master = MasterPolicy("Pendulum-v1", SMALL, seed=0, learning_rate=LR)
    master.publish(run_store)
    ids = _sample(run_store, redis_url, "Pendulum-v1", n=2)
    hyper = PPOHyper(update_epochs=3, num_minibatches=minibatches, learning_rate=LR)
    out = learner.handler(_ev(run_store, redis_url, trajectory_ids=ids, invocation_id="L0",
                              hyper=hyper.model_dump(), lookahead=True, seed=1,
                              compile=compile_loss, gradients_per_message=4, device=DEVICE,
                              cuda_graph=cuda_graph))
    assert out["device"].startswith(DEVICE) and out["gradients"] == 3 * minibatches
    assert out["compiled"] == compile_loss
    # eager warm-up steps, then a capture and replays
    assert out["cuda_graph_replays"] == (replays if DEVICE == "cuda" else 0)
    assert out["losses/approx_kl"] == out["losses/approx_kl"]  # stats came back (not NaN)
    la = LOOKAHEADS.get(run_store)
    assert la.flat.device.type == DEVICE

    model, _ = init_policy("Pendulum-v1", SMALL, 0)
    start = _flat(model)
    opt = torch.optim.Adam(model.parameters(), lr=LR, eps=ADAM_EPS)
    groups = group_rollouts(load_trajectories(run_store, ids), torch.device("cpu"))
    batch = build_batch(model, groups, hyper, [])
    gen = torch.Generator().manual_seed((1 * 1_000_003 + zlib.crc32(b"L0")) % (2**63))
    loss_fn = MinibatchLoss(hyper, compile=False)
    for _ in range(hyper.update_epochs):
        for idx in minibatch_indices(len(batch), hyper, gen):
            loss, _ = loss_fn(model, batch, idx)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), hyper.max_grad_norm)
            opt.step()
    cpu = _flat(model)
    moved = float(torch.linalg.vector_norm(cpu - start))
    assert moved > 1e-3
    # float32 on two devices (different kernels, different summation orders) through 12 Adam
    # steps: equal to a small fraction of how far the weights moved
    assert float(torch.linalg.vector_norm(la.flat.detach().cpu() - cpu)) < 1e-3 * moved

    # the master, on the CPU, applies the streamed gradients to the same weights
    run_store.grads.ensure_group("agg", start_id="0")
    grads = [g for e in run_store.grads.read("agg", "t", count=100, block_ms=None)
             for g in Gradient.unpack(e.blob)]
    # each at the version the look-ahead predicted
    assert [g.version_used for g in grads] == list(range(3 * minibatches))
    for g in grads:
        master.apply(g.flat_vector())
    assert float(torch.linalg.vector_norm(master.flat.detach().cpu() - cpu)) < 1e-3 * moved


def _copy_run(src: RunStore, dst: RunStore, ids: list[str]) -> list[str]:
    snap = src.params.latest()
    dst.params.publish(snap.version, snap.tensors, snap.meta)
    return [dst.traj.append(e.meta, e.blob) for e in src.traj.get(ids)]


@pytest.mark.parametrize("cuda_graph", [False, True])
def test_a_cuda_update_mode_round_publishes_what_the_cpu_publishes(store, run_store, redis_url,
                                                                   cuda_graph):
    """Sync mode's learner on the GPU: two rounds (Adam state saved from the GPU and loaded
    back) publish the weights the CPU publishes from the same data, readable by CPU actors."""
    model, tensors = init_policy("Hopper-v5", PolicySpec(), 0)
    run_store.params.publish(0, tensors, policy_meta(model))
    ids = _sample(run_store, redis_url, "Hopper-v5", n=2)
    other = RunStore(store, run_store.run_id + "-cpu")
    try:
        other_ids = _copy_run(run_store, other, ids)
        hyper = {"update_epochs": 2, "num_minibatches": 4}
        for target in (1, 2):
            for rs, tids, device in ((run_store, ids, DEVICE), (other, other_ids, "cpu")):
                out = learner.handler(_ev(rs, redis_url, mode="update", trajectory_ids=tids,
                                          target_version=target, hyper=hyper,
                                          invocation_id=f"round-{target}", device=device,
                                          compile=True, cuda_graph=cuda_graph))
                assert out["published_version"] == target and out["device"].startswith(device)
                graphed = cuda_graph and device == "cuda"
                assert out["cuda_graph_replays"] == (8 - 3 if graphed else 0)
                assert np.isfinite(out["losses/policy_loss"])
        gpu, cpu = run_store.params.latest(), other.params.latest()
        assert gpu.version == cpu.version == 2
        start = run_store.params.get(0).tensors
        for name, value in cpu.tensors.items():
            assert isinstance(gpu.tensors[name], np.ndarray)  # travelled as plain arrays
            moved = float(np.linalg.norm(value - start[name])) + 1e-6
            assert float(np.linalg.norm(gpu.tensors[name] - value)) < 1e-3 * moved, name
        (g_adam, _), (c_adam, _) = run_store.get_state("optimizer"), other.get_state("optimizer")
        assert set(g_adam) == set(c_adam) and g_adam["step.actor.0.weight"][0] == 16
    finally:
        other.clear()


@pytest.mark.parametrize("mode", ["async", "async-aggregator", "sync"])
def test_a_training_run_with_cuda_learners_in_the_local_runtime(mode: str, tmp_path: Path,
                                                               redis_url: str) -> None:
    """The whole system, learners on the GPU in the runtime's worker processes (the
    orchestrator and the master stay on the CPU): no failure, weights move, actors sample."""
    cfg = load_config(None, {
        "env": "Hopper-v5", "actors": 2, "learners": 1, "n_envs": 4, "rollout_steps": 128,
        "learner_batch_steps": 1024, "total_steps": 6144, "eval_interval_s": 0,
        "progress": "none", "hyper": {"update_epochs": 2, "num_minibatches": 8},
        "function_timeout_s": 300, "mode": mode.split("-")[0], "backend": "local",
        "device": DEVICE, "experimental": {"learner_publishes": mode != "async-aggregator"},
        # a CUDA context and its libraries are ~1-2 GB of RSS: more than one vCPU's 1,769 MB
        "learner_memory_mb": 10240,
        "run_dir": str(tmp_path / mode), "redis_url": redis_url})
    summary = train(cfg)
    assert summary["failures"] == {"actor": 0, "learner": 0, "evaluator": 0}, summary["last_errors"]
    assert summary["env_steps"] >= 6144 and summary["version"] >= 2
    assert summary["cost"]["total_usd"] > 0
    print(mode, "billing:", summary["backend_billing"]["functions"])  # peak memory per function
