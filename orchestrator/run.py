"""Assemble a training run from a config: validate, open the store, build the invoker, train."""

from __future__ import annotations

import json
import re
import sys
import time
from pathlib import Path
from typing import Any

from functions.envs import UnknownEnv, UnsupportedSpace, custom_env_source, space_info
from orchestrator.config import ConfigError, TrainConfig
from orchestrator.invokers.base import InvocationResult, Invoker
from orchestrator.run_folder import RunDirError, RunFolder, S3Location, is_s3, open_folder
from store import CorruptBlob, RunStore, Store, StoreUnavailable, decode, validate_run_id


class PreflightError(RuntimeError):
    """A problem found before anything is spent: bad env, unreachable Redis or endpoint."""


def default_run_id(cfg: TrainConfig) -> str:
    env = re.sub(r"[^A-Za-z0-9._-]", "-", cfg.env)
    return f"{env}-{cfg.mode}-{time.strftime('%Y%m%d-%H%M%S')}-s{cfg.seed}"


def resolve_run(cfg: TrainConfig) -> tuple[str, RunFolder]:
    """The run's id and its folder (local, or ``s3://bucket/prefix`` staged locally), not
    yet opened; a malformed ``s3://`` URL is a :class:`RunDirError`."""
    run_id = cfg.run_id
    if run_id is None and cfg.run_dir:
        name = (S3Location.parse(cfg.run_dir).name if is_s3(cfg.run_dir)
                else Path(cfg.run_dir).resolve().name)
        run_id = re.sub(r"[^A-Za-z0-9._-]", "-", name) or None
    run_id = validate_run_id(run_id or default_run_id(cfg))
    return run_id, open_folder(cfg.run_dir or Path("runs") / run_id)


def preflight_env(cfg: TrainConfig) -> None:
    try:
        space_info(cfg.env)
    except (UnknownEnv, UnsupportedSpace) as exc:
        raise PreflightError(str(exc)) from None


def preflight_init(cfg: TrainConfig) -> None:
    """A warm start's file is checked before anything is spent: a checkpoint, of this env, with
    this policy's parameter shapes."""
    if cfg.init_from is None:
        return
    from functions.policy import init_policy, load_policy_tensors

    try:
        tensors, meta = decode(Path(cfg.init_from).read_bytes())
        source_env = meta.get("env_id")
        if source_env not in (None, cfg.env):
            raise ValueError(f"it is a checkpoint of {source_env}, not {cfg.env}")
        model, _ = init_policy(cfg.env, cfg.policy, cfg.seed)
        load_policy_tensors(model, tensors)
    except (CorruptBlob, ValueError, OSError) as exc:
        raise PreflightError(f"init_from {cfg.init_from}: {exc}") from None


def open_store(cfg: TrainConfig) -> Store:
    try:
        store = Store(cfg.redis_url, retry_seconds=3.0)
        store.ping()
    except StoreUnavailable as exc:
        raise PreflightError(str(exc)) from None
    except (ValueError, FileNotFoundError) as exc:
        raise PreflightError(str(exc)) from None
    store.retry_seconds = 5.0  # during the run, ride out short outages; longer ones -> guard
    return store


def build_invoker(cfg: TrainConfig, function_redis_url: str, run_dir: Path) -> Invoker:
    in_flight = (cfg.max_actors if cfg.autoscale else cfg.actors) + cfg.learners + 1
    # A custom env's package (package.module:EnvId) goes with the functions: on the local
    # runtime on their PYTHONPATH, on Ray as a py_module; a Lambda image or zip must hold it.
    env_source = custom_env_source(cfg.env)
    if cfg.backend == "inline":
        from orchestrator.invokers.inline import InlineInvoker

        return InlineInvoker(max_workers=in_flight, timeout_s=cfg.function_timeout_s,
                             fault_prob=cfg.experimental.fault_kill_prob)
    if cfg.backend == "local":
        from orchestrator.invokers.local import LocalRuntimeInvoker

        return LocalRuntimeInvoker(
            cfg.function_prefix, cfg.actor_memory_mb, cfg.learner_memory_mb, cfg.function_timeout_s,
            in_flight, environment={"REDIS_URL": function_redis_url, **(
                {"PYTHONPATH": str(Path(env_source).parent)} if env_source else {})},
            zygote=cfg.experimental.runtime_zygote,
            log_file=str(run_dir / "runtime.log"), fault_prob=cfg.experimental.fault_kill_prob,
            invoke_latency_ms=cfg.experimental.runtime_invoke_latency_ms,
            invoke_latency_sigma=cfg.experimental.runtime_invoke_latency_sigma,
        )
    if cfg.backend == "lambda":
        from deploy.functions import HANDLERS
        from orchestrator.invokers.lambda_ import LambdaInvoker

        names = {fn: f"{cfg.function_prefix}-{fn}" for fn in HANDLERS}
        return LambdaInvoker(names, cfg.endpoint_url, cfg.region, in_flight, cfg.function_timeout_s)
    if cfg.backend == "ray":
        from orchestrator.invokers.ray_ import RayInvoker

        return RayInvoker(cfg.ray_address, in_flight, learner_gpus=cfg.learner_gpus,
                          extra_modules=(env_source,) if env_source else ())
    raise ConfigError(f"unknown backend {cfg.backend!r}")


def train(cfg: TrainConfig) -> dict[str, Any]:
    """Run one training job end to end; returns the summary (also saved in the run folder)."""
    preflight_env(cfg)
    preflight_init(cfg)
    if (idle := cfg.idle_actors_warning()) is not None:
        print(f"warning: {idle}", file=sys.stderr)
    try:
        run_id, folder = resolve_run(cfg)
    except RunDirError as exc:
        raise PreflightError(str(exc)) from None
    store = open_store(cfg)
    try:
        folder.open()  # an S3 run folder: checked, and its checkpoint fetched to resume from
    except RunDirError as exc:
        store.close()
        raise PreflightError(str(exc)) from None
    failed = True
    try:
        summary = _train_in(cfg, run_id, folder, store)
        failed = False
    finally:
        try:
            folder.close()  # an S3 run folder: the last upload
        except RunDirError as exc:
            if not failed:
                raise
            print(f"warning: {exc}", file=sys.stderr)  # the run's own error comes first
    return summary


# What a run writes in its folder; ``--restart`` sets the previous run's aside.
RUN_FILES = ("config.json", "summary.json", "metrics.csv", "applied_gradients.log",
             "runtime.log", "checkpoints", "tb", "figures")


def set_aside_previous(run_dir: Path) -> Path | None:
    """``--restart``: move the previous run's files into ``previous-<UTC time>/`` (nothing is
    lost), so the new run's metrics, checkpoints and summary hold only its own rows — appended
    to the old ones, a curve read at N env steps found the old run's row first."""
    present = [run_dir / name for name in RUN_FILES if (run_dir / name).exists()]
    if not present:
        return None
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    dest, n = run_dir / f"previous-{stamp}", 1
    while dest.exists():
        n += 1
        dest = run_dir / f"previous-{stamp}-{n}"
    dest.mkdir()
    for path in present:
        path.rename(dest / path.name)
    return dest


def import_trainer(mode: str) -> Any:
    """The training loop's class, with torch and the compiler stack its optimiser pulls in on
    first use (~2 s) imported now rather than after the functions are up."""
    import torch._dynamo  # noqa: F401

    if mode == "async":
        from orchestrator.async_loop import AsyncTrainer

        return AsyncTrainer
    from orchestrator.sync_loop import SyncTrainer

    return SyncTrainer


def _train_in(cfg: TrainConfig, run_id: str, folder: RunFolder, store: Store) -> dict[str, Any]:
    run_dir = folder.path
    if cfg.restart and (aside := set_aside_previous(run_dir)) is not None:
        print(f"--restart: the previous run's files are in {aside}", file=sys.stderr)
    (run_dir / "config.json").write_text(json.dumps(
        {**cfg.public_dict(), "run_id": run_id, "run_dir": folder.url}, indent=2))
    rs = RunStore(store, run_id, keep_versions=cfg.experimental.keep_versions)
    function_url = cfg.function_redis_url or store.url
    from orchestrator import preflight

    preflight.check_static(cfg, function_url)  # nothing invoked yet
    invoker = build_invoker(cfg, function_url, run_dir)
    try:
        try:
            invoker.launch()
            trainer_class = import_trainer(cfg.mode)  # seconds of imports, while the backend boots
            invoker.start()
        except Exception as exc:
            raise PreflightError(f"{cfg.backend} backend unusable: {exc}") from exc
        attempts: list[InvocationResult] = []
        preflight.check_functions(cfg, invoker, run_id, function_url, attempts)  # before any rollout
        trainer = trainer_class(cfg, invoker, rs, run_dir, function_url)
        trainer.book_preflight(attempts)
        trainer.checkpointer.on_save = folder.push
        summary = trainer.run()
    finally:
        invoker.close()
    try:
        from orchestrator.plot import plot_runs

        plot_runs([run_dir], run_dir / "figures")
    except Exception as exc:  # noqa: BLE001 - figures are a convenience, never fail a run
        print(f"warning: could not draw figures: {exc}")
    store.close()
    return summary
