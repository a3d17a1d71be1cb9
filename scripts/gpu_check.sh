#!/usr/bin/env bash
# The checks that need a GPU, in one go (run on a machine with CUDA, after setup):
# the learner's CUDA tests, then the CPU-vs-GPU step and invocation benchmark, then (when
# COMPARE_MINUTES is set) one side-by-side run of Stellaris async with its learner on the GPU
# and ACTORS actors of N_ENVS envs each (8 x 1 x 256 steps = one learner batch, so all of them
# sample at once; README "More actors") against the lean PPO on the same machine.
#   bash scripts/gpu_check.sh [OUT_DIR]
#   TESTS_TIMEOUT=200 BENCH_TIMEOUT=130 BENCH_ARGS="--widths 64" COMPARE_MINUTES=1.5 ACTORS=8 \
#     bash scripts/gpu_check.sh OUT
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
echo "cuda tests exit $tests, benchmark exit $bench, compare exit $compare"
exit $(( tests || bench || compare ))
