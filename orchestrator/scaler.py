"""How many actor invocations to keep in flight.

Fixed ``actors`` by default. With ``autoscale`` it grows the number while learners sit idle
waiting for data and shrinks it while trajectories pile up faster than learners consume them
(stale data is wasted data), within ``[1, max_actors]``; the budget is enforced by the stop rule.
"""

from __future__ import annotations

import time

from orchestrator.config import TrainConfig


class ActorScaler:
    def __init__(self, cfg: TrainConfig, period_s: float = 5.0) -> None:
        self.cfg = cfg
        self.current = cfg.actors
        self.period_s = period_s
        self._last = time.monotonic()

    def target(self, in_flight: int, backlog_steps: int, learners_busy: int) -> int:
        if not self.cfg.autoscale:
            return self.cfg.actors
        now = time.monotonic()
        if now - self._last >= self.period_s:
            self._last = now
            batch = self.cfg.learner_job_steps
            if backlog_steps < batch and learners_busy < self.cfg.learners:
                self.current = min(self.cfg.max_actors, self.current + 1)  # learners starve
            elif backlog_steps > 2 * batch * self.cfg.learners:
                self.current = max(1, self.current - 1)  # data goes stale in the queue
        return self.current
