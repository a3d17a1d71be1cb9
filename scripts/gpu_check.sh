#!/usr/bin/env bash
# The checks that need a GPU, in one go (run on a machine with CUDA, after setup):
# the learner's CUDA tests, then the CPU-vs-GPU step and invocation benchmark.
#   bash scripts/gpu_check.sh [OUT_DIR]
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${1:-benchmarks/out/gpu}"
mkdir -p "$OUT"
PY="${PYTHON:-python3}"
[ -x .venv/bin/python ] && PY=.venv/bin/python
timeout "${TESTS_TIMEOUT:-600}" "$PY" -m pytest -q -rP --show-capture=stdout -m cuda tests/gpu \
  -p no:cacheprovider 2>&1 | tee "$OUT/pytest_cuda.log"
tests=${PIPESTATUS[0]}
timeout "${BENCH_TIMEOUT:-600}" "$PY" benchmarks/gpu_bench.py --out "$OUT/gpu_bench.json" 2>&1 \
  | tee "$OUT/gpu_bench.log"
bench=${PIPESTATUS[0]}
echo "cuda tests exit $tests, benchmark exit $bench"
exit $(( tests || bench ))
