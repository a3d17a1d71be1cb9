"""What one batch of pipeline lag costs PPO in env steps, and which correction buys it back.

An async learner learns batch k+1 while the actors sample batch k+2: every batch it learns
was sampled by the policy of one batch (~320 Adam steps) earlier. This study runs the lean
PPO (``benchmarks/lean_ppo.py``) with ``--lag 0/1`` and the IS corrections, to the same
number of env steps, and compares return vs *env steps* — no wall clock, so runs may share
the cores (``--parallel``) and the machine's load does not enter the result.

    python benchmarks/staleness_study.py --seeds 1 2 3 4 --steps 600000 --parallel 2

Writes ``<out>/study.json`` and one record (kind ``staleness``: the table below);
``--report-only`` rebuilds both from the run folders.
"""

from __future__ import annotations

import argparse
import csv
import json
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.records import command_line, write_record  # noqa: E402

LEGEND = ("Lean PPO, one process per run; returns = mean of the last 100 training episodes, "
          "read at an env-step count, so the machine's load does not enter. `lagN`: each update "
          "learns the rollout sampled N updates earlier; `learnerV`: GAE targets from the "
          "learner's critic; `gdelayN`: each gradient taken at the weights of N Adam steps "
          "earlier; `beta1`: Adam's momentum. Steps to a target: mean ± sd over the seeds that "
          "reached it (how many, when not all).")

# name -> (lag, lean_ppo.py flags); each pins every setting it is about, so a change of
# defaults does not change what a row means.
VARIANTS: dict[str, tuple[int, list[str]]] = {
    "lag0-truncate": (0, ["--is-correction", "truncate", "--hyper", "gae_values=behaviour"]),
    "lag1-truncate": (1, ["--is-correction", "truncate", "--hyper", "gae_values=behaviour"]),
    "lag1-none": (1, ["--is-correction", "none", "--hyper", "gae_values=behaviour"]),
    "lag1-decoupled": (1, ["--is-correction", "decoupled", "--hyper", "gae_values=behaviour"]),
    "lag1-truncate-learnerV": (1, ["--is-correction", "truncate", "--hyper", "gae_values=learner"]),
    "lag1-decoupled-learnerV": (1, ["--is-correction", "decoupled", "--hyper", "gae_values=learner"]),
    "lag0-decoupled-learnerV": (0, ["--is-correction", "decoupled", "--hyper", "gae_values=learner"]),
    # + the gradient staleness of the async system when it aggregated (mean ~6 versions)
    "lag1-decoupled-learnerV-gdelay6": (1, ["--is-correction", "decoupled", "--hyper",
                                            "gae_values=learner", "--grad-delay", "6"]),
    # ... with less explicit momentum: asynchrony adds implicit momentum (Mitliagkas et al. 2016)
    "lag1-decoupled-learnerV-gdelay6-beta1=0.5": (1, [
        "--is-correction", "decoupled", "--hyper", "gae_values=learner", "--grad-delay", "6",
        "--adam-beta1", "0.5"]),
    "lag1-decoupled-learnerV-gdelay6-beta1=0": (1, [
        "--is-correction", "decoupled", "--hyper", "gae_values=learner", "--grad-delay", "6",
        "--adam-beta1", "0"]),
    "lag1-decoupled-learnerV-gdelay3": (1, ["--is-correction", "decoupled", "--hyper",
                                            "gae_values=learner", "--grad-delay", "3"]),
    # the truncation's cap: rho_bar = 1 (the paper's) caps ~half of a lag-1 batch's weights
    # pi_prox / mu at 1; 2 lets most of them through
    "lag1-decoupled-learnerV-rho2": (1, ["--is-correction", "decoupled", "--hyper",
                                         "gae_values=learner", "--hyper", "rho_bar=2"]),
    # half the batch (8 envs x 128 steps, minibatches still 64): one batch of lag is half as
    # many env steps; the lag-0 row is the same change without the lag
    "lag0-decoupled-learnerV-T128": (0, ["--is-correction", "decoupled", "--hyper",
                                         "gae_values=learner", "--rollout-steps", "128",
                                         "--hyper", "num_minibatches=16"]),
    "lag1-decoupled-learnerV-T128": (1, ["--is-correction", "decoupled", "--hyper",
                                         "gae_values=learner", "--rollout-steps", "128",
                                         "--hyper", "num_minibatches=16"]),
    # the actors start sampling batch k+1 once the learner is E of its 10 epochs into batch k:
    # the data is (10 - E) / 10 of an update old instead of a whole one
    "pub2-decoupled-learnerV": (0, ["--is-correction", "decoupled", "--hyper",
                                    "gae_values=learner", "--publish-epoch", "2"]),
    "pub5-decoupled-learnerV": (0, ["--is-correction", "decoupled", "--hyper",
                                    "gae_values=learner", "--publish-epoch", "5"]),
}
CHECKPOINTS = (200_000, 400_000, 600_000)
TARGETS = (1000, 1500, 2000)


def run_one(env: str, name: str, seed: int, steps: int, out: Path) -> Path:
    lag, flags = VARIANTS[name]
    run_dir = out / name / f"seed{seed}"
    if (run_dir / "summary.json").exists():
        return run_dir  # resumable: a finished run is kept
    cmd = [sys.executable, str(ROOT / "benchmarks" / "lean_ppo.py"), "--env", env, "--seed",
           str(seed), "--total-steps", str(steps), "--lag", str(lag), *flags, "--out", str(run_dir)]
    subprocess.run(cmd, check=True, cwd=ROOT, stdout=subprocess.DEVNULL)
    return run_dir


def curve(run_dir: Path) -> tuple[np.ndarray, np.ndarray]:
    steps, rets = [], []
    with open(run_dir / "metrics.csv") as fh:
        for row in csv.DictReader(fh):
            if row.get("episodic_return"):
                steps.append(float(row["env_steps"]))
                rets.append(float(row["episodic_return"]))
    return np.asarray(steps), np.asarray(rets)


def summarise(run_dir: Path) -> dict[str, object]:
    steps, rets = curve(run_dir)
    # a run shorter than a checkpoint (a --steps 400000 variant) has no return there
    at = {str(c): float(rets[steps <= c][-1]) if steps.size and steps[-1] >= 0.99 * c else None
          for c in CHECKPOINTS}
    reach = {str(t): float(steps[rets >= t][0]) if (rets >= t).any() else None for t in TARGETS}
    done = json.loads((run_dir / "summary.json").read_text())
    return {"return_at": at, "steps_to": reach, "env_steps": int(done["env_steps"])}


def _ms(xs: list[float | None], scale: float = 1.0) -> str:
    v = [x / scale for x in xs if x is not None]
    return f"{np.mean(v):.0f} ± {np.std(v):.0f}" if v else "-"


def table(out: Path, seeds: list[int]) -> tuple[list[str], list[list[str]]]:
    """The study's table from the run folders (``study.json`` beside them): per variant, the
    return at each checkpoint and the k env steps to each target."""
    rows: dict[str, list[dict[str, object]]] = {}
    for name in VARIANTS:
        runs = [out / name / f"seed{s}" for s in seeds]
        rows[name] = [summarise(r) for r in runs if (r / "summary.json").exists()]
    (out / "study.json").write_text(json.dumps(rows, indent=2))
    head = (["variant", "seeds"] + [f"return @ {c // 1000}k steps" for c in CHECKPOINTS]
            + [f"k steps to {t}" for t in TARGETS])
    body = []
    for name, rs in rows.items():
        if not rs:
            continue
        cells = [_ms([r["return_at"][str(c)] for r in rs]) for c in CHECKPOINTS]  # type: ignore[index]
        for t in TARGETS:
            hit = [r["steps_to"][str(t)] for r in rs]  # type: ignore[index]
            n = sum(h is not None for h in hit)
            cells.append(_ms(hit, 1000) + ("" if n == len(rs) else f" ({n}/{len(rs)})"))
        body.append([name, str(len(rs)), *cells])
    return head, body


def report(env: str, out: Path, seeds: list[int], steps: int) -> list[str]:
    head, body = table(out, seeds)
    return [f"`python benchmarks/staleness_study.py --env {env} --seeds "
            f"{' '.join(map(str, seeds))} --steps {steps}`: {LEGEND}", "",
            "| " + " | ".join(head) + " |", "|" + "---|" * len(head),
            *("| " + " | ".join(cells) + " |" for cells in body), ""]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--env", default="Hopper-v5")
    p.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3, 4])
    p.add_argument("--steps", type=int, default=600_000)
    p.add_argument("--variants", nargs="+", choices=list(VARIANTS), default=list(VARIANTS))
    p.add_argument("--parallel", type=int, default=2, help="runs at once (env steps, not time)")
    p.add_argument("--out", default=str(ROOT / "benchmarks" / "out" / "staleness"))
    p.add_argument("--report-only", action="store_true")
    p.add_argument("--records", help="records dir (default: $STELLARIS_RECORDS_DIR or "
                   "benchmarks/records)")
    p.add_argument("--no-record", action="store_true", help="write no record")
    a = p.parse_args(argv)
    out = Path(a.out) / a.env
    if not a.report_only:
        jobs = [(name, s) for s in a.seeds for name in a.variants]
        with ThreadPoolExecutor(a.parallel) as pool:
            list(pool.map(lambda j: run_one(a.env, j[0], j[1], a.steps, out), jobs))
    print("\n".join(report(a.env, out, a.seeds, a.steps)))
    if not a.no_record:
        head, body = table(out, a.seeds)
        print(write_record(  # every run is the lean PPO: no Stellaris training path
            "staleness", command_line("benchmarks/staleness_study.py", argv),
            {"env": a.env, "seeds": a.seeds, "steps": a.steps},
            rows=[dict(zip(head, cells, strict=True)) for cells in body], records=a.records,
            extra={"title": f"{a.env}, lean PPO with pipeline lag", "legend": LEGEND}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
