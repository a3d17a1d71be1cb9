#!/usr/bin/env bash
# The checks that need a GPU, in one go (run on a machine with CUDA, after setup):
# the learner's CUDA tests, then the CPU-vs-GPU step and invocation benchmark, then (when
# COMPARE_MINUTES is set) one side-by-side run of Stellaris async with its learner on the GPU
# and ACTORS actors of N_ENVS envs each (8 x 1 x 256 steps = one learner batch, so all of them
# sample at once; docs/architecture.md, rollouts and pacing) against the lean PPO on the same
# machine, then (when PAPER_STEPS is set) the paper's shape for real: 16 actors on the CPU
# cores and 4 learners on the one GPU (--preset paper), against one learner and our sync PPO
# at the same batch, each for PAPER_STEPS env steps (benchmarks/ablation.py's full and sync
# variants, plus the one-learner default).
#   bash scripts/gpu_check.sh [OUT_DIR]
#   TESTS_TIMEOUT=200 BENCH_TIMEOUT=130 BENCH_ARGS="--widths 64" COMPARE_MINUTES=1.5 ACTORS=8 \
#     PAPER_STEPS=200000 bash scripts/gpu_check.sh OUT
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${1:-benchmarks/out/gpu}"
mkdir -p "$OUT"
PY="${PYTHON:-python3}"
[ -x .venv/bin/python ] && PY=.venv/bin/python
timeout "${TESTS_TIMEOUT:-600}" "$PY" -m pytest -v -rP --show-capture=stdout -m cuda tests/gpu \
  -p no:cacheprovider 2>&1 | tee "$OUT/pytest_cuda.log"
tests=${PIPESTATUS[0]}
# shellcheck disable=SC2086  # BENCH_ARGS is a list of flags
timeout "${BENCH_TIMEOUT:-600}" "$PY" benchmarks/gpu_bench.py ${BENCH_ARGS:-} \
  --out "$OUT/gpu_bench.json" 2>&1 | tee "$OUT/gpu_bench.log"
bench=${PIPESTATUS[0]}
compare=0
if [ -n "${COMPARE_MINUTES:-}" ]; then
  cmp_dir="${COMPARE_DIR:-/tmp/gpu-compare}"
  timeout "${COMPARE_TIMEOUT:-600}" "$PY" benchmarks/compare.py --envs Hopper-v5 --seeds 1 \
    --minutes "$COMPARE_MINUTES" --systems stellaris lean --actors "${ACTORS:-8}" \
    --set n_envs="${N_ENVS:-1}" --set device="${COMPARE_DEVICE:-cuda}" --set learner_memory_mb=10240 --no-results \
    --out "$cmp_dir" 2>&1 | tee "$OUT/compare.log"
  compare=${PIPESTATUS[0]}
  tar -czf "$OUT/compare.tgz" -C "$(dirname "$cmp_dir")" "$(basename "$cmp_dir")" 2>/dev/null
fi
paper=0
if [ -n "${PAPER_STEPS:-}" ]; then
  paper_dir="${PAPER_DIR:-/tmp/gpu-paper}"
  for variant in full sync; do
    timeout "${PAPER_TIMEOUT:-600}" "$PY" benchmarks/ablation.py --envs Hopper-v5 --seeds 1 \
      --steps "$PAPER_STEPS" --variants "$variant" --out "$paper_dir" \
      --records "$OUT/records" 2>&1 | tee -a "$OUT/paper.log"
    paper=$(( paper || PIPESTATUS[0] ))
  done
  timeout "${PAPER_TIMEOUT:-600}" "$PY" -m orchestrator.cli train --env Hopper-v5 --seed 1 \
    --total-steps "$PAPER_STEPS" --run-dir "$paper_dir/one-learner" --restart --progress plain \
    --eval-interval-s 0 --device cuda 2>&1 | tail -3 | tee -a "$OUT/paper.log"
  paper=$(( paper || PIPESTATUS[0] ))
  tar -czf "$OUT/paper.tgz" -C "$(dirname "$paper_dir")" "$(basename "$paper_dir")" 2>/dev/null
fi
echo "cuda tests exit $tests, benchmark exit $bench, compare exit $compare, paper exit $paper"
exit $(( tests || bench || compare || paper ))
