"""Result records: small JSON files under ``benchmarks/records/<benchmark>/`` that
``benchmarks/report.py`` renders into ``docs/results.md``.

A record is one run of a benchmark (or one invocation of a study, or one table transcribed
from an earlier results page), and carries everything needed to say how its numbers were made:
the command, the commit (and whether the tree had uncommitted changes), the date (UTC), the
machine (CPU count and model, no hostname), the Python and torch versions and, for Stellaris,
the training path that produced it — a publishing learner (pipelined PPO), aggregation of
several learners' gradients, or sync rounds. Records are a few KB: the curve's key points and
the summary, never the curve itself (the run folders under ``benchmarks/out`` keep those).

Where records go: ``--records DIR`` of a benchmark, else ``$STELLARIS_RECORDS_DIR``, else
``benchmarks/records``. Nothing read here is executed: records are plain JSON.
"""

from __future__ import annotations

import json
import os
import platform
import re
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
SCHEMA = 1
RECORDS_ENV = "STELLARIS_RECORDS_DIR"
DEFAULT_DIR = REPO / "benchmarks" / "records"
PUBLISHING = "one publishing learner (pipelined PPO)"
SYNC = "sync"


def records_dir(override: str | os.PathLike[str] | None = None) -> Path:
    """Where records are written and read: ``override``, else ``$STELLARIS_RECORDS_DIR``,
    else ``benchmarks/records``."""
    if override:
        return Path(override)
    env = os.environ.get(RECORDS_ENV)
    return Path(env) if env else DEFAULT_DIR


# Other people's systems (and our lean PPO reference): no Stellaris training path.
BASELINE_SYSTEMS = ("rllib", "lean", "lean2", "rllib-norm", "rllib-appo", "sb3", "sb3-ours",
                    "sf2")


def aggregation(learners: int) -> str:
    return f"aggregation ({learners} learner{'' if learners == 1 else 's'})"


def training_path(config: dict[str, Any], summary: dict[str, Any] | None = None) -> str | None:
    """Which of Stellaris's training paths a run took, from its ``config.json`` (``mode``,
    ``learners``, ``learner_publishes``) and ``summary.json`` (``learners_publish``, the
    trainer's resolved flag); None for a run that is not Stellaris's (the lean PPO, RLlib).
    A config without ``learner_publishes`` predates the publishing learner: it aggregated."""
    summary = summary or {}
    if config.get("system") in BASELINE_SYSTEMS:
        return None
    mode = summary.get("mode") or config.get("mode")
    if mode not in ("async", "sync"):  # a baseline's own mode name ("lean", "sb3", ...)
        return None
    if mode == "sync":
        return SYNC
    learners = int(config.get("learners") or 1)
    # the flag may sit in a section of the config (e.g. ``experimental``)
    flags = {**{k: v for part in config.values() if isinstance(part, dict)
                for k, v in part.items()}, **config}
    publishes = summary.get("learners_publish")
    if publishes is None:
        publishes = flags.get("publishing_learner")
    if publishes is None:
        if "learner_publishes" not in flags:
            publishes = False
        elif flags["learner_publishes"] is None:
            publishes = learners == 1  # the default: publish when one learner is in flight
        else:
            publishes = bool(flags["learner_publishes"])
    return PUBLISHING if publishes else aggregation(learners)


def run_training_path(run_dir: str | os.PathLike[str]) -> str | None:
    """:func:`training_path` of a run folder (None when it has no ``config.json``)."""
    folder = Path(run_dir)
    cfg, summ = folder / "config.json", folder / "summary.json"
    if not cfg.exists():
        return None
    summary = json.loads(summ.read_text()) if summ.exists() else {}
    return training_path(json.loads(cfg.read_text()), summary)


def git_state(repo: Path = REPO) -> tuple[str | None, bool | None]:
    """(``git rev-parse HEAD``, whether tracked files differ from it); (None, None) outside git."""
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True,
                              text=True, check=True).stdout.strip()
        status = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                                cwd=repo, capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return None, None
    return head, bool(status.strip())


def _cpu_model() -> str | None:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or None


def machine() -> dict[str, Any]:
    """What ran it, without naming the host: CPU count and model, OS and architecture, and the
    GPU where torch is already loaded and sees one."""
    info: dict[str, Any] = {"cpu_count": os.cpu_count(), "cpu_model": _cpu_model(),
                            "system": platform.system(), "arch": platform.machine(), "gpu": None}
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name(0)
    return info


def software() -> dict[str, str | None]:
    def version(pkg: str) -> str | None:
        try:
            return metadata.version(pkg)
        except metadata.PackageNotFoundError:
            return None
    return {"python": platform.python_version(), "torch": version("torch"),
            "numpy": version("numpy"), "gymnasium": version("gymnasium")}


def command_line(script: str, argv: list[str] | None) -> str:
    """The command a benchmark was run with, as a user would type it from the repo root."""
    args = sys.argv[1:] if argv is None else argv
    return " ".join(["python", script, *args]).strip()


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._=+-]+", "_", text).strip("_") or "record"


def write_record(kind: str, command: str, summary: dict[str, Any],
                 curve_points: dict[str, Any] | None = None, *, benchmark: str | None = None,
                 name: str | None = None, path: str | None = None,
                 run_dir: str | os.PathLike[str] | None = None,
                 rows: list[dict[str, Any]] | None = None,
                 records: str | os.PathLike[str] | None = None,
                 provenance: dict[str, Any] | None = None,
                 extra: dict[str, Any] | None = None) -> Path:
    """Write one record and return its file.

    - ``kind``: what the record is ("compare", "ablation", "latency", ... or "table" for a
      transcribed table); the report renders kinds it knows in their own way and any other
      kind as a generic table, so a new benchmark needs no change to the report.
    - ``command``: the command line that produced the numbers (see :func:`command_line`).
    - ``summary``: the run's summary (JSON-able; scalars render as columns).
    - ``curve_points``: the curve's key points, e.g. ``{"return_at_min": {"2": 3061.0},
      "to_target": {"2000": {"wall_s": 37.0, "env_steps": 258000, "usd": 0.002}}}``.
    - ``benchmark``: the page section and the folder under the records dir (default ``kind``).
    - ``name``: the file's path under that folder, without ``.json`` (may contain ``/``);
      the same name overwrites. Default: the date and the kind, never overwriting.
    - ``path``: the training path ("one publishing learner (pipelined PPO)", "aggregation
      (N learners)", "sync"); with ``run_dir`` instead it is read from the run's
      ``config.json``/``summary.json``. Every Stellaris record should carry one.
    - ``rows``: a table the benchmark computed (a list of flat dicts, one per row); cells are
      numbers, strings, None or ``{"mean", "sd", "reached", "n"}``.
    - ``records``: the records dir (default :func:`records_dir`).
    - ``provenance``: overrides of the filled-in fields (``commit``, ``dirty``, ``date``,
      ``machine``, ``software``, ``source``), e.g. for a run recorded after the fact.
    - ``extra``: more top-level fields (e.g. a transcribed record's ``tables``).

    Example, from a new script::

        from benchmarks.records import command_line, write_record
        write_record("ablation", command_line("benchmarks/ablation.py", argv),
                     {"variant": "is=none", "seed": 3, "sps": 7100.0},
                     {"return_at_min": {"5": 2100.0}}, run_dir=run_folder)
    """
    if run_dir is not None and path is None:
        path = run_training_path(run_dir)
    commit, dirty = git_state()
    now = time.gmtime()
    record: dict[str, Any] = {
        "schema": SCHEMA, "kind": kind, "benchmark": benchmark or kind, "command": command,
        "commit": commit, "dirty": dirty, "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", now),
        "machine": machine(), "software": software(), "source": "measured", "path": path,
        "summary": summary, "curve_points": curve_points or {},
    }
    if rows is not None:
        record["rows"] = rows
    record.update(provenance or {})
    record.update(extra or {})
    folder = records_dir(records) / _slug(record["benchmark"])
    if name is None:
        stem = f"{time.strftime('%Y%m%dT%H%M%SZ', now)}-{_slug(kind)}"
        out, i = folder / f"{stem}.json", 2
        while out.exists():
            out, i = folder / f"{stem}-{i}.json", i + 1
    else:
        out = folder.joinpath(*(_slug(p) for p in name.split("/")))
        out = out.with_name(out.name + ".json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(dumps(record))
    return out


def dumps(record: dict[str, Any]) -> str:
    """A record's JSON: indented, with each list of plain values on one line (a table's row,
    a run's values), so files stay small and their diffs readable."""
    text = json.dumps(record, indent=1, ensure_ascii=False, default=_jsonable)

    def one_line(m: re.Match[str]) -> str:
        flat = "[" + re.sub(r",\n\s*", ", ", m.group(1)) + "]"
        return flat if len(flat) <= 240 else m.group(0)

    return re.sub(r"\[\n\s*((?:[^\[\]{}\n]+,\n\s*)*[^\[\]{}\n]+)\n\s*\]", one_line,
                  text) + "\n"


def _jsonable(value: Any) -> Any:
    if isinstance(value, Path):
        return str(value)
    if hasattr(value, "item"):  # numpy scalars
        return value.item()
    raise TypeError(f"not JSON-able in a record: {type(value).__name__}")


def read_records(root: str | os.PathLike[str] | None = None) -> list[dict[str, Any]]:
    """Every record under ``root`` (default :func:`records_dir`), in file order, each with
    ``file`` (its path relative to the repository, or to ``root`` outside it) added."""
    base = records_dir(root)
    out = []
    for f in sorted(base.rglob("*.json")):
        record = json.loads(f.read_text())
        if record.get("schema") != SCHEMA:
            raise ValueError(f"{f}: record schema {record.get('schema')!r}, expected {SCHEMA}")
        for key in ("kind", "benchmark", "command", "date"):
            if key not in record:
                raise ValueError(f"{f}: a record needs {key!r}")
        try:
            record["file"] = f.resolve().relative_to(REPO).as_posix()
        except ValueError:
            record["file"] = f.relative_to(base).as_posix()
        out.append(record)
    return out
