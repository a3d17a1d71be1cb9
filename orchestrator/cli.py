"""The ``stellaris`` command line.

    stellaris train --env Hopper-v5 --mode async --backend local --minutes 3
    stellaris evaluate runs/<run_id> [--episodes 10] [--video DIR]   (or s3://bucket/prefix)
    stellaris plot runs/a s3://bucket/runs/b [--out DIR]
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


def _nest(dotted: dict[str, Any]) -> dict[str, Any]:
    """``{"aggregation.v0": 2}`` -> ``{"aggregation": {"v0": 2}}``."""
    out: dict[str, Any] = {}
    for key, value in dotted.items():
        node = out
        parts = key.split(".")
        for p in parts[:-1]:
            node = node.setdefault(p, {})
        node[parts[-1]] = value
    return out


def parse_set(items: list[str]) -> dict[str, Any]:
    """``--set hyper.learning_rate=1e-3`` -> nested overrides (values parsed as JSON if they can)."""
    flat: dict[str, Any] = {}
    for item in items:
        if "=" not in item:
            raise SystemExit(f"error: --set expects KEY=VALUE, got {item!r}")
        key, raw = item.split("=", 1)
        try:
            flat[key] = json.loads(raw)
        except ValueError:
            flat[key] = raw
    return _nest(flat)


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in over.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def _description(path: str) -> str:
    """The one-line description of a config field (``aggregation.v0``), as flag help."""
    from pydantic import BaseModel

    from orchestrator.config import TrainConfig

    model: type[BaseModel] = TrainConfig
    *sections, name = path.split(".")
    for section in sections:
        model = model.model_fields[section].annotation  # type: ignore[assignment]
    text = model.model_fields[name].description or ""
    return text.rstrip(".").replace("%", "%%")


# Flags of the common user fields by group: (flag, config field, argparse options). The help is
# the field's own description; every other field is reached with --set or a TOML file.
_FIELD_FLAGS: dict[str, list[tuple[str, str, dict[str, Any]]]] = {
    "the run": [
        ("--env", "env", {}),
        ("--mode", "mode", {"choices": ["async", "sync"]}),
        ("--backend", "backend", {"choices": ["inline", "local", "lambda", "ray"]}),
        ("--actors", "actors", {"type": int, "metavar": "N"}),
        ("--learners", "learners", {"type": int, "metavar": "N"}),
        ("--stop-at-return", "stop_at_return", {"type": float, "metavar": "RETURN"}),
        ("--budget-usd", "budget_usd", {"type": float, "metavar": "USD"}),
        ("--seed", "seed", {"type": int}),
        ("--run-dir", "run_dir", {"metavar": "DIR"}),
        ("--run-id", "run_id", {"metavar": "ID"}),
        ("--init-from", "init_from", {"metavar": "CHECKPOINT"}),
    ],
    "rollouts and PPO": [
        ("--n-envs", "n_envs", {"type": int, "metavar": "N"}),
        ("--rollout-steps", "rollout_steps", {"type": int, "metavar": "N"}),
        ("--learner-batch-steps", "learner_batch_steps", {"type": int, "metavar": "N"}),
        ("--max-actors", "max_actors", {"type": int, "metavar": "N"}),
    ],
    "functions and their store": [
        ("--device", "device", {"choices": ["auto", "cpu", "cuda"]}),
        ("--actor-memory-mb", "actor_memory_mb", {"type": int, "metavar": "MB"}),
        ("--learner-memory-mb", "learner_memory_mb", {"type": int, "metavar": "MB"}),
        ("--function-timeout-s", "function_timeout_s", {"type": int, "metavar": "S"}),
        ("--max-retries", "max_retries", {"type": int, "metavar": "N"}),
        ("--redis-url", "redis_url", {"metavar": "URL"}),
        ("--function-redis-url", "function_redis_url", {"metavar": "URL"}),
        ("--redis-host", "redis_host", {"choices": ["orchestrator", "elasticache"]}),
        ("--endpoint-url", "endpoint_url", {"metavar": "URL"}),
        ("--region", "region", {}),
        ("--function-prefix", "function_prefix", {"metavar": "PREFIX"}),
        ("--ray-address", "ray_address", {"metavar": "ADDRESS"}),
    ],
    "observability and checkpoints": [
        ("--progress", "progress", {"choices": ["auto", "rich", "plain", "none"]}),
        ("--eval-interval-s", "eval_interval_s", {"type": float, "metavar": "S"}),
        ("--eval-episodes", "eval_episodes", {"type": int, "metavar": "N"}),
        ("--checkpoint-interval-s", "checkpoint_interval_s", {"type": float, "metavar": "S"}),
        ("--keep-checkpoints", "keep_checkpoints", {"type": int, "metavar": "N"}),
        ("--log-interval-s", "log_interval_s", {"type": float, "metavar": "S"}),
    ],
    "the paper's aggregation (several learners)": [
        ("--buffer-max", "aggregation.buffer_max", {"type": int, "metavar": "H_MAX"}),
    ],
}


def _train_parser(sub: Any) -> None:
    p = sub.add_parser("train", help="train a policy (async Stellaris or the sync baseline)",
                       epilog="Every field, its default and the presets: docs/configuration.md.")
    p.add_argument("--config", metavar="TOML", help="TOML file with any config fields "
                   "(sections as tables: [aggregation], [experimental], [hyper], [policy])")
    p.add_argument("--preset", choices=["paper"],
                   help="A named shape under your flags: paper = 16 actors x 1 env x 256 steps, "
                   "4 learners, staleness-aware aggregation (the SC'24 demo)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="Any config field, e.g. --set hyper.learning_rate=1e-3 or --set "
                   "experimental.learner_compile=false (repeatable; flags win)")
    groups = {title: p.add_argument_group(title) for title in _FIELD_FLAGS}
    run = groups["the run"]
    budget = run.add_mutually_exclusive_group()
    budget.add_argument("--total-steps", type=int, metavar="N", help=_description("total_steps"))
    budget.add_argument("--minutes", type=float, help=_description("minutes"))
    run.add_argument("--restart", action="store_true", default=None, help=_description("restart"))
    for title, flags in _FIELD_FLAGS.items():
        for flag, path, options in flags:
            groups[title].add_argument(flag, dest=path, help=_description(path), **options)
    groups["functions and their store"].add_argument(
        "--no-preflight", dest="preflight", action="store_false", default=None,
        help="Skip the preflight: the one actor invocation that checks, before the run, that "
        "the functions reach the store")
    groups["rollouts and PPO"].add_argument(
        "--autoscale", action="store_true", default=None, help=_description("autoscale"))
    groups["rollouts and PPO"].add_argument(
        "--is-correction", dest="hyper.is_correction",
        choices=["none", "truncate", "vtrace", "decoupled"],
        help="Off-policy correction of stale data, hyper.is_correction (default decoupled: "
        "docs/decisions.md#is-correction-decoupled)")
    paper = groups["the paper's aggregation (several learners)"]
    paper.add_argument("--no-staleness-weights", dest="aggregation.staleness_weights",
                       action="store_false", default=None,
                       help="Aggregate every gradient with weight 1 (ablation of the paper's "
                       "1/sqrt(staleness))")
    paper.add_argument("--no-bound-decay", dest="aggregation.bound_decay", action="store_false",
                       default=None, help="Keep the staleness bound at delta_max (ablation)")


def train_overrides(args: argparse.Namespace) -> dict[str, Any]:
    """The flags and ``--set`` items of ``stellaris train`` as nested overrides; a flag wins
    over ``--set`` (whose old flat keys are moved to their sections first)."""
    from orchestrator.config import move_old_keys

    given = {k: v for k, v in vars(args).items()
             if k not in ("command", "config", "set", "func") and v is not None}
    if args.minutes is not None:
        given["total_steps"] = None
    if args.total_steps is not None:
        given["minutes"] = None
    return _merge(move_old_keys(parse_set(args.set), "--set"), _nest(given))


def cmd_train(args: argparse.Namespace) -> int:
    from orchestrator.config import ConfigError, load_config
    from orchestrator.run import PreflightError, train

    try:
        cfg = load_config(args.config, train_overrides(args))
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
        out = evaluate_run(args.run, episodes=args.episodes, seed=args.seed,
                           video_dir=args.video, best=args.best)
    except (FileNotFoundError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(out, indent=2))
    return 0


def cmd_plot(args: argparse.Namespace) -> int:
    from orchestrator.plot import plot_runs

    try:
        paths = plot_runs(args.runs, Path(args.out))
    except (FileNotFoundError, ValueError) as exc:  # RunDirError: a bad or unreachable s3:// run
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for p in paths:
        print(p)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="stellaris", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    _train_parser(sub)
    ev = sub.add_parser("evaluate", help="deterministic episodes of a run's checkpoint")
    ev.add_argument("run", help="the run folder (runs/<run_id>), or s3://bucket/prefix of one "
                                "trained with --run-dir s3://... (copied, then deleted)")
    ev.add_argument("--episodes", type=int, default=10, help="episodes to run (default 10)")
    ev.add_argument("--seed", type=int, default=12345, help="seed of the first episode's env")
    ev.add_argument("--best", action="store_true", help="the best checkpoint instead of the latest")
    ev.add_argument("--video", help="record videos into this folder (needs rendering)")
    pl = sub.add_parser("plot", help="figures of runs side by side")
    pl.add_argument("runs", nargs="+", help="run folders to draw together (paths or "
                                            "s3://bucket/prefix)")
    pl.add_argument("--out", default="figures", help="folder for the figures (default figures)")
    sub.add_parser("runtime", help="the local Lambda runtime: stellaris runtime serve --help")
    sub.add_parser("deploy", help="deploy the functions: stellaris deploy --help")
    sub.add_parser("destroy", help="remove what deploy created")
    sub.add_parser("up", help="the docker-compose topology as local processes")
    sub.add_parser("redis", help="redis-server for the compose topology: stellaris redis serve --help")
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["runtime"]:
        from runtime.cli import main as runtime_main

        return runtime_main(argv[1:])
    if argv[:1] in (["deploy"], ["destroy"], ["up"], ["redis"]):
        from deploy.cli import main as deploy_main

        return deploy_main(argv)
    args = build_parser().parse_args(argv)
    handlers = {"train": cmd_train, "evaluate": cmd_evaluate, "plot": cmd_plot}
    return handlers[args.command](args)


if __name__ == "__main__":
    raise SystemExit(main())
