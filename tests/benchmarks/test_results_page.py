"""The results page and its records: the committed page is what the committed records render,
every record says how its numbers were made, and a kind the report does not know still shows."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from benchmarks import report  # noqa: E402
from benchmarks.records import (  # noqa: E402
    PUBLISHING,
    RECORDS_ENV,
    SCHEMA,
    SYNC,
    git_state,
    read_records,
    records_dir,
    training_path,
    write_record,
)
from benchmarks.report_render import seed_list  # noqa: E402


def test_the_committed_page_is_what_the_committed_records_render() -> None:
    done = subprocess.run([sys.executable, "benchmarks/report.py", "--check"], cwd=REPO,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr


def test_every_committed_record_names_its_command_commit_date_and_training_path() -> None:
    records = read_records(REPO / "benchmarks" / "records")
    assert records
    for r in records:
        assert r["command"].startswith("python "), r["file"]
        assert len(r["commit"]) == 40 and r["date"].endswith("Z"), r["file"]
        assert r["source"] in ("measured", "transcribed"), r["file"]
        stellaris = {k: v for k, v in (r.get("paths") or {}).items()
                     if k.startswith(("Stellaris", "our sync", "sync", "async"))}
        assert all(stellaris.values()), r["file"]  # every Stellaris row names its path
    transcribed = {r["benchmark"] for r in records if r["source"] == "transcribed"}
    assert {"compare", "learning", "staleness", "latency"} <= transcribed


def test_check_fails_on_a_stale_page_and_the_page_shows_a_new_kind(tmp_path: Path,
                                                                   monkeypatch) -> None:
    """A kind the report has no code for (here ``ablation``, and a made-up one) renders as a
    table of its values; ``--check`` fails until the page is rendered again."""
    monkeypatch.setenv(RECORDS_ENV, str(tmp_path / "records"))
    assert records_dir() == tmp_path / "records"
    page = tmp_path / "results.md"
    assert report.main(["--out", str(page)]) == 0
    assert "No records yet: `python benchmarks/ablation.py` writes them." in page.read_text()
    # an empty GPU section says why it is empty, and how a lent GPU machine would fill it
    gpu = page.read_text().split("## Learner on a GPU")[1].split("\n## ")[0]
    assert "No machine with a GPU has been lent" in gpu and "scripts/gpu_check.sh" in gpu
    f = write_record("ablation", "python benchmarks/ablation.py --quick",
                     {"variant": "is=none", "seed": 3, "sps": 7123.4},
                     {"return_at_min": {"5": 2101.5}}, path=PUBLISHING)
    write_record("made_up", "python benchmarks/made_up.py", {"widgets": 17},
                 rows=[{"case": "a", "µs": 12.25}, {"case": "b", "µs": {"mean": 3.5, "sd": 0.25}}])
    write_record("ablation-verdict", "python benchmarks/ablation.py --report", {"env": "Hopper"},
                 benchmark="ablation-verdict",
                 rows=[{"variant": "full", "return": {"mean": 2e3, "lo": 1.9e3, "hi": 2.1e3}}])
    assert f.parent == tmp_path / "records" / "ablation"
    assert report.main(["--out", str(page), "--check"]) == 1
    assert report.main(["--out", str(page)]) == 0
    assert report.main(["--out", str(page), "--check"]) == 0
    text = page.read_text()
    head, _ = git_state()
    assert "## Ablation of the paper's mechanisms (`benchmarks/ablation.py`)" in text
    assert "| date | commit | training path | variant | seed | sps | return_at_min.5 |" in text
    assert f"| `{head[:7]}`" in text and f"| {PUBLISHING} | is=none | 3 | 7,123 | 2,102 |" in text
    assert "## made_up (`benchmarks/made_up.py`)" in text
    # a benchmark that extends a known one's name follows it, under the script its records name
    verdicts = text.index("## ablation-verdict (`benchmarks/ablation.py`)")
    assert text.index("## Ablation of") < verdicts < text.index("## Learning")
    assert "| full | 2,000 [1,900–2,100] |" in text
    assert "| a | 12.2 |" in text and "| b | 3.50 ± 0.25 |" in text and "widgets: 17." in text


def test_a_record_names_its_commit_date_machine_and_versions(tmp_path: Path) -> None:
    f = write_record("step", "python benchmarks/step_bench.py", {"env": "Hopper-v5"},
                     rows=[{"repeat": 1, "fused (µs/step)": 218.0}], records=tmp_path,
                     name="a/b-1.5")
    assert f == tmp_path / "step" / "a" / "b-1.5.json"
    r = json.loads(f.read_text())
    head, dirty = git_state()
    assert r["schema"] == SCHEMA and (r["commit"], r["dirty"]) == (head, dirty)
    assert r["machine"]["cpu_count"] >= 1 and "hostname" not in r["machine"]
    assert r["software"]["python"] and r["software"]["torch"]
    assert r["source"] == "measured" and r["path"] is None
    (back,) = read_records(tmp_path)
    assert back["rows"] == [{"repeat": 1, "fused (µs/step)": 218.0}]
    f.write_text(json.dumps({**r, "schema": 99}))
    with pytest.raises(ValueError, match="schema"):
        read_records(tmp_path)


def test_training_path_reads_mode_learners_and_the_publishing_flag() -> None:
    assert training_path({"mode": "sync", "learners": 1}) == SYNC
    # the default (learner_publishes None): one learner publishes, several aggregate
    assert training_path({"mode": "async", "learners": 1, "learner_publishes": None}) == PUBLISHING
    assert training_path({"mode": "async", "learners": 2, "learner_publishes": None}) == \
        "aggregation (2 learners)"
    assert training_path({"mode": "async", "learners": 1, "learner_publishes": False}) == \
        "aggregation (1 learner)"
    # the trainer's resolved flag in summary.json wins; a config from before the flag aggregated
    assert training_path({"mode": "async", "learners": 1},
                         {"learners_publish": True}) == PUBLISHING
    assert training_path({"mode": "async", "learners": 1}) == "aggregation (1 learner)"
    assert training_path({"mode": "async", "learners": 1,
                          "experimental": {"learner_publishes": None}}) == PUBLISHING
    assert training_path({"system": "lean", "mode": "async"}) is None


def test_the_headline_holds_the_equal_core_series_with_its_seeds() -> None:
    """Diagnoses and default selections are in the compare section, never in the headline;
    each headline row names its seeds."""
    text = report.render(read_records(REPO / "benchmarks" / "records"))
    start = text.index("## Headline")
    headline = text[start:text.index("\n## ", start + 1)]
    assert "`equal-cores`" in headline and "| 3001–3005 (5) |" in headline
    assert "halfcheetah-diagnosis" not in headline and "halfcheetah-diagnosis" in text
    assert seed_list([3003, 3001, 3002, 3007, 4001, 4002]) == "3001–3003, 3007, 4001–4002"


def test_the_page_links_a_figure_per_compare_group_drawn_from_its_records(
        tmp_path: Path, monkeypatch) -> None:
    """Each group of compare.py runs gets a figure of return vs wall clock, env steps and $,
    each ablation verdict one of return vs env steps and vs versions, drawn from the records
    alone; ``--check`` fails while one is missing, and one nothing makes any more is removed."""
    from benchmarks.report_figures import figure_name, run_points

    src = REPO / "benchmarks" / "records" / "compare" / "Hopper-v5-3min" / "paper-demo-quick"
    dst = tmp_path / "records" / "compare" / "Hopper-v5-3min" / "paper-demo-quick"
    dst.mkdir(parents=True)
    for f in src.glob("*.json"):
        (dst / f.name).write_text(f.read_text())
    # an ablation's verdict and two of the runs it was read from
    for part in ("ablation/Hopper-v5/full-seed111-300000.json",
                 "ablation/Hopper-v5/sync-seed111-300000.json",
                 "ablation-verdict/Hopper-v5-300000.json"):
        (tmp_path / "records" / part).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "records" / part).write_text(
            (REPO / "benchmarks" / "records" / part).read_text())
    monkeypatch.setenv(RECORDS_ENV, str(tmp_path / "records"))
    page, figs = tmp_path / "docs" / "results.md", tmp_path / "docs" / "figures"
    figs.mkdir(parents=True)
    (figs / "compare-Gone-v0-3min.png").write_bytes(b"stale")
    assert report.main(["--out", str(page)]) == 0
    name = figure_name(("Hopper-v5", 3.0, "paper-demo-quick"))
    assert name == "compare-Hopper-v5-3min-paper-demo-quick.png"
    assert f"](figures/{name})" in page.read_text()
    png = (figs / name).read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000
    assert not (figs / "compare-Gone-v0-3min.png").exists()
    verdict = page.read_text().split("### Hopper-v5 at 300,000 env steps")[1]
    assert "](figures/ablation-Hopper-v5-300000.png)" in verdict.split("\n## ")[0]
    assert (figs / "ablation-Hopper-v5-300000.png").read_bytes()[:4] == b"\x89PNG"
    assert sorted(p.name for p in figs.iterdir()) == [
        "ablation-Hopper-v5-300000.png", name]
    assert report.main(["--out", str(page), "--check"]) == 0
    (figs / name).unlink()
    assert report.main(["--out", str(page), "--check"]) == 1
    # a run's points: each target it reached, its return at each minute and where it ended
    (rec,) = [json.loads(f.read_text()) for f in dst.glob("rllib-*.json")]
    pts = run_points(rec["curve_points"])
    reached = rec["curve_points"]["to_target"]
    assert (reached["500"]["wall_s"], 500.0) in pts["wall_s"]
    assert (60.0, rec["curve_points"]["return_at_min"]["1"]) in pts["wall_s"]
    assert pts["usd"][-1] == (rec["curve_points"]["last"]["usd"],
                              rec["curve_points"]["last"]["return"])
    assert [x for x, _ in pts["env_steps"]] == sorted(x for x, _ in pts["env_steps"])
