"""What the async and sync loops share: the run folder, resume, bookkeeping, metrics, cost,
evaluation, checkpoints and the stop rule."""

from __future__ import annotations

import contextlib
import json
import sys
import threading
import time
import uuid
from collections import deque
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import numpy as np
from redis.exceptions import RedisError

from functions.batch import MissingTrajectory
from functions.events import ActorEvent, EvaluatorEvent, LearnerEvent, LearnerWarmup
from functions.hyper import PPOHyper
from functions.ppo import annealed_lr
from orchestrator.checkpoint import Checkpointer
from orchestrator.config import TrainConfig
from orchestrator.cost import CostMeter, PriceTable
from orchestrator.counters import Counters
from orchestrator.footprint import Footprint, misfit_lines
from orchestrator.invokers.base import InvocationResult, Invoker
from orchestrator.master import MasterPolicy
from orchestrator.metrics import MetricsLog, Progress, reached_return
from orchestrator.recovery import StoreRecovery
from store import RunStore

# the error type a learner reports when the store no longer holds its batch
MISSING_TRAJECTORY = MissingTrajectory.__name__


class Trainer(StoreRecovery):
    """Base of :class:`AsyncTrainer` and :class:`SyncTrainer`."""

    filler_envs: int = 0  # streams of a batch the filler actor samples (async: filler_envs)

    def __init__(self, cfg: TrainConfig, invoker: Invoker, run_store: RunStore, run_dir: Path,
                 function_redis_url: str | None) -> None:
        self.cfg = cfg
        self.invoker = invoker
        self.rs = run_store
        self.run_dir = Path(run_dir)
        self.redis_url = function_redis_url
        self.lock = threading.RLock()
        beta1 = cfg.experimental.master_adam_beta1 if cfg.mode == "async" else 0.9
        self.adam_betas = (beta1, 0.999)
        self.master = MasterPolicy(cfg.env, cfg.policy, cfg.seed, cfg.hyper.learning_rate,
                                   adam_beta1=self.adam_betas[0])
        self.counters = Counters()
        self._store_marker = uuid.uuid4().hex  # this orchestrator's, in the run's metadata
        self.recent_returns: deque[float] = deque(maxlen=100)
        self.recent_lengths: deque[int] = deque(maxlen=100)
        self.recent_stats: dict[str, float] = {}
        redis_on_orchestrator = cfg.redis_host == "orchestrator"
        self.cost = CostMeter(PriceTable.from_overrides(cfg.prices),
                              redis_on_orchestrator=redis_on_orchestrator)
        # What the orchestrator and Redis use, against the instances the bill prices them as
        # (inline handlers are threads of this process: its CPU is not the orchestrator's alone)
        self.footprint = Footprint(orchestrator_measured=cfg.backend != "inline",
                                   redis_on_orchestrator=redis_on_orchestrator)
        self.checkpointer = Checkpointer(self.run_dir, cfg.keep_checkpoints)
        self.metrics = MetricsLog(self.run_dir)
        self.progress = Progress(cfg.progress, cfg.total_steps, (cfg.minutes or 0) * 60 or None)
        self.eval_return: float | None = None
        self.target_reached = False  # a logged row reached cfg.stop_at_return
        self._eval_future: Future[InvocationResult] | None = None
        # the learner warm-up in flight (submit_warmup), and how it went
        self._warming: Future[InvocationResult] | None = None
        self.warmup_report: dict[str, Any] | None = None
        self._t_start = time.monotonic()
        self._wall_offset = 0.0  # wall time of earlier sessions of a resumed run
        self._last_log = self._last_ckpt = self._last_eval = 0.0
        self._last_log_steps = 0
        self._sps_window: deque[tuple[float, int]] = deque()
        self._applied_log = open(self.run_dir / "applied_gradients.log", "a")  # noqa: SIM115
        self._seq = 0
        self._hist: dict[str, dict[int, int]] = {"traj": {}, "grad": {}}  # whole-run staleness
        self._stale_sums: dict[str, tuple[float, int]] = {}  # key -> (sum, count), exact
        self._store_down = False
        self._next_guard = 0.0
        self._guard_backoff = 1.0
        self.learning_rate = cfg.hyper.learning_rate  # the rate of the newest learner event

    # -- clock and budget -------------------------------------------------------------------
    def wall(self) -> float:
        return time.monotonic() - self._t_start

    def total_wall(self) -> float:
        return self._wall_offset + self.wall()

    def cost_usd(self, dedicated: bool = False) -> float:
        """The run's bill so far: its functions, and its always-on parts for the whole wall time
        (the orchestrator's CPU above its instance's baseline share billed as burst)."""
        return self.cost.total(self.total_wall(), dedicated, self.footprint.orchestrator_cpu_s(),
                               self.footprint.redis_cpu_s())

    def sample_footprint(self) -> None:
        """The orchestrator's memory and one Redis INFO for the footprint. The INFO goes
        around the store's retries: while Redis is down the loop must not wait on a report
        (store_guard rides the outage out)."""
        self.footprint.sample_orchestrator()
        with contextlib.suppress(RedisError, OSError):
            self.footprint.sample_redis(self.rs.store.redis.info())

    def done(self) -> bool:
        c = self.cfg
        if self.target_reached:
            return True
        if c.total_steps is not None and self.counters.env_steps >= c.total_steps:
            return True
        if c.minutes is not None and self.wall() >= c.minutes * 60:
            return True
        return c.budget_usd is not None and self.cost_usd() >= c.budget_usd

    def budget_used(self) -> float:
        """The fraction of the run's budget spent: the furthest along of its env steps, wall
        clock (this session's, as :meth:`done`) and dollars."""
        c = self.cfg
        used = 0.0
        if c.total_steps is not None:
            used = max(used, self.counters.env_steps / c.total_steps)
        if c.minutes is not None:
            used = max(used, self.wall() / (c.minutes * 60))
        if c.budget_usd is not None:
            used = max(used, self.cost_usd() / c.budget_usd)
        return min(used, 1.0)

    # -- events -----------------------------------------------------------------------------
    def learner_hyper(self, **update: Any) -> PPOHyper:
        """The PPO hyper-parameters of the next learner invocation: the config's, with the
        learning rate annealed to the budget used so far when ``hyper.anneal_lr`` (one rate per
        invocation, as CleanRL's one per update)."""
        hyper = self.cfg.hyper
        if hyper.anneal_lr:
            self.learning_rate = annealed_lr(hyper.learning_rate, self.budget_used())
            update["learning_rate"] = self.learning_rate
        return hyper.model_copy(update=update) if update else hyper

    def next_seed(self) -> int:
        self._seq += 1
        return self.cfg.seed * 100_003 + self._seq

    def actor_event(self, version: int | str = "latest", steps: int | None = None,
                    n_envs: int | None = None) -> dict[str, Any]:
        return ActorEvent(
            run_id=self.rs.run_id, redis_url=self.redis_url, invocation_id=f"a-{uuid.uuid4().hex[:16]}",
            env_id=self.cfg.env, n_envs=n_envs or self.cfg.n_envs, steps=steps or self.cfg.rollout_steps,
            seed=self.next_seed(), policy_version=version, gamma=self.cfg.hyper.gamma,
            refresh_steps=(self.cfg.experimental.actor_refresh_steps
                           if self.cfg.mode == "async" else 0),
            nice=self.cfg.actor_event_nice,
        ).to_event()

    def update_event(self, trajectory_ids: list[str], version: int, hyper: PPOHyper,
                     previews: bool = False) -> dict[str, Any]:
        """A publishing learner's event (sync rounds, async with one learner): update
        ``version`` (the store's latest) with these trajectories, with the master's Adam
        settings, and publish ``version + 1`` with the master's normaliser statistics
        (``previews``: and its weights after each epoch, for actors sampling meanwhile)."""
        with self.lock:
            obs_stats, ret_stats = self.master.obs_rms.to_dict(), self.master.ret_rms.to_dict()
        return LearnerEvent(
            run_id=self.rs.run_id, redis_url=self.redis_url, mode="update",
            invocation_id=f"u-{uuid.uuid4().hex[:16]}", trajectory_ids=trajectory_ids,
            versions_in_flight=[version], hyper=hyper, target_version=version + 1,
            obs_stats=obs_stats, ret_stats=ret_stats, device=self.cfg.device, seed=self.next_seed(),
            master_adam_betas=self.adam_betas, compile=self.cfg.experimental.learner_compile,
            cuda_graph=self.cfg.experimental.learner_cuda_graphs, previews=previews,
        ).to_event()

    def submit_warmup(self, batch_size: int, mode: str,
                      hyper: PPOHyper) -> Future[InvocationResult] | None:
        """Start a learner warm-up (:class:`functions.events.LearnerWarmup`): its compile
        runs while the first rollouts are sampled, and the first update finds its environment
        warm. None when the learners do not compile."""
        if not self.cfg.experimental.learner_compile:
            return None
        event = LearnerWarmup(
            run_id=self.rs.run_id, redis_url=self.redis_url, mode=mode,
            invocation_id=f"w-{uuid.uuid4().hex[:16]}", batch_size=batch_size,
            hyper=hyper, device=self.cfg.device, compile=True, master_adam_betas=self.adam_betas,
        ).to_event()
        return self.invoker.submit("learner", event)

    def on_warmup(self, res: InvocationResult) -> None:
        """A warm-up is billed like any invocation; one that failed costs the first update
        its compile, nothing else (no retry: the update compiles for itself)."""
        self.record_cost(res)
        p = res.payload or {}
        self.warmup_report = {"ok": res.ok, "warmed": bool(p.get("warmed")),
                              "seconds": p.get("seconds"), "duration_ms": res.duration_ms}
        if not res.ok:
            self.record_failure(res)

    def record_cost(self, result: InvocationResult) -> None:
        mem = self.cfg.learner_memory_mb if result.function == "learner" else self.cfg.actor_memory_mb
        # What the learner ran on, as it reports it: with device "auto" a GPU machine's learners
        # run (and are billed) on CUDA; a failed one that reported nothing goes by the config.
        ran_on = str((result.payload or {}).get("device", self.cfg.device))
        gpu = result.function == "learner" and ran_on.startswith("cuda")
        self.cost.invocation(result.function, result.duration_ms, mem, gpu=gpu, cpu_wait_ms=result.cpu_wait_ms)

    def book_preflight(self, attempts: list[InvocationResult]) -> None:
        """The preflight's invocations are the run's: billed, and a crashed one is a failed
        (and retried) actor invocation like any other."""
        for i, res in enumerate(attempts):
            self.record_cost(res)
            if i:
                self.counters.retries["actor"] += 1
            if not res.ok:
                self.record_failure(res)

    def record_failure(self, result: InvocationResult) -> None:
        with self.lock:
            self.counters.failures[result.function] += 1
            self.counters.last_errors.append(f"{result.function}: {result.error}"[:300])

    def record_actor(self, payload: dict[str, Any]) -> None:
        """Steps, episodes and normaliser statistics of a finished actor invocation."""
        with self.lock:
            self.counters.env_steps += int(payload["steps"])
            self.counters.episodes += int(payload.get("episodes", 0))
            self.counters.preview_steps += int(payload.get("preview_steps", 0))
            self.recent_returns.extend(float(r) for r in payload.get("episode_returns", []))
            self.recent_lengths.extend(int(n) for n in payload.get("episode_lengths", []))
            self.master.merge_stats(payload.get("obs_stats"), payload.get("ret_stats"))

    def record_learner_stats(self, payload: dict[str, Any]) -> None:
        with self.lock:
            for k, v in payload.items():
                if k.startswith("losses/") and isinstance(v, int | float):
                    self.recent_stats[k] = float(v)
            self.counters.lookahead_rebases += int(payload.get("lookahead_rebases", 0))
            missing = payload.get("is_versions_missing") or []
            if missing:
                self.counters.is_versions_missing += len(missing)
                msg = (f"IS truncation: versions {missing} held by other learners were not in "
                       "the store (evicted?); those gradients were truncated without them")
                self.counters.last_errors.append(msg)
                print(f"warning: {msg}", flush=True)
            if "losses/is_truncated_frac" in payload and payload.get("gradients", 0):
                self.counters.is_invocations += 1
                self.counters.is_truncated_sum += float(payload["losses/is_truncated_frac"])
                self.counters.is_others_sum += float(payload.get("is_others_mean", 0.0))
                self.counters.is_weight_sum += float(payload.get("losses/is_weight_mean", 1.0))
            if "losses/update_epochs" in payload:
                self.counters.update_invocations += 1
                self.counters.update_epochs_sum += int(payload["losses/update_epochs"])
            self.counters.previews += int(payload.get("previews", 0))
            # asked to compile and could not (no C++ compiler...): worth seeing in the summary
            if self.cfg.experimental.learner_compile and payload.get("compiled") is False:
                self.counters.learners_eager += 1

    # -- evaluation -------------------------------------------------------------------------
    def maybe_evaluate(self, force: bool = False) -> None:
        if self._eval_future is not None and self._eval_future.done():
            res = self._eval_future.result()
            self._eval_future = None
            self.record_cost(res)
            if res.ok and res.payload:
                self.eval_return = float(res.payload["mean_return"])
                self.metrics.scalar("charts/eval_return", self.eval_return, self.counters.env_steps)
            else:
                self.record_failure(res)
        interval = self.cfg.eval_interval_s
        if self._eval_future is None and interval > 0 and (force or self.wall() - self._last_eval >= interval):
            self._last_eval = self.wall()
            event = EvaluatorEvent(
                run_id=self.rs.run_id, redis_url=self.redis_url, policy_version="latest",
                episodes=self.cfg.eval_episodes, seed=self.cfg.seed + 7919,
                invocation_id=f"e-{uuid.uuid4().hex[:16]}",
            ).to_event()
            self._eval_future = self.invoker.submit("evaluator", event)

    def finish_evaluation(self, timeout: float) -> None:
        if self._eval_future is not None:
            try:
                self._eval_future.result(timeout=timeout)
            except Exception:  # noqa: BLE001 - a late evaluation is not worth failing a run
                return
            self.maybe_evaluate()

    # -- metrics and checkpoints ------------------------------------------------------------
    def mean_return(self) -> float | None:
        with self.lock:
            return float(np.mean(self.recent_returns)) if self.recent_returns else None

    def log_row(self, extra: dict[str, Any]) -> dict[str, Any]:
        now = self.wall()
        with self.lock:
            c = self.counters
            # Steps arrive in chunks of one actor invocation: average over a 10 s window.
            self._sps_window.append((now, c.env_steps))
            while len(self._sps_window) > 2 and now - self._sps_window[1][0] >= 10.0:
                self._sps_window.popleft()
            (t0, s0) = self._sps_window[0]
            sps = (c.env_steps - s0) / (now - t0) if now > t0 else None
            self._last_log, self._last_log_steps = now, c.env_steps
            ts, gs = c.traj_staleness, c.grad_staleness
            row = {
                "wall_s": self.total_wall(), "env_steps": c.env_steps, "version": self.master.version,
                "sps": sps, "episodic_return": self.mean_return(),
                "episodic_length": float(np.mean(self.recent_lengths)) if self.recent_lengths else None,
                "episodes": c.episodes, "eval_return": self.eval_return,
                "cost_usd": self.cost_usd(), "cost_usd_dedicated_vcpu": self.cost_usd(dedicated=True),
                "orchestrator_cpu_s": self.footprint.orchestrator_cpu_s(),
                "redis_cpu_s": self.footprint.redis_cpu_s(),
                "version_diff_traj_mean": float(np.mean(ts)) if ts else None,
                "version_diff_traj_max": max(ts) if ts else None,
                "version_diff_grad_mean": float(np.mean(gs)) if gs else None,
                "version_diff_grad_max": max(gs) if gs else None,
                "failures_actor": c.failures["actor"], "failures_learner": c.failures["learner"],
                "failures_evaluator": c.failures["evaluator"], "grads_applied": c.grads_applied,
                "charts/learning_rate": self.learning_rate,
                **self.recent_stats, **extra,
            }
            self.metrics.histogram("staleness/version_diff_traj", [float(x) for x in ts], c.env_steps)
            self.metrics.histogram("staleness/version_diff_grad", [float(x) for x in gs], c.env_steps)
            self.staleness_totals(ts, gs)
            ts.clear()
            gs.clear()
        self.sample_footprint()
        self.metrics.row(row)
        self.progress.update(row)
        self.target_reached = self.target_reached or reached_return(row, self.cfg.stop_at_return)
        return row

    def staleness_totals(self, ts: list[float], gs: list[int]) -> None:
        """Keep whole-run staleness histograms (whole versions, for the final report and
        benchmarks) and exact sums (a refreshed rollout is a fraction of a version old)."""
        hist = self._hist
        for key, vals in (("traj", ts), ("grad", gs)):
            for v in vals:
                hist[key][int(v)] = hist[key].get(int(v), 0) + 1
            total, n = self._stale_sums.get(key, (0.0, 0))
            self._stale_sums[key] = (total + float(sum(vals)), n + len(vals))

    def checkpoint(self, tensors: dict[str, np.ndarray] | None = None) -> None:
        with self.lock:
            version = self.master.version
            tensors = tensors if tensors is not None else self.master.state_tensors()
            meta = {
                "env_id": self.cfg.env, "mode": self.cfg.mode, "config_hash": self.cfg.digest(),
                "env_steps": self.counters.env_steps, "episodes": self.counters.episodes,
                "wall_s": self.total_wall(), "cost_usd": self.cost_usd(),
                "orchestrator_cpu_s": self.footprint.orchestrator_cpu_s(),
                "redis_cpu_s": self.footprint.redis_cpu_s(),
                "obs_rms": self.master.obs_rms.to_dict(), "ret_rms": self.master.ret_rms.to_dict(),
                "policy_meta": self.master.meta, "run_id": self.rs.run_id,
                "cost_functions": self.cost.components,
            }
        score = self.eval_return if self.eval_return is not None else self.mean_return()
        self.checkpointer.save(version, tensors, meta, score=score)
        self._last_ckpt = self.wall()

    def periodic(self, extra: dict[str, Any]) -> None:
        now = self.wall()
        if now - self._last_log >= self.cfg.log_interval_s or not self._last_log:
            self.log_row(extra)
        if now - self._last_ckpt >= self.cfg.checkpoint_interval_s:
            self.checkpoint()
        self.maybe_evaluate()

    def log_applied(self, dedupe_ids: list[str], version: int) -> None:
        # Flushed by flush_applied_log() before the gradients are acknowledged: one write
        # syscall per batch of gradients read, not one per Adam step.
        for d in dedupe_ids:
            self._applied_log.write(f"{version} {d}\n")

    def flush_applied_log(self) -> None:
        self._applied_log.flush()

    def summary(self) -> dict[str, Any]:
        wall = self.total_wall()
        c = self.counters
        hist = self._hist
        self.sample_footprint()
        return {
            "run_id": self.rs.run_id, "mode": self.cfg.mode, "backend": self.cfg.backend,
            "learners_publish": self.learners_publish, "path": self.cfg.training_path,
            "learners": self.cfg.learners, "actors": self.cfg.actors,
            "env": self.cfg.env, "env_steps": c.env_steps, "episodes": c.episodes,
            "version": self.master.version, "wall_s": wall,
            "sps": c.env_steps / max(1e-9, self.wall()), "mean_return": self.mean_return(),
            "eval_return": self.eval_return, "target_reached": self.target_reached,
            "failures": c.failures, "retries": c.retries,
            "learner_gave_up": c.learner_gave_up, "learner_batches_lost": c.learner_batches_lost,
            "grads_applied": c.grads_applied,
            "lookahead_rebases": c.lookahead_rebases,
            "previews": c.previews, "preview_steps": c.preview_steps,
            "filler_rollouts": c.filler_rollouts, "filler_resizes": c.filler_resizes,
            "filler_envs": self.filler_envs,
            "learners_eager": c.learners_eager,
            "learner_warmup": self.warmup_report,
            "redis_recoveries": c.redis_recoveries, "store_errors": c.store_errors,
            "is_versions_missing": c.is_versions_missing,
            "is_truncated_frac_mean": (c.is_truncated_sum / c.is_invocations
                                       if c.is_invocations else None),
            "is_others_mean": c.is_others_sum / c.is_invocations if c.is_invocations else None,
            "is_weight_mean": c.is_weight_sum / c.is_invocations if c.is_invocations else None,
            "update_epochs_mean": (c.update_epochs_sum / c.update_invocations
                                   if c.update_invocations else None),
            "staleness_hist": {k: {str(s): n for s, n in sorted(v.items())} for k, v in hist.items()},
            "staleness_mean": {k: total / n for k, (total, n) in self._stale_sums.items() if n},
            "cost": self.cost.report(wall, self.footprint.orchestrator_cpu_s(),
                                     self.footprint.redis_cpu_s()),
            "footprint": self.footprint.report(self.wall()),
            "backend_billing": self.invoker.billing(),
            "last_errors": list(c.last_errors),
        }

    def close(self, summary: dict[str, Any]) -> None:
        (self.run_dir / "summary.json").write_text(json.dumps(summary, indent=2, default=str))
        for line in misfit_lines(summary.get("footprint") or {}):
            print(line, file=sys.stderr, flush=True)
        self.metrics.close()
        self.progress.close()
        self._applied_log.close()
