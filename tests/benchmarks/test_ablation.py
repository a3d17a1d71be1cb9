"""benchmarks/ablation.py: the variants' commands, and the verdicts and the line a script reads,
from records written the way a run writes them (no training here: the CLI runs are the
commands the learning tests and e2e tests already exercise)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks import ablation  # noqa: E402
from benchmarks.records import write_record  # noqa: E402
from orchestrator.cli import _train_parser, train_overrides  # noqa: E402
from orchestrator.config import load_config  # noqa: E402


def _record(records: Path, env: str, variant: str, seed: int, final: float,
            truncated: float | None, **fields: float) -> None:
    steps = 1000
    summary = {"env": env, "variant": variant, "seed": seed, "truncated_frac": truncated,
               "grad_staleness_mean": 3.0, "traj_staleness_mean": 40.0, "is_versions_missing": 0,
               **fields}
    curve = {"return_at_env_steps": {str(p): final * p / steps for p in ablation.points(steps)}}
    tag = "".join(f"-{k}{v:g}" for k, v in fields.items())
    write_record("ablation", "cmd", summary, curve, benchmark="ablation",
                 name=f"{env}/{variant}{tag}-seed{seed}-{steps}", records=records,
                 path="sync" if variant == "sync" else "aggregation (4 learners)")


def test_verdicts_and_the_paper_vs_sync_line(tmp_path: Path) -> None:
    for seed, jitter in ((1, 0.0), (2, 10.0), (3, -10.0)):  # three seeds: verdicts
        _record(tmp_path, "Hopper-v5", "full", seed, 1000 + jitter, 0.6)
        _record(tmp_path, "Hopper-v5", "no-is", seed, 500 + jitter, 0.0)  # full is better
        _record(tmp_path, "Hopper-v5", "no-weights", seed, 1200 + jitter, 0.6)  # worse
        _record(tmp_path, "Hopper-v5", "no-bound", seed, 1000 + 30 * seed - 60, 0.6)
        _record(tmp_path, "Hopper-v5", "sync", seed, 2000 + jitter, None)
    lines = ablation.report(tmp_path, "Hopper-v5", 1000, [])
    assert lines == ["paper shape vs sync at 1,000 env steps, Hopper-v5: 0.50x (truncated 60%)"]
    doc = json.loads((tmp_path / "ablation-verdict" / "Hopper-v5-1000.json").read_text())
    verdicts = {r["variant"]: r["verdict (removing it)"] for r in doc["rows"]}
    assert verdicts == {"full": "reference", "no-is": "helps", "no-weights": "hurts",
                        "no-bound": "no effect", "sync": "baseline"}


def test_runs_at_an_earlier_default_are_reported_apart_never_pooled(tmp_path: Path) -> None:
    # Humanoid-v5's bonus is 0 now: runs without the field trained with 0.003 then
    assert ablation.env_hyper("Humanoid-v5").ent_coef == 0.0
    for seed in (1, 2, 3):
        _record(tmp_path, "Humanoid-v5", "full", seed, 600.0 + seed, 0.7)  # unrecorded: 0.003
        _record(tmp_path, "Humanoid-v5", "no-is", seed, 500.0 + seed, 0.0)
        _record(tmp_path, "Humanoid-v5", "sync", seed, 800.0 + seed, None)
        _record(tmp_path, "Humanoid-v5", "full", seed + 10, 780.0, 0.75, ent_coef=0.0)
        _record(tmp_path, "Humanoid-v5", "sync", seed + 10, 800.0, None, ent_coef=0.0)
        _record(tmp_path, "Humanoid-v5", "full-ent0", seed, 700.0, 0.7)  # a diagnostic's name
    lines = ablation.report(tmp_path, "Humanoid-v5", 1000, [])
    assert lines == [
        "paper shape vs sync at 1,000 env steps, Humanoid-v5: 0.97x (truncated 75%)",
        "paper shape vs sync at 1,000 env steps, Humanoid-v5 [hyper.ent_coef=0.003, an earlier "
        "default]: 0.75x (truncated 70%)"]
    doc = json.loads((tmp_path / "ablation-verdict" / "Humanoid-v5-1000.json").read_text())
    rows = {r["variant"]: r for r in doc["rows"]}
    assert list(rows) == ["full", "sync", "full-ent0", "full[hyper.ent_coef=0.003]",
                          "no-is[hyper.ent_coef=0.003]", "sync[hyper.ent_coef=0.003]"]
    assert rows["full"]["seeds"] == 3 and rows["full[hyper.ent_coef=0.003]"]["seeds"] == 3
    # a removal is judged against full at the same bonus
    assert rows["no-is[hyper.ent_coef=0.003]"]["verdict (removing it)"] == "helps"
    assert rows["no-is[hyper.ent_coef=0.003]"]["vs full"] == pytest.approx(501 / 601, abs=0.01)


def test_two_seeds_give_a_direction_not_a_verdict(tmp_path: Path) -> None:
    for seed in (1, 2):
        _record(tmp_path, "Hopper-v5", "full", seed, 1000.0 + seed, 0.5)
        _record(tmp_path, "Hopper-v5", "no-is", seed, 500.0 + seed, 0.0)
        _record(tmp_path, "Hopper-v5", "no-bound", seed, 970.0 + 20 * seed, 0.5)
    ablation.report(tmp_path, "Hopper-v5", 1000, [])
    doc = json.loads((tmp_path / "ablation-verdict" / "Hopper-v5-1000.json").read_text())
    verdicts = {r["variant"]: r["verdict (removing it)"] for r in doc["rows"]}
    assert verdicts["no-is"] == "too few seeds (full ahead on every seed)"
    assert verdicts["no-bound"] == "too few seeds (mixed)"


def test_the_line_names_1m_as_the_issue_reads_it(tmp_path: Path) -> None:
    for variant, final in (("full", 900.0), ("sync", 1000.0)):
        summary = {"variant": variant, "truncated_frac": 0.25 if variant == "full" else None}
        write_record("ablation", "cmd", summary,
                     {"return_at_env_steps": {"1000000": final}}, benchmark="ablation",
                     name=f"Walker2d-v5/{variant}-seed1-1000000", records=tmp_path)
    assert ablation.report(tmp_path, "Walker2d-v5", 1_000_000, []) == [
        "paper shape vs sync at 1M env steps, Walker2d-v5: 0.90x (truncated 25%)"]


def test_every_variant_is_a_valid_train_command(tmp_path: Path) -> None:
    """Parsed as `stellaris train` parses them (argparse, flags over the preset), no training."""
    for variant in ablation.VARIANTS:
        cmd = ablation.run_command("Hopper-v5", variant, 1, 1000, tmp_path / variant, "local")
        parser = argparse.ArgumentParser()
        _train_parser(parser.add_subparsers(dest="command"))
        cfg = load_config(None, train_overrides(parser.parse_args(cmd[cmd.index("train"):])))
        assert (cfg.preset, cfg.actors, cfg.n_envs, cfg.total_steps) == ("paper", 16, 1, 1000)
        if variant.endswith("-ent0"):  # the diagnostics without the entropy bonus
            assert cfg.hyper.ent_coef == 0.0
        if variant.startswith("sync"):
            assert cfg.mode == "sync"
            assert cfg.actors * cfg.n_envs * cfg.rollout_steps == cfg.learner_batch_steps
        else:
            assert cfg.training_path == "aggregation (4 learners)"
    naive = ablation.VARIANTS["naive"]
    assert {"--no-staleness-weights", "--no-bound-decay", "none"} <= set(naive)


def test_the_table_says_how_far_each_variant_moved_the_policy(tmp_path: Path) -> None:
    """Mean IS weight, epochs run and Adam steps per 1k env steps: what explains a verdict;
    a record older than ``optimizer_steps`` gives the aggregations kept in its details."""
    for seed in (1, 2):
        summary = {"variant": "full", "seed": seed, "env_steps": 4000, "versions": 800,
                   "truncated_frac": 0.7, "is_weight_mean": 0.9 - seed / 100,
                   "update_epochs_mean": 3 + seed, "optimizer_steps": 800}
        write_record("ablation", "cmd", summary, {"return_at_env_steps": {"4000": 900.0}},
                     benchmark="ablation", name=f"Hopper-v5/full-seed{seed}-4000",
                     records=tmp_path)
    old = {"variant": "sync", "seed": 1, "env_steps": 4000, "versions": 1}
    write_record("ablation", "cmd", old, {"return_at_env_steps": {"4000": 1000.0}},
                 benchmark="ablation", name="Hopper-v5/sync-seed1-4000", records=tmp_path)
    older = {"variant": "no-is", "seed": 1, "env_steps": 4000, "versions": 400}
    write_record("ablation", "cmd", older, {"return_at_env_steps": {"4000": 800.0}},
                 benchmark="ablation", name="Hopper-v5/no-is-seed1-4000", records=tmp_path,
                 extra={"details": {"aggregations": 400}})
    ablation.report(tmp_path, "Hopper-v5", 4000, [])
    doc = json.loads((tmp_path / "ablation-verdict" / "Hopper-v5-4000.json").read_text())
    rows = {r["variant"]: r for r in doc["rows"]}
    assert rows["full"]["mean IS weight"] == pytest.approx(0.885)
    assert rows["full"]["epochs run"] == pytest.approx(4.5)
    assert rows["full"]["Adam steps / 1k env steps"] == pytest.approx(200.0)
    assert rows["no-is"]["Adam steps / 1k env steps"] == pytest.approx(100.0)
    assert rows["sync"]["Adam steps / 1k env steps"] is None  # not in a record this old


def test_the_legend_says_how_the_return_moved_with_env_steps_per_second(tmp_path: Path) -> None:
    """Five runs of the paper's path whose return falls as their env steps/s rise: -1; the
    sync runs stay out of it."""
    for seed in range(5):
        variant = ("full", "no-is")[seed % 2]
        write_record("ablation", "cmd", {"variant": variant, "seed": seed, "sps": 500 + 100 * seed},
                     {"return_at_env_steps": {"4000": 2000.0 - 300 * seed}}, benchmark="ablation",
                     name=f"Hopper-v5/{variant}-seed{seed}-4000", records=tmp_path)
    write_record("ablation", "cmd", {"variant": "sync", "seed": 9, "sps": 9999},
                 {"return_at_env_steps": {"4000": 9999.0}}, benchmark="ablation",
                 name="Hopper-v5/sync-seed9-4000", records=tmp_path)
    ablation.report(tmp_path, "Hopper-v5", 4000, [])
    doc = json.loads((tmp_path / "ablation-verdict" / "Hopper-v5-4000.json").read_text())
    assert ("Across the 5 runs of the paper's path, the rank correlation of the return with "
            "env steps/s: -1.00.") in doc["legend"]


def test_the_legend_gives_the_ratio_interval_per_seed_and_along_the_run(tmp_path: Path) -> None:
    """Full ahead of sync early and behind at the end: the legend says both, with the
    interval of the final ratio and each seed's own."""
    for seed, (f_end, s_end) in ((1, (900.0, 1000.0)), (2, (800.0, 1000.0)),
                                 (3, (1000.0, 1000.0))):
        for variant, end, early in (("full", f_end, 600.0), ("sync", s_end, 400.0)):
            curve = {str(p): early for p in ablation.points(4000)[:-1]} | {"4000": end}
            write_record("ablation", "cmd", {"variant": variant, "seed": seed},
                         {"return_at_env_steps": curve}, benchmark="ablation",
                         name=f"Hopper-v5/{variant}-seed{seed}-4000", records=tmp_path)
    ablation.report(tmp_path, "Hopper-v5", 4000, [])
    legend = json.loads((tmp_path / "ablation-verdict" / "Hopper-v5-4000.json").read_text())[
        "legend"]
    line = next(x for x in legend.split("\n\n") if x.startswith("Paper shape vs sync:"))
    assert "per seed 1: 0.90x, 2: 0.80x, 3: 1.00x" in line
    assert "earlier in the run 1,000: 1.50x, 2,000: 1.50x, 3,000: 1.50x" in line
    lo, hi = (float(x) for x in line.split("ratio ")[1].split("x;")[0].split("–"))
    assert 0.8 <= lo <= 0.9 <= hi <= 1.0
