#!/usr/bin/env bash
# The README's main job: set up, then a short Stellaris (async) training run on Hopper-v5 with
# the embedded defaults — an embedded redis-server and the local Lambda runtime. Extra
# arguments go to `stellaris train` (e.g. --minutes 10, --mode sync, --backend ray).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/stellaris train --env Hopper-v5 --mode async --backend local --minutes 3 "$@"
