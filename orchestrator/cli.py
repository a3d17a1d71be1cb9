"""The ``stellaris`` command line.

    stellaris train --env Hopper-v5 --mode async --backend local --minutes 3
    stellaris evaluate runs/<run_id> [--episodes 10] [--video DIR]
    stellaris plot runs/a runs/b [--out DIR]
    stellaris runtime serve [--port 9000]       (the local Lambda runtime)
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

os.environ.setdefault("OMP_NUM_THREADS", "1")  # the orchestrator shares the machine


def parse_set(items: list[str]) -> dict[str, Any]:
    """``--set hyper.learning_rate=1e-3`` -> nested overrides (values parsed as JSON if they can)."""
    out: dict[str, Any] = {}
    for item in items:
        if "=" not in item:
            raise SystemExit(f"error: --set expects KEY=VALUE, got {item!r}")
        key, raw = item.split("=", 1)
        try:
            value: Any = json.loads(raw)
        except ValueError:
            value = raw
        node = out
        parts = key.split(".")
        for p in parts[:-1]:
            node = node.setdefault(p, {})
        node[parts[-1]] = value
    return out


def _train_parser(sub: Any) -> None:
    p = sub.add_parser("train", help="train a policy (async Stellaris or the sync baseline)")
    p.add_argument("--config", help="TOML file with any TrainConfig fields")
    p.add_argument("--preset", choices=["paper"],
                   help="a named shape under your flags: paper = 16 actors x 1 env x 256 steps, "
                   "4 learners, staleness-aware aggregation (the SC'24 demo)")
    p.add_argument("--env")
    p.add_argument("--mode", choices=["async", "sync"])
    p.add_argument("--backend", choices=["inline", "local", "lambda", "ray"])
    p.add_argument("--actors", type=int)
    p.add_argument("--learners", type=int)
    budget = p.add_mutually_exclusive_group()
    budget.add_argument("--total-steps", type=int)
    budget.add_argument("--minutes", type=float)
    p.add_argument("--seed", type=int)
    p.add_argument("--run-dir")
    p.add_argument("--run-id")
    p.add_argument("--restart", action="store_true", default=None, help="ignore an existing checkpoint")
    p.add_argument("--init-from", help="warm start from this checkpoint file (weights, "
                   "normalisers, Adam moments; counters at zero)")
    p.add_argument("--autoscale", action="store_true", default=None)
    p.add_argument("--max-actors", type=int)
    p.add_argument("--budget-usd", type=float)
    p.add_argument("--stop-at-return", type=float,
                   help="also stop once the mean return of the last 100 episodes reaches this")
    p.add_argument("--redis-url")
    p.add_argument("--endpoint-url", help="Lambda endpoint (backend lambda)")
    p.add_argument("--region")
    p.add_argument("--ray-address")
    p.add_argument("--device", choices=["auto", "cpu", "cuda"])
    p.add_argument("--n-envs", type=int)
    p.add_argument("--rollout-steps", type=int)
    p.add_argument("--is-correction", choices=["none", "truncate", "vtrace", "decoupled"])
    p.add_argument("--no-staleness-weights", dest="staleness_weights", action="store_false", default=None)
    p.add_argument("--no-bound-decay", dest="bound_decay", action="store_false", default=None)
    p.add_argument("--progress", choices=["auto", "rich", "plain", "none"])
    p.add_argument("--eval-interval-s", type=float)
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="any config field, e.g. --set hyper.learning_rate=1e-3")


def cmd_train(args: argparse.Namespace) -> int:
    from orchestrator.config import ConfigError, load_config
    from orchestrator.run import PreflightError, train

    flags = {k: v for k, v in vars(args).items()
             if k not in ("command", "config", "set", "is_correction", "func") and v is not None}
    overrides = parse_set(args.set)
    if args.is_correction:
        overrides.setdefault("hyper", {})["is_correction"] = args.is_correction
    if args.minutes is not None:
        flags["total_steps"] = None
    if args.total_steps is not None:
        flags["minutes"] = None
    try:
        cfg = load_config(args.config, {**overrides, **flags})
        summary = train(cfg)
    except (ConfigError, PreflightError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    ret = summary.get("mean_return")
    print(
        f"done: run {summary['run_id']} | {summary['env_steps']:,} env steps in {summary['wall_s']:.0f}s "
        f"| {summary['sps']:.0f} steps/s | return {'-' if ret is None else f'{ret:.1f}'} "
        f"| version {summary['version']} | cost ${summary['cost']['total_usd']:.5f}"
    )
    return 0


def cmd_evaluate(args: argparse.Namespace) -> int:
    from orchestrator.evaluate import evaluate_run

    try:
        out = evaluate_run(Path(args.run), episodes=args.episodes, seed=args.seed,
                           video_dir=args.video, best=args.best)
    except (FileNotFoundError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(out, indent=2))
    return 0


def cmd_plot(args: argparse.Namespace) -> int:
    from orchestrator.plot import plot_runs

    try:
        paths = plot_runs([Path(r) for r in args.runs], Path(args.out))
    except FileNotFoundError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for p in paths:
        print(p)
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["runtime"]:
        from runtime.cli import main as runtime_main

        return runtime_main(argv[1:])
    if argv[:1] in (["deploy"], ["destroy"], ["up"], ["redis"]):
        from deploy.cli import main as deploy_main

        return deploy_main(argv)
    parser = argparse.ArgumentParser(prog="stellaris", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    _train_parser(sub)
    ev = sub.add_parser("evaluate", help="deterministic episodes of a run's checkpoint")
    ev.add_argument("run")
    ev.add_argument("--episodes", type=int, default=10)
    ev.add_argument("--seed", type=int, default=12345)
    ev.add_argument("--best", action="store_true", help="the best checkpoint instead of the latest")
    ev.add_argument("--video", help="record videos into this folder (needs rendering)")
    pl = sub.add_parser("plot", help="figures of runs side by side")
    pl.add_argument("runs", nargs="+")
    pl.add_argument("--out", default="figures")
    sub.add_parser("runtime", help="the local Lambda runtime: stellaris runtime serve --help")
    sub.add_parser("deploy", help="deploy the functions: stellaris deploy --help")
    sub.add_parser("destroy", help="remove what deploy created")
    sub.add_parser("up", help="the docker-compose topology as local processes")
    sub.add_parser("redis", help="redis-server for the compose topology: stellaris redis serve --help")
    args = parser.parse_args(argv)
    handlers = {"train": cmd_train, "evaluate": cmd_evaluate, "plot": cmd_plot}
    return handlers[args.command](args)


if __name__ == "__main__":
    raise SystemExit(main())
