"""The paper's demo experiment as one command: Stellaris at the paper's shape against RLlib
PPO on the demo's three envs, with figures of return vs wall clock, env steps and $.

Stellaris runs ``--preset paper`` (16 actors x 1 env x 256 steps, 4 learners whose gradients
the orchestrator aggregates); RLlib 2.60 PPO runs at its own settings (benchmarks/rllib_ppo.py).
Both run one at a time on the same machine, for the same wall-clock budget from process start;
this is ``benchmarks/compare.py`` with the systems, the preset and the envs fixed, so its
records, figures (under ``--out``) and results-page section come out the same way.

    python benchmarks/paper_demo.py --quick     # Hopper-v5, 3 minutes, one seed
    python benchmarks/paper_demo.py             # Hopper, Walker2d, Humanoid; 10 min; 3 seeds
    python benchmarks/paper_demo.py --envs Walker2d-v5 --minutes 5 --seeds 7 8
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks import compare  # noqa: E402

ENVS = ["Hopper-v5", "Walker2d-v5", "Humanoid-v5"]


def compare_argv(args: argparse.Namespace) -> list[str]:
    envs = args.envs or (["Hopper-v5"] if args.quick else ENVS)
    seeds = args.seeds or ([201] if args.quick else [201, 202, 203])
    minutes = args.minutes or (3.0 if args.quick else 10.0)
    argv = ["--envs", *envs, "--seeds", *map(str, seeds), "--minutes", f"{minutes:g}",
            "--systems", "stellaris", "rllib", "--set", "preset=paper",
            "--out", args.out, "--series", "paper-demo" + ("-quick" if args.quick else "")]
    if args.records:
        argv += ["--records", args.records]
    return argv


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="Hopper-v5, 3 minutes, one seed")
    p.add_argument("--envs", nargs="+", help=f"gymnasium ids (default: {' '.join(ENVS)})")
    p.add_argument("--seeds", type=int, nargs="+", help="seeds (default 201 202 203)")
    p.add_argument("--minutes", type=float, help="wall-clock budget per run (default 10)")
    p.add_argument("--out", default=str(REPO / "benchmarks" / "out" / "paper-demo"),
                   help="run folders and figures (git-ignored)")
    p.add_argument("--records", help="records dir (default: $STELLARIS_RECORDS_DIR or "
                   "benchmarks/records)")
    p.add_argument("--print-only", action="store_true",
                   help="print the compare.py command instead of running it")
    args = p.parse_args(argv)
    cargv = compare_argv(args)
    if args.print_only:
        print(" ".join(["python", "benchmarks/compare.py", *cargv]))
        return 0
    return compare.main(cargv)


if __name__ == "__main__":
    raise SystemExit(main())
