"""Where a run's own clock started, measured from outside: compare.py runs each system through
:func:`run_clocked`, which stamps the lines the run prints as they arrive. A system whose clock
starts after its process (Stellaris': once its runtime is up) prints progress lines with its
own wall time; the least gap between a line's arrival and the time it states is how long after
its process start its clock started, which the report adds back
(:func:`benchmarks.compare_analysis.from_process_start`), so every system is timed from its
process's start alike."""

from __future__ import annotations

import re
import subprocess
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# a progress line with the run's own wall time (orchestrator/metrics.py's plain progress)
PROGRESS_WALL = re.compile(r"^\[\s*(\d+(?:\.\d+)?)s\]")


def run_clocked(cmd: list[str], log: Path, env_vars: dict[str, str],
                timeout_s: float) -> tuple[int, float | None]:
    """Run ``cmd`` with its output into ``log``; returns its exit status and how long after its
    process started its own clock did: from each progress line that states its wall time
    (``[  12.3s] ...``), the line's arrival since the start less that time, the least of them
    (a line only arrives later than it was written). None when no line stated one."""
    offset: float | None = None
    with open(log, "w") as fh:
        t0 = time.monotonic()
        proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                env=env_vars, text=True, bufsize=1)
        killer = threading.Timer(timeout_s, proc.kill)
        killer.start()
        try:
            for line in proc.stdout or ():
                arrived = time.monotonic() - t0
                fh.write(line)
                m = PROGRESS_WALL.match(line)
                if m:
                    seen = arrived - float(m.group(1))
                    offset = seen if offset is None else min(offset, seen)
            rc = proc.wait()
        finally:
            killer.cancel()
    return rc, None if offset is None else max(0.0, offset)
