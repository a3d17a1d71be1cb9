"""What a real platform's invoke latency costs each Stellaris mode: sync vs async, side by side.

The local runtime answers an invoke in about a millisecond; AWS Lambda takes tens of
milliseconds warm, with a tail. Sync mode has two invokes on every round's critical path
(the actors, then the learner) and waits for the slower actor; async mode overlaps them with
the other function's work. This runs both modes, interleaved, at several emulated latencies
(``runtime_invoke_latency_ms`` / ``_sigma``: log-normal, unbilled, no CPU — runtime/latency.py)
and reports env steps/s per mode and their ratio.

Async pays for its overlap in env steps (one update of policy lag), so it reaches a return
sooner only where its throughput edge over sync mode exceeds that price. The price is an
input (``--lag-prices``), two measured values by default: 1.4, env steps to Hopper 1,000 with
one update of lag over none in the single-process emulation (214k / 153k,
``staleness_study.py``, 10 fresh seeds), and 1.9, the whole async system's over sync mode's
in the 3-minute Hopper runs (315k / 162k, ``compare.py``, 8 and 12 seeds, transcribed in
``benchmarks/records/compare``). The table says, per latency and price, which mode should get
there first.

    python benchmarks/latency_study.py --latencies 0 50 200 500 50:1 --minutes 1.5

Writes each run under ``--out``, ``latency.json`` there (the rows of every invocation with
that ``--out``), and one record (kind ``latency``: the table, each mode's training path).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks import compare  # noqa: E402
from benchmarks._common import read_summary  # noqa: E402
from benchmarks.records import command_line, run_training_path, write_record  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
# our mode -> (compare.py's system, actors and learners in flight: None = compare.py's default)
MODES: dict[str, tuple[str, int | None, int | None]] = {
    "sync": ("sync", None, None),
    "async": ("stellaris", None, None),
    # Two of each in flight: one function works while the other's invoke is on the wire. (A
    # second actor alone never starts: the backpressure keeps one batch per learner ahead.)
    # More in flight means more lag, so its price in env steps is higher than async's.
    "async-2x2": ("stellaris", 2, 2),
}


def parse_latency(text: str) -> tuple[float, float]:
    """``MS`` or ``MS:SIGMA`` -> (median ms, log-normal sigma)."""
    ms, _, sigma = text.partition(":")
    try:
        point = (float(ms), float(sigma or 0.0))
    except ValueError:
        raise argparse.ArgumentTypeError(f"latency {text!r}: use MS or MS:SIGMA, e.g. 50 or 50:1") from None
    if point[0] < 0 or point[1] < 0:
        raise argparse.ArgumentTypeError(f"latency {text!r}: must be >= 0")
    return point


def label(point: tuple[float, float]) -> str:
    ms, sigma = point
    return f"{ms:g}ms" + (f"-sigma{sigma:g}" if sigma else "")


def latency_args(point: tuple[float, float]) -> list[str]:
    return ["--set", f"experimental.runtime_invoke_latency_ms={point[0]:g}",
            "--set", f"experimental.runtime_invoke_latency_sigma={point[1]:g}"]


def run(mode: str, point: tuple[float, float], run_dir: Path, a: argparse.Namespace) -> dict[str, Any]:
    """compare.py's run of the mode (the same command, batch and settings as its runs), on a
    runtime with the emulated latency."""
    system, actors, learners = MODES[mode]
    ns = argparse.Namespace(
        no_compile=False, anneal_lr=False, backend="local", actors=actors, learners=learners,
        is_correction=None, no_staleness_weights=False, no_bound_decay=False, buffer_max=None,
        set=[], max_load=None, max_load_wait_s=0.0,
    )
    info = compare.run_one(system, a.env, a.seed, a.minutes, run_dir, ns, latency_args(point))
    s = read_summary(run_dir)
    return {"mode": mode, "latency_ms": point[0], "sigma": point[1], "rc": info["rc"],
            "sps": s.get("sps"), "env_steps": s.get("env_steps"), "return": s.get("mean_return"),
            "cost_usd": (s.get("cost") or {}).get("total_usd"), "load_before": info["load_before"],
            "load_after": info["load_after"], "cmd": info["cmd"], "commit": info["commit"],
            "started_utc": info["started_utc"]}


def legend(a: argparse.Namespace) -> str:
    return (
        f"{a.env}, seed {a.seed}, {a.minutes:g}-minute runs, the modes interleaved at each "
        "latency; compare.py's settings: sync mode 2 actors x 4 envs x 256 steps + 1 learner "
        "per round, async 1 actor x 8 envs x 256 steps beside 1 learner, async-2x2 two such "
        "actors and two learners in flight. The latency is added by the local runtime to every "
        "RequestResponse invoke (log-normal median and sigma, half on the way in, half out; "
        "unbilled, no CPU). Rows of earlier invocations with the same --out are kept. An async "
        "variant reaches a return sooner than sync mode when its env steps/s exceed sync "
        "mode's by more than the lag's price in env steps; the last columns name the mode "
        "that should get there first at each price (--lag-prices; measured for async's one "
        "update of lag, so async-2x2, which lags more, gets no verdict).")


def table(rows: list[dict[str, Any]], a: argparse.Namespace) -> tuple[list[str], list[list[str]]]:
    """The study's table: a row per latency, each mode's env steps/s, async's ratio to sync
    mode and the mode that should reach a return first at each lag price."""
    points: dict[tuple[float, float], dict[str, dict[str, Any]]] = {}
    for r in rows:
        points.setdefault((r["latency_ms"], r["sigma"]), {})[r["mode"]] = r
    variants = [m for m in MODES if m != "sync" and any(m in by for by in points.values())]
    head = ["invoke latency", "sync env steps/s"]
    for m in variants:
        head += [f"{m} env steps/s", f"{m} / sync"]
    head += [f"sooner at a lag price of {price:g}" for price in a.lag_prices]
    body = []
    for point in sorted(points):
        by_mode = points[point]
        sync = by_mode.get("sync", {}).get("sps")
        cells = [f"{point[0]:g} ms" + (f", sigma {point[1]:g}" if point[1] else ""),
                 "-" if not sync else f"{sync:,.0f}"]
        ratios: dict[str, float] = {}
        for m in variants:
            sps = by_mode.get(m, {}).get("sps")
            if sps and sync:
                ratios[m] = sps / sync
            cells += ["-" if not sps else f"{sps:,.0f}",
                      f"{ratios[m]:.2f}x" if m in ratios else "-"]
        # The prices were measured for async's one update of lag; more in flight lags more.
        for price in a.lag_prices:
            ratio = ratios.get("async")
            cells.append("-" if ratio is None else "async" if ratio > price else "sync")
        body.append(cells)
    return head, body


def report(rows: list[dict[str, Any]], a: argparse.Namespace, cmd: str) -> list[str]:
    head, body = table(rows, a)
    return [f"`{cmd}`: {legend(a)}", "",
            "| " + " | ".join(head) + " |", "| " + " | ".join(["---"] * len(head)) + " |",
            *("| " + " | ".join(cells) + " |" for cells in body)]


def record(rows: list[dict[str, Any]], a: argparse.Namespace, cmd: str, out: Path) -> Path:
    """The study's record: its table as rows, and the training path of each mode's runs."""
    head, body = table(rows, a)
    paths = {}
    for mode in dict.fromkeys(r["mode"] for r in rows):
        run = next((out / label((r["latency_ms"], r["sigma"])) / mode for r in rows
                    if r["mode"] == mode), None)
        paths[mode] = run_training_path(run) if run is not None else None
    return write_record(
        # rows kept from earlier invocations name the commits they ran at
        "latency", cmd, {"env": a.env, "seed": a.seed, "minutes": a.minutes,
                         "lag_prices": a.lag_prices,
                         "run_commits": sorted({str(r.get("commit"))[:7] for r in rows})},
        rows=[dict(zip(head, cells, strict=True)) for cells in body], records=a.records,
        path="; ".join(f"{m}: {p}" for m, p in paths.items()),
        extra={"title": f"{a.env}, seed {a.seed}, {a.minutes:g}-minute runs",
               "paths": paths, "legend": legend(a)})


def merge(old: list[dict[str, Any]], new: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Earlier rows, with those of a (mode, latency) measured again replaced."""
    key = lambda r: (r["mode"], r["latency_ms"], r["sigma"])  # noqa: E731
    fresh = {key(r) for r in new}
    return [r for r in old if key(r) not in fresh] + new


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--env", default="Hopper-v5")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--minutes", type=float, default=1.5, help="wall-clock budget per run")
    p.add_argument("--latencies", type=parse_latency, nargs="+",
                   default=[(0.0, 0.0), (50.0, 0.0), (200.0, 0.0), (500.0, 0.0), (50.0, 1.0)],
                   help="MS or MS:SIGMA per point (default 0 50 200 500 50:1)")
    p.add_argument("--modes", nargs="+", choices=sorted(MODES), default=["sync", "async"])
    p.add_argument("--lag-prices", type=float, nargs="+", default=[1.4, 1.9],
                   help="env steps async needs per env step of sync mode to the same return "
                        "(default: the emulation's 1.4 and the system's 1.9)")
    p.add_argument("--report-only", action="store_true",
                   help="no runs: rewrite the table from --out's latency.json")
    p.add_argument("--out", default=str(REPO / "benchmarks" / "out" / "latency"))
    p.add_argument("--records", help="records dir (default: $STELLARIS_RECORDS_DIR or "
                   "benchmarks/records)")
    p.add_argument("--no-record", action="store_true", help="write no record")
    a = p.parse_args(argv)
    out = Path(a.out)
    new: list[dict[str, Any]] = []
    if not a.report_only:
        compare.warm_compile_cache(a.env)
        new = [run(mode, point, out / label(point) / mode, a)
               for point in a.latencies for mode in a.modes]
    saved = out / "latency.json"
    rows = merge(json.loads(saved.read_text()) if saved.exists() else [], new)
    saved.write_text(json.dumps(rows, indent=2))
    cmd = command_line("benchmarks/latency_study.py", argv)
    print("\n".join(report(rows, a, cmd)))
    if not a.no_record:
        print(f"record: {record(rows, a, cmd, out)}")
    return 0 if all(r["rc"] == 0 for r in new) else 1


if __name__ == "__main__":
    raise SystemExit(main())
