"""The synchronous baseline (RLlib-style PPO) on the same functions.

Each round: every actor samples with version ``v`` (barrier), then one learner invocation in
``update`` mode runs epochs x minibatches of Adam steps on the whole batch and publishes
``v + 1`` together with the merged normaliser statistics.
"""

from __future__ import annotations

from concurrent.futures import wait
from typing import Any

from orchestrator.invokers.base import InvocationResult
from orchestrator.trainer import MISSING_TRAJECTORY, Trainer


class SyncTrainer(Trainer):
    def run(self) -> dict[str, Any]:
        self.resume_or_init()
        # the learner compiles while the first round samples (its update waits for it)
        self._warming = self.submit_warmup(
            self.cfg.actors * self.cfg.n_envs * self._steps_per_actor(), "update",
            self.learner_hyper(is_correction="none"))
        while not self.done():
            v = self.master.version
            results = self._sample_round(v)
            if results is None:
                break
            self._learn(v, results)
            self.periodic({"actors_in_flight": 0, "learners_in_flight": 0})
        if self._warming is not None:  # stopped before the first update: billed all the same
            self.on_warmup(self._warming.result())
        self.checkpoint(self._store_state())
        self.finish_evaluation(timeout=30)
        row = self.log_row({"actors_in_flight": 0, "learners_in_flight": 0})
        summary = self.summary()
        summary["final_row"] = row
        self.close(summary)
        return summary

    def _steps_per_actor(self) -> int:
        return max(1, self.cfg.learner_batch_steps // (self.cfg.actors * self.cfg.n_envs))

    def _sample_round(self, v: int) -> list[dict[str, Any]] | None:
        """All actors with version ``v``; failed ones are resubmitted (the barrier waits).

        A round is one PPO batch of ``learner_batch_steps`` env steps split across the actors
        — the same batch (and so the same minibatch size and optimizer steps per env step)
        as an async learner invocation, so the comparison isolates asynchrony.
        """
        payloads: list[dict[str, Any]] = []
        attempts = {i: 0 for i in range(self.cfg.actors)}
        steps = self._round_steps = self._steps_per_actor()
        futures = {self.invoker.submit("actor", self.actor_event(v, steps)): i for i in attempts}
        while futures:
            done, _ = wait(list(futures), timeout=1.0)
            self.maybe_evaluate()
            for fut in done:
                i = futures.pop(fut)
                res: InvocationResult = fut.result()
                self.record_cost(res)
                if res.ok and res.payload:
                    payloads.append(res.payload)
                    self.record_actor(res.payload)
                    continue
                self.record_failure(res)
                attempts[i] += 1
                if attempts[i] > self.cfg.max_retries:
                    raise RuntimeError(f"actor failed {attempts[i]} times: {res.error}")
                self.counters.retries["actor"] += 1
                futures[self.invoker.submit("actor", self.actor_event(v, steps))] = i
        return payloads

    def _learn(self, v: int, payloads: list[dict[str, Any]]) -> None:
        ids = [p["trajectory_id"] for p in payloads]
        with self.lock:
            self.counters.traj_staleness.extend(0 for _ in ids)
        # Plain PPO: IS correction is the async mechanism; a sync batch is on-policy.
        event = self.update_event(ids, v, self.learner_hyper(is_correction="none"))
        if self._warming is not None:
            self.on_warmup(self._warming.result())
            self._warming = None
        for attempt in range(self.cfg.max_retries + 1):
            res = self.invoker.submit("learner", event).result()
            self.record_cost(res)
            if res.ok and res.payload:
                self.record_learner_stats(res.payload)
                break
            self.record_failure(res)
            if res.error_type == MISSING_TRAJECTORY:
                # The store lost the round's data (a Redis restart): sample the round again.
                self.counters.learner_batches_lost += 1
                self.release_trajectories(ids)
                return
            if (self.rs.params.latest_version() or 0) >= v + 1:
                break  # it published v+1 and died before answering: the round is done
            if attempt == self.cfg.max_retries:
                raise RuntimeError(f"learner update failed {attempt + 1} times: {res.error}")
            self.counters.retries["learner"] += 1
        self.release_trajectories(ids)
        with self.lock:
            self.master.adopt_latest(self.rs)
            self.counters.grads_applied += int(res.payload.get("optimizer_steps", 0)) if res.payload else 0

    def _store_state(self) -> Any:
        """Sync mode: the learner holds the truth; checkpoint the store's version + Adam state."""
        with self.lock:
            self.master.adopt_latest(self.rs)
            return self.master.state_tensors()
