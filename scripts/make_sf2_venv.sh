#!/usr/bin/env bash
# Sample Factory 2's own virtual environment, for benchmarks/sf2_appo.py.
#
# Why a second venv: sample-factory 2.1.1 pins numpy<2 and gymnasium<1 (and its MuJoCo
# examples mujoco<=2.3.3), which clash with the project's numpy 2 / gymnasium 1.x / mujoco 3+.
# So SF2 runs its MuJoCo *v4* envs (gymnasium 0.29) here, not the v5 ones the other systems
# run; sf2_appo.py states the difference in every run's config.json.
#
# Idempotent: an existing venv whose marker names these exact pins is left alone.
#     bash scripts/make_sf2_venv.sh            # creates .venv-sf2 (or $SF2_VENV)
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${SF2_VENV:-$REPO/.venv-sf2}"
PYTHON="${PYTHON:-python3.11}"
# torch: the project's CPU wheel (SF2 accepts torch>=1.9,<3, !=1.13.0)
PINS=(
  "sample-factory==2.1.1"
  "gymnasium[mujoco]==0.29.1"
  "mujoco==2.3.3"
  "numpy==1.26.4"
  "torch==2.13.0"
)
MARKER="$VENV/.stellaris-sf2-pins"
WANT="$(printf '%s\n' "${PINS[@]}")"

if [[ -f "$MARKER" && "$(cat "$MARKER")" == "$WANT" && -x "$VENV/bin/python" ]]; then
  echo "sf2 venv up to date: $VENV"
  exit 0
fi

"$PYTHON" -m venv "$VENV"
"$VENV/bin/pip" install --quiet --upgrade pip
"$VENV/bin/pip" install --quiet "${PINS[@]}"
# fails here, not in a benchmark run, when an import does not work
"$VENV/bin/python" -c "import sample_factory, sf_examples.mujoco.train_mujoco, gymnasium, mujoco; \
gymnasium.make('Hopper-v4').reset(seed=0); print('sample-factory imports, Hopper-v4 resets')"
echo "$WANT" > "$MARKER"
echo "sf2 venv ready: $VENV"
