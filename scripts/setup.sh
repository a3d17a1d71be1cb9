#!/usr/bin/env bash
# Set up everything Stellaris needs in ./.venv, idempotently (a stamp skips a repeat install).
# torch goes first, pinned, so pip takes the local CPU wheel instead of a multi-GB CUDA build.
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3.11}"
command -v "$PY" >/dev/null 2>&1 || PY=python3
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
STAMP=".venv/.stellaris-installed"
WANT="$(sha256sum pyproject.toml | cut -d' ' -f1)"
if [ ! -f "$STAMP" ] || [ "$(cat "$STAMP")" != "$WANT" ]; then
  .venv/bin/python -m pip install --quiet --upgrade pip
  .venv/bin/python -m pip install --quiet "torch==2.13.0"
  .venv/bin/python -m pip install --quiet -e ".[dev,ray,rllib]"
  echo "$WANT" > "$STAMP"
fi
