"""latency_study.py end to end on CartPole-v1: both modes on a local runtime that adds the
emulated latency, each run's config carrying it, and the study's record on the results page."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from benchmarks import latency_study, report  # noqa: E402
from benchmarks.records import PUBLISHING, SYNC, read_records  # noqa: E402


def test_latency_points_parse_with_a_clear_error() -> None:
    assert latency_study.parse_latency("50") == (50.0, 0.0)
    assert latency_study.parse_latency("50:1.5") == (50.0, 1.5)
    assert latency_study.label((50.0, 1.5)) == "50ms-sigma1.5"
    for bad in ("fast", "50:x", "-5"):
        with pytest.raises(argparse.ArgumentTypeError, match="latency"):
            latency_study.parse_latency(bad)


@pytest.mark.timeout(240)
def test_study_runs_both_modes_on_a_slow_platform(tmp_path: Path) -> None:
    out, records = tmp_path / "out", tmp_path / "records"
    rc = latency_study.main(["--env", "CartPole-v1", "--minutes", "0.15", "--latencies", "150",
                             "--out", str(out), "--records", str(records)])
    rows = json.loads((out / "latency.json").read_text())
    assert rc == 0, [r["rc"] for r in rows]
    assert [r["mode"] for r in rows] == ["sync", "async"]
    for row in rows:
        run = out / "150ms" / row["mode"]
        assert row["sps"] > 0, (run / "stdout.log").read_text()[-2000:]
        config = json.loads((run / "config.json").read_text())
        latency = {**config, **config.get("experimental", {})}["runtime_invoke_latency_ms"]
        assert latency == 150 and config["backend"] == "local"
        assert "emulating platform latency: each invoke waits a log-normal median 150 ms" in (
            run / "runtime.log").read_text()
    (rec,) = read_records(records)
    assert rec["kind"] == "latency" and rec["paths"] == {"sync": SYNC, "async": PUBLISHING}
    assert rec["rows"][0]["invoke latency"] == "150 ms"
    page = tmp_path / "results.md"
    assert report.main(["--records", str(records), "--out", str(page)]) == 0
    text = page.read_text()
    assert "| 150 ms |" in text and "| async / sync |" in text
    assert "| sooner at a lag price of 1.4 | sooner at a lag price of 1.9 |" in text
    assert f"{rows[1]['sps']:,.0f}" in text


def test_rows_of_a_new_invocation_replace_only_the_points_it_measured() -> None:
    old = [{"mode": "sync", "latency_ms": 0.0, "sigma": 0.0, "sps": 1.0},
           {"mode": "async", "latency_ms": 0.0, "sigma": 0.0, "sps": 2.0}]
    new = [{"mode": "async", "latency_ms": 0.0, "sigma": 0.0, "sps": 3.0}]
    merged = latency_study.merge(old, new)
    assert sorted((r["mode"], r["sps"]) for r in merged) == [("async", 3.0), ("sync", 1.0)]
    a = argparse.Namespace(env="Hopper-v5", seed=1, minutes=1.5, lag_prices=[1.4, 4.0])
    table = latency_study.report(merged, a, "cmd")
    assert table[-1] == "| 0 ms | 1 | 3 | 3.00x | async | sync |"
