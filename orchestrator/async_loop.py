"""The Stellaris loop: actors and learners run asynchronously; the aggregator applies
staleness-weighted gradients and publishes a new version per aggregation.

Two threads: the dispatcher (this loop: keeps N actors and up to M learners in flight, books
results, resubmits failures) and the aggregator (blocks on the gradient stream, applies the
buffer rule, one Adam step per aggregation). Neither busy-waits: one blocks on futures, the
other on ``XREADGROUP ... BLOCK``.

With ``learner_publishes`` (one learner in flight) there is nothing to aggregate: the learner
runs its update in ``update`` mode and publishes the next version itself, the dispatcher
adopts it as the master, and no aggregator thread runs. Actors still sample while the
learner learns, so the data lags one update as before.
"""

from __future__ import annotations

import math
import queue
import time
import uuid
from collections import deque
from concurrent.futures import Future, wait
from dataclasses import dataclass
from typing import Any

from functions.events import LearnerEvent
from orchestrator.aggregator import StalenessAggregator
from orchestrator.aggregator_thread import GROUP, AggregatorThread
from orchestrator.invokers.base import InvocationResult
from orchestrator.pacer import Rollout, RolloutPacer, best_filler, filler_cycle_s, next_rollout
from orchestrator.scaler import ActorScaler
from orchestrator.trainer import MISSING_TRAJECTORY, Trainer
from store import StoreError


@dataclass
class _Traj:
    traj_id: str
    steps: int
    behaviour_version: float  # the mean of its steps' versions


@dataclass
class _Actor:
    submitted: float
    rollout: Rollout
    attempts: int = 1


@dataclass
class _Learner:
    event: dict[str, Any]
    trajs: list[_Traj]
    attempts: int = 1


class AsyncTrainer(Trainer):
    def run(self) -> dict[str, Any]:
        cfg = self.cfg
        self.resume_or_init()
        self.rs.grads.ensure_group(GROUP, start_id="$")
        self.aggregator = StalenessAggregator(cfg.aggregation, cfg.learners)
        self.scaler = ActorScaler(cfg)
        self.pacer = RolloutPacer(cfg.experimental.actor_start == "just_in_time")
        # re-chosen between batches with "auto"
        self.filler_envs = cfg.experimental.fixed_filler_envs
        self.applier = AggregatorThread(self, self.aggregator)
        if not cfg.publishing_learner:
            self.applier.start()

        actors: dict[Future[InvocationResult], _Actor] = {}
        learners: dict[Future[InvocationResult], _Learner] = {}
        pending: deque[_Traj] = deque()
        # Invocations put themselves here when they finish: the loop takes the finished ones
        # in O(1), where wait() walked every future in flight at each completion, O(actors)
        # of the dispatcher's CPU per rollout (docs/scale.md).
        self._finished: queue.SimpleQueue[Future[InvocationResult]] = queue.SimpleQueue()
        # Compiling starts now, beside the first rollouts; no update starts before it is done,
        # so the first one runs in the environment it warmed.
        self._warming = self.submit_warmup(
            math.ceil(cfg.learner_job_steps / cfg.rollout_env_steps) * cfg.rollout_env_steps,
            "update" if cfg.publishing_learner else "gradient", self.learner_hyper())
        if self._warming is not None:
            self._warming.add_done_callback(self._finished.put)
        try:
            while not self.done():
                if self.applier.error is not None:
                    raise RuntimeError(f"aggregator failed: {self.applier.error}") \
                        from self.applier.error
                store_ok = self.store_guard()
                # Learners first: taking a batch frees room for the next rollouts, which
                # then start at once and sample while this batch is learned.
                if store_ok:
                    self._dispatch_learners(learners, pending)
                backlog = sum(t.steps for t in pending)
                want = self.scaler.target(len(actors), backlog, len(learners))
                # Backpressure: sample only what the learners will consume next — one batch
                # per learner waiting or being sampled. Rolling out further ahead only makes
                # the data staler (and steals CPU from learning); nothing while the store is
                # down (invocations would only fail).
                # Just in time (``actor_start``): hold a rollout until it would finish about
                # when a learner needs it, which keeps the data fresher (orchestrator/pacer.py).
                # With a filler (``filler_envs``) the lead samples all the time and the filler
                # only while the learner's core is free (orchestrator/pacer.py).
                hold = 0.0
                if cfg.filler_auto and not actors and backlog == 0:
                    self._resize_filler()  # between batches: no rollout of the old sizes left
                while store_ok and len(actors) < want:
                    rollout = next_rollout(
                        cfg.n_envs, self.filler_envs, cfg.rollout_steps, cfg.steps_ahead, backlog,
                        (a.rollout for a in actors.values()),
                        learner_busy=bool(learners) or self._warming is not None)
                    if rollout is None:
                        break
                    if not rollout.filler:
                        hold = self.pacer.hold_s(time.monotonic())
                        if hold > 0:
                            break
                    self._submit_actor(actors, rollout)
                if not actors and not learners and self._warming is None:
                    time.sleep(0.5)  # store down, nothing in flight: wait for the next check
                    self.periodic(self._extra(0, 0))
                    continue
                timeout = min(0.5, hold) if hold > 0 else 0.5
                for fut in self._take_finished(timeout):
                    if fut is self._warming:
                        self.on_warmup(fut.result())
                        self._warming = None
                    elif fut in actors:
                        self._on_actor(fut.result(), actors.pop(fut), actors, pending)
                    elif fut in learners:
                        job = learners.pop(fut)
                        res = fut.result()
                        self.pacer.learner_done(fut, time.monotonic(), ok=res.ok,
                                                cold=res.cold_start)
                        self._on_learner(res, job, learners)
                self.periodic(self._extra(len(actors), len(learners)))
        finally:
            self._shutdown(actors, learners)
        self.applier.publish_if_moved(force=True)
        self.checkpoint()
        self.finish_evaluation(timeout=30)
        row = self.log_row(self._extra(0, 0))
        summary = self.summary()
        agg = self.aggregator
        beta = agg.beta()
        summary.update(aggregations=agg.aggregations, beta=None if math.isinf(beta) else beta,
                       delta_max=agg.delta_max, rounds=agg.rounds,
                       learner_steps_consumed=agg.steps_consumed,
                       bound_trajectory=[list(x) for x in agg.bound_trajectory],
                       grads_dropped=agg.dropped, grads_duplicate=agg.duplicates, final_row=row)
        self.close(summary)
        return summary

    # -- dispatcher ---------------------------------------------------------------------------
    def _take_finished(self, timeout: float) -> list[Future[InvocationResult]]:
        """The invocations finished by now: waits up to ``timeout`` for the first, then takes
        whatever else has finished meanwhile (none: the timeout passed)."""
        try:
            done = [self._finished.get(timeout=timeout)]
        except queue.Empty:
            return []
        while True:
            try:
                done.append(self._finished.get_nowait())
            except queue.Empty:
                return done

    def _submit_actor(self, actors: dict[Future[InvocationResult], _Actor], rollout: Rollout,
                      attempts: int = 1) -> None:
        fut = self.invoker.submit("actor", self.actor_event(n_envs=rollout.envs))
        actors[fut] = _Actor(time.monotonic(), rollout, attempts)
        fut.add_done_callback(self._finished.put)
        if rollout.filler:
            self.counters.filler_rollouts += 1

    def _submit_learner(self, learners: dict[Future[InvocationResult], _Learner],
                        job: _Learner) -> None:
        fut = self.invoker.submit("learner", job.event)
        learners[fut] = job
        self.pacer.learner_started(fut, time.monotonic())
        fut.add_done_callback(self._finished.put)

    def _on_actor(self, res: InvocationResult, job: _Actor,
                  actors: dict[Future[InvocationResult], _Actor], pending: deque[_Traj]) -> None:
        self.record_cost(res)
        if not res.ok or not res.payload:
            self.record_failure(res)
            if job.attempts < self.cfg.max_retries and not self.done():
                self.counters.retries["actor"] += 1
                self._submit_actor(actors, job.rollout, job.attempts + 1)
            return
        if not job.rollout.filler:  # the just-in-time lead is the lead's own duration
            self.pacer.rollout_done(time.monotonic() - job.submitted, cold=res.cold_start,
                                    envs=job.rollout.envs)
        p = res.payload
        self.record_actor(p)
        # A rollout that picked up newer versions (actor_refresh_steps) is as old as its
        # steps are on average.
        first = int(p["behaviour_version"])
        mean = float(p.get("behaviour_version_mean", first))
        pending.append(_Traj(p["trajectory_id"], int(p["steps"]), mean))

    def _resize_filler(self, min_gain: float = 0.05) -> None:
        """``filler_envs = "auto"``: the filler whose batches take least time by the measured
        seconds per env stream of a lead rollout and per update (:func:`best_filler`), taken
        only when it saves ``min_gain`` of a batch's time: each new size is a new env shape,
        whose streams start from a reset.

        Sized once, on the one actor's timings: a smaller lead shares its vector env's
        per-step overhead among fewer streams, so its seconds per stream rise and the linear
        model then asks for a bigger filler that is measured slower (Hopper, 2 cores: 3
        streams 7,475 env steps/s against 2's 8,323; an earlier auto that re-sized went to 3 in
        four of twelve seeds: docs/decisions.md#filler-envs-auto)."""
        env_s, learn_s = self.pacer.env_s, self.pacer.learn_s
        if env_s is None or learn_s is None or self.counters.filler_resizes:
            return
        n = self.cfg.n_envs
        best = best_filler(n, env_s, learn_s)
        now_s = filler_cycle_s(n, self.filler_envs, env_s, learn_s)
        if filler_cycle_s(n, best, env_s, learn_s) < (1 - min_gain) * now_s:
            self.filler_envs = best
            self.counters.filler_resizes += 1

    def _dispatch_learners(self, learners: dict[Future[InvocationResult], _Learner],
                           pending: deque[_Traj]) -> None:
        cfg = self.cfg
        busy = len(learners) + (self._warming is not None)
        while busy < cfg.learners and sum(t.steps for t in pending) >= cfg.learner_job_steps:
            busy += 1
            batch: list[_Traj] = []
            while pending and sum(t.steps for t in batch) < cfg.learner_job_steps:
                batch.append(pending.popleft())
            with self.lock:
                v_now = self.master.version
                self.counters.traj_staleness.extend(v_now - t.behaviour_version for t in batch)
            if cfg.publishing_learner:
                # previews only help actors that look for newer weights mid-rollout
                previews = (cfg.experimental.learner_previews
                            and cfg.experimental.actor_refresh_steps > 0)
                event = self.update_event([t.traj_id for t in batch], v_now, self.learner_hyper(),
                                          previews=previews)
                self._submit_learner(learners, _Learner(event, batch))
                continue
            # Several learners: each holds (pins) the version it computes with and truncates
            # over the versions the others hold at each minibatch; the lease outlives a
            # retried invocation and frees a version whose learner died with the orchestrator.
            live = not cfg.lookahead
            event = LearnerEvent(
                run_id=self.rs.run_id, redis_url=self.redis_url, mode="gradient",
                invocation_id=f"l-{uuid.uuid4().hex[:16]}", trajectory_ids=[t.traj_id for t in batch],
                hold_lease_s=(cfg.function_timeout_s + 60.0) if live else None,
                hyper=self.learner_hyper(), device=cfg.device, seed=self.next_seed(),
                lookahead=cfg.lookahead,
                master_adam_betas=(cfg.experimental.master_adam_beta1, 0.999),
                gradients_per_message=cfg.grads_per_message,
                compile=cfg.experimental.learner_compile,
                cuda_graph=cfg.experimental.learner_cuda_graphs,
            ).to_event()
            self._submit_learner(learners, _Learner(event, batch))

    def _on_learner(self, res: InvocationResult, job: _Learner,
                    learners: dict[Future[InvocationResult], _Learner]) -> None:
        self.record_cost(res)
        self._unhold(job)  # done or failed: its version pins nothing now (a retry re-holds)
        if res.ok and res.payload:
            self.record_learner_stats(res.payload)
            if self.cfg.publishing_learner:
                self._adopt(res.payload)
            else:
                self._consumed(job)
            self._release(job)
            return
        self.record_failure(res)
        if self.cfg.publishing_learner and self._published(job):
            # It published its version and failed before answering (killed, timed out, or a
            # retry refused as stale): the update is done, and must not run again.
            self._adopt(None)
            self._release(job)
            return
        if res.error_type == MISSING_TRAJECTORY:
            # The store lost the batch (a Redis restart): no retry can read it back.
            self.counters.learner_batches_lost += 1
            self._release(job)
            return
        if job.attempts <= self.cfg.max_retries and not self.done():
            # Same invocation id: gradients it already wrote are de-duplicated, never re-applied.
            self.counters.retries["learner"] += 1
            job.attempts += 1
            self._submit_learner(learners, job)
        else:
            self.counters.learner_gave_up += 1
            self._release(job)

    def _consumed(self, job: _Learner) -> None:
        """A gradient learner finished its batch: the bound's round counter moves by the env
        steps it consumed (once per batch, however many attempts it took)."""
        with self.lock:
            self.aggregator.consumed(sum(t.steps for t in job.trajs), self.cfg.learner_batch_steps)

    def _unhold(self, job: _Learner) -> None:
        if job.event.get("hold_lease_s") is None:
            return
        try:
            self.rs.params.release(job.event["invocation_id"])
        except StoreError as exc:  # the lease frees it anyway
            self.counters.store_errors += 1
            self.counters.last_errors.append(f"release held version: {exc}")

    def _published(self, job: _Learner) -> bool:
        target = int(job.event["target_version"])
        try:
            return (self.rs.params.latest_version() or 0) >= target
        except StoreError:
            return False  # retried (same target): a stale retry is refused, not applied twice

    def _adopt(self, payload: dict[str, Any] | None) -> None:
        """The learner's published version becomes the master's (weights and Adam moments;
        the master keeps the normaliser statistics actors reported meanwhile)."""
        try:
            with self.lock:
                self.master.adopt_latest(self.rs, keep_stats=True)
                if payload is not None:
                    self.counters.grads_applied += int(payload.get("optimizer_steps", 0))
        except StoreError as exc:
            # The store guard republishes the master when Redis is back; this update is lost.
            self.counters.store_errors += 1
            self.counters.last_errors.append(f"adopt published version: {exc}")

    def on_store_recovered(self) -> None:
        super().on_store_recovered()
        self.rs.grads.ensure_group(GROUP, start_id="0")

    def _release(self, job: _Learner) -> None:
        self.release_trajectories([t.traj_id for t in job.trajs])

    def _extra(self, n_actors: int, n_learners: int) -> dict[str, Any]:
        agg = self.aggregator
        beta = agg.beta()
        return {
            "actors_in_flight": n_actors, "learners_in_flight": n_learners,
            "aggregations": agg.aggregations, "rounds": agg.rounds,
            "beta": None if beta == float("inf") else beta,
            "buffer_size": len(agg.buffer), "grads_dropped": agg.dropped,
            "grads_duplicate": agg.duplicates,
        }

    def _shutdown(self, actors: dict[Future[InvocationResult], _Actor],
                  learners: dict[Future[InvocationResult], _Learner]) -> None:
        # In-flight invocations finish on their own (a Lambda cannot be recalled); we wait a
        # bounded time so their cost is booked, then stop the aggregator.
        outstanding = list(actors) + list(learners)
        if self._warming is not None:
            outstanding.append(self._warming)
        done, _ = wait(outstanding, timeout=min(60.0, self.cfg.function_timeout_s))
        for fut in done:
            res = fut.result()
            if fut is self._warming:
                self.on_warmup(res)
                continue
            self.record_cost(res)
            published = (self.cfg.publishing_learner and fut in learners
                         and (res.ok or self._published(learners[fut])))
            if published:
                self._adopt(res.payload if res.ok else None)  # its update is kept
            if not res.ok:
                self.record_failure(res)
            elif fut in actors and res.payload:
                self.record_actor(res.payload)
            if fut in learners:
                self._unhold(learners[fut])
            if fut in learners and res.ok and res.payload:
                self.record_learner_stats(res.payload)
                if not self.cfg.publishing_learner:
                    self._consumed(learners[fut])
                self._release(learners[fut])
        self.applier.join(timeout=10)
