"""Cost of one PPO minibatch step on the learner's CPU: per-tensor, flat and fused paths.

Hopper-v5's 64x64 policy, a synthetic 2,048-sample batch, the compiled minibatch loss, one
thread; 320 steps (10 epochs x 32 minibatches) per timing, the three paths alternated:

- per-tensor: ``zero_grad``, ``clip_grad_norm_`` and ``torch.optim.Adam.step`` over the
  module's parameter tensors (the textbook path, the slowest);
- flat: :func:`functions.compiled.ppo_step` with :class:`functions.adam.FlatAdam` (one cat, a
  two-op global-norm clip, one fused Adam kernel): the eager reference;
- fused: :class:`functions.fused.FusedStep`, the same step as one compiled graph (forward,
  backward, clip and Adam), what update-mode learners and the lean PPO take.

    python benchmarks/step_bench.py --repeats 3

Prints each repeat and writes one record (kind ``step``: a row per repeat).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from benchmarks.records import command_line, write_record  # noqa: E402
from functions.adam import ADAM_EPS, FlatAdam  # noqa: E402
from functions.batch import synthetic_batch  # noqa: E402
from functions.compiled import MinibatchLoss, Stats, ppo_step  # noqa: E402
from functions.epochs import minibatches  # noqa: E402
from functions.fused import FusedStep  # noqa: E402
from functions.hyper import PPOHyper  # noqa: E402
from functions.policy import init_policy  # noqa: E402


def us_per_step(path: str, env_id: str, epochs: int = 10) -> float:
    hyper = PPOHyper()
    model, _ = init_policy(env_id, seed=0)
    batch = synthetic_batch(model, 2048)
    loss_fn = MinibatchLoss(hyper, compile=True)
    gen = torch.Generator().manual_seed(0)
    stats = Stats()
    if path == "fused":
        adam = FlatAdam(model, lr=hyper.learning_rate, eps=ADAM_EPS)
        fused = FusedStep(hyper, loss_fn, fused=True)

        def step(idx: torch.Tensor) -> None:
            stats.add(fused(model, batch, idx, adam))
    elif path == "flat":
        adam = FlatAdam(model, lr=hyper.learning_rate, eps=ADAM_EPS)

        def step(idx: torch.Tensor) -> None:
            stats.add(ppo_step(loss_fn, model, batch, idx, adam, hyper.max_grad_norm))
    else:
        opt = torch.optim.Adam(model.parameters(), lr=hyper.learning_rate, eps=ADAM_EPS)

        def step(idx: torch.Tensor) -> None:
            loss, mb = loss_fn(model, batch, idx)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), hyper.max_grad_norm)
            opt.step()
            stats.add(mb)

    for _ in range(3):  # warm-up: compile, allocator, Adam state
        for idx in minibatches(len(batch), hyper, gen):
            step(idx)
    n = 0
    t0 = time.perf_counter()
    for _ in range(epochs):
        for idx in minibatches(len(batch), hyper, gen):
            step(idx)
            n += 1
    return (time.perf_counter() - t0) / n * 1e6


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--env", default="Hopper-v5")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--records", help="records dir (default: $STELLARIS_RECORDS_DIR or "
                   "benchmarks/records)")
    p.add_argument("--no-record", action="store_true", help="write no record")
    a = p.parse_args(argv)
    torch.set_num_threads(1)
    rows = []
    for r in range(a.repeats):
        old, flat, fused = (us_per_step(p, a.env) for p in ("per-tensor", "flat", "fused"))
        print(f"repeat {r + 1}: per-tensor {old:.0f} us/step, flat {flat:.0f} us/step, "
              f"fused {fused:.0f} us/step; flat/fused {flat / fused:.2f}x", flush=True)
        rows.append({"repeat": r + 1, "per-tensor (µs/step)": old, "flat (µs/step)": flat,
                     "fused (µs/step)": fused, "flat / fused": flat / fused})
    if not a.no_record:
        print(write_record("step", command_line("benchmarks/step_bench.py", argv),
                           {"env": a.env, "threads": 1}, rows=rows, records=a.records))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
