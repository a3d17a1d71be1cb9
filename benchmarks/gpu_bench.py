"""When does a GPU learner pay? One PPO minibatch step and one learner invocation, CPU vs CUDA.

Two measurements, each side by side on one machine (ratios, not absolute times):

1. **The step**: :func:`functions.compiled.ppo_step` (loss, backward, global-norm clip, one
   fused Adam step on the flat parameter vector) on a synthetic Hopper-v5 batch of 2,048
   samples, minibatches of 64, eager and ``torch.compile``-d, for policies of growing width
   (64x64 is the matched hyper-parameter; wider ones show where the GPU starts to pay).
   The CPU gets one thread, as a 1,769 MB Lambda function gets one vCPU.
2. **The invocation**: the learner handler itself (``functions.learner.handler``) on a real
   Hopper trajectory in a real Redis: gradient mode with look-ahead (what the async
   orchestrator sends: 320 gradients streamed) and update mode (sync mode: 320 Adam steps and
   a publish), warm (the first, cold call excluded), compiled as the orchestrator asks.

    python benchmarks/gpu_bench.py --out benchmarks/out/gpu/gpu_bench.json

Without CUDA it measures the CPU rows only and says so. Writes the JSON to ``--out`` and one
record (kind ``gpu``).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from benchmarks.records import command_line, write_record  # noqa: E402
from functions import actor  # noqa: E402
from functions import learner as L  # noqa: E402
from functions.adam import ADAM_EPS, FlatAdam  # noqa: E402
from functions.batch import synthetic_batch  # noqa: E402
from functions.compiled import MinibatchLoss, ppo_step  # noqa: E402
from functions.epochs import minibatches, on_device  # noqa: E402
from functions.fused import FusedStep  # noqa: E402
from functions.graphed import GraphedStep  # noqa: E402
from functions.hyper import PolicySpec, PPOHyper  # noqa: E402
from functions.policy import init_policy, policy_meta  # noqa: E402
from store import EmbeddedRedis, RunStore, Store  # noqa: E402

ENV = "Hopper-v5"


def _sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def step_us(device: str, width: int, compile_loss: bool, steps: int, graph: bool = False,
            fused: bool = False) -> float:
    """Microseconds per PPO minibatch step (median of 3 timings of ``steps`` steps); ``fused``
    is the CPU learner's default, the whole step one compiled graph (functions/fused.py)."""
    hyper = PPOHyper()
    model, _ = init_policy(ENV, PolicySpec(hidden_sizes=[width, width]), seed=0)
    model.to(device)
    cpu_batch = synthetic_batch(model, 2048)
    batch = type(cpu_batch)(**{k: getattr(cpu_batch, k).to(device)
                               for k in cpu_batch.__dataclass_fields__})
    loss_fn = MinibatchLoss(hyper, compile=compile_loss)
    adam = FlatAdam(model, lr=hyper.learning_rate, eps=ADAM_EPS)
    gen = torch.Generator().manual_seed(0)
    graphed = (GraphedStep(loss_fn, model, batch, hyper.max_grad_norm, adam.optimizer, adam.flat)
               if graph else None)
    fused_step = FusedStep(hyper, loss_fn, fused=True) if fused else None

    def run(n: int) -> float:
        done = 0
        _sync(device)
        t0 = time.perf_counter()
        while done < n:
            mbs = minibatches(len(batch), hyper, gen)
            if graphed is not None:
                mbs = on_device(mbs, torch.device(device))
            for idx in mbs:
                if graphed is not None:
                    graphed(idx)
                elif fused_step is not None:
                    fused_step(model, batch, idx, adam)
                else:
                    ppo_step(loss_fn, model, batch, idx, adam, hyper.max_grad_norm)
                done += 1
                if done == n:
                    break
        _sync(device)
        return (time.perf_counter() - t0) / n * 1e6

    run(64)  # warm-up: compile, allocator, Adam state, CUDA context
    return statistics.median(run(steps) for _ in range(3))


def invocation_ms(redis_url: str, device: str, mode: str, repeats: int,
                  graph: bool = True) -> dict[str, float]:
    """One warm learner invocation on a 2,048-step Hopper trajectory (10 epochs x 32)."""
    rs = RunStore(Store(redis_url), f"gpu-bench-{uuid.uuid4().hex[:8]}")
    model, tensors = init_policy(ENV, seed=0)
    rs.params.publish(0, tensors, policy_meta(model))
    traj = actor.handler({"run_id": rs.run_id, "redis_url": redis_url, "env_id": ENV,
                          "n_envs": 8, "steps": 256})["trajectory_id"]
    totals, computes = [], []
    for i in range(repeats + 1):
        event: dict[str, Any] = {"run_id": rs.run_id, "redis_url": redis_url, "device": device,
                                 "trajectory_ids": [traj], "invocation_id": f"b-{i}",
                                 "compile": True, "mode": mode, "cuda_graph": graph}
        if mode == "update":
            event["target_version"] = i + 1
        else:
            event.update(lookahead=True, gradients_per_message=32)
        out = L.handler(event)
        if i:  # the first call is cold
            totals.append(out["timings"]["total_s"] * 1e3)
            computes.append(out["timings"]["compute_s"] * 1e3)
        rs.store.call(lambda r: r.delete(rs.grads.key))
    rs.clear()
    return {"total_ms": statistics.median(totals), "compute_ms": statistics.median(computes)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--widths", type=int, nargs="+", default=[64, 256, 1024])
    p.add_argument("--repeats", type=int, default=3, help="warm learner invocations per row")
    p.add_argument("--out", type=Path, default=Path("benchmarks/out/gpu/gpu_bench.json"))
    p.add_argument("--records", help="records dir (default: $STELLARIS_RECORDS_DIR or "
                   "benchmarks/records)")
    p.add_argument("--no-record", action="store_true", help="write no record")
    a = p.parse_args(argv)
    torch.set_num_threads(1)
    devices = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    if len(devices) == 1:
        print("no CUDA here: CPU rows only")
    result: dict[str, Any] = {
        "torch": torch.__version__, "python": platform.python_version(),
        "cpu_count": os.cpu_count(),
        "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
        "step_us": {}, "invocation_ms": {}}
    for width in a.widths:
        steps = 320 if width <= 256 else 64
        variants = [(d, c, False, False) for d in devices for c in (False, True)]
        variants.append(("cpu", True, False, True))
        variants += [("cuda", c, True, False) for c in (False, True) if "cuda" in devices]
        for device, compile_loss, graph, fused in variants:
            key = (f"{width}x{width}/{device}/{'compiled' if compile_loss else 'eager'}"
                   f"{'+graph' if graph else ''}{'+fused' if fused else ''}")
            us = step_us(device, width, compile_loss, steps, graph, fused)
            result["step_us"][key] = us
            print(f"step {key}: {us:.0f} us", flush=True)
    server = EmbeddedRedis().start()
    try:
        rows = [(d, m, False) for d in devices for m in ("gradient", "update")]
        rows += [("cuda", m, True) for m in ("gradient", "update") if "cuda" in devices]
        for device, mode, graph in rows:
            key = f"{device}/{mode}{'+graph' if graph else ''}"
            result["invocation_ms"][key] = r = invocation_ms(server.url, device, mode,
                                                             a.repeats, graph)
            print(f"invocation {key}: {r['total_ms']:.0f} ms "
                  f"(compute {r['compute_ms']:.0f} ms)", flush=True)
    finally:
        server.close()
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(result, indent=2))
    print(f"wrote {a.out}")
    if not a.no_record:
        print(write_record("gpu", command_line("benchmarks/gpu_bench.py", argv),
                           {k: v for k, v in result.items()
                            if k not in ("torch", "python", "cpu_count")}, records=a.records))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
