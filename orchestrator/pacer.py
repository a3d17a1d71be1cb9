"""When to start the next rollout: as soon as there is room, or just in time.

With one learner that is slower than sampling (two CPU cores: a learner batch takes longer
than the rollout that feeds it), a rollout started the moment the learner takes its batch
finishes early and then waits: its data is one whole batch of updates old by the time it is
learned. Started ``lead`` seconds before the learner is expected to finish — ``lead`` being
the measured rollout time plus a margin — the next batch is still ready in time, the
learner never waits, and the data is fresher by the part of the batch learned meanwhile.
When sampling is the slower side (many learners, a GPU), the lead exceeds the learner's
time and rollouts start at once, as before.

Which rollout (:func:`next_rollout`): with ``filler_envs`` a batch is two rollouts, a lead
actor's that samples all the time and a filler's that waits for the learner to give its core
back, so that on a host whose cores the functions share neither core idles and the learner
never waits for a core.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable
from dataclasses import dataclass


class RolloutPacer:
    """Measures rollout and learner durations (EMAs) and says how long to hold a rollout."""

    def __init__(self, just_in_time: bool, margin: float = 0.25, alpha: float = 0.2) -> None:
        self.just_in_time = just_in_time
        self.margin = margin  # of the rollout time: late data idles the learner, early is stale
        self.alpha = alpha
        self.rollout_s: float | None = None
        self.env_s: float | None = None  # a rollout's seconds per env stream
        self.learn_s: float | None = None
        self._learners: dict[Hashable, float] = {}

    def _ema(self, old: float | None, new: float) -> float:
        return new if old is None else (1 - self.alpha) * old + self.alpha * new

    def rollout_done(self, duration_s: float, cold: bool = False, envs: int | None = None) -> None:
        if not cold:
            self.rollout_s = self._ema(self.rollout_s, duration_s)
            if envs:
                self.env_s = self._ema(self.env_s, duration_s / envs)

    def learner_started(self, key: Hashable, now: float) -> None:
        self._learners[key] = now

    def learner_done(self, key: Hashable, now: float, ok: bool = True, cold: bool = False) -> None:
        started = self._learners.pop(key, None)
        if ok and not cold and started is not None:
            self.learn_s = self._ema(self.learn_s, now - started)

    def lead_s(self) -> float | None:
        return None if self.rollout_s is None else self.rollout_s * (1 + self.margin)

    def hold_s(self, now: float) -> float:
        """Seconds to wait before starting the next rollout (0: start it now)."""
        lead = self.lead_s()
        if not self.just_in_time or lead is None or self.learn_s is None or not self._learners:
            return 0.0
        first_free = min(self._learners.values()) + self.learn_s
        return max(0.0, first_free - lead - now)


@dataclass(frozen=True)
class Rollout:
    """A rollout to start: its env streams and whether it is the filler (``filler_envs``)."""

    envs: int
    filler: bool = False


def next_rollout(n_envs: int, filler_envs: int, rollout_steps: int, steps_ahead: int,
                 backlog_steps: int, in_flight: Iterable[Rollout], learner_busy: bool
                 ) -> Rollout | None:
    """The rollout to start now under the async backpressure, or None.

    Without a filler: one of ``n_envs`` streams while the steps waiting and in flight are
    below ``steps_ahead``. With one: the lead (``n_envs - filler_envs`` streams) when none is
    in flight and the room left is more than the filler's share, and the filler only while no
    learner runs (nor compiles): on a host whose cores the functions share, the learner's core
    is the one it takes, so it never slows the update that the lead's samples wait on. Like a
    rollout without a filler, the filler may overshoot the room: a batch is never left short.
    """
    flying = list(in_flight)
    room = steps_ahead - backlog_steps - sum(r.envs for r in flying) * rollout_steps
    if room <= 0:
        return None
    if filler_envs == 0:
        return Rollout(n_envs)
    if not any(not r.filler for r in flying) and room > filler_envs * rollout_steps:
        return Rollout(n_envs - filler_envs)
    if not learner_busy and not any(r.filler for r in flying):
        return Rollout(filler_envs, filler=True)
    return None


def filler_cycle_s(n_envs: int, filler_envs: int, env_s: float, learn_s: float) -> float:
    """Seconds a batch takes with this filler on a host of two free cores: the lead samples
    its streams while the learner learns and after; the filler starts when the learner is
    done. Without a filler one actor samples every stream beside the learner."""
    if filler_envs == 0:
        return max(n_envs * env_s, learn_s)
    return max((n_envs - filler_envs) * env_s, learn_s + filler_envs * env_s)


def best_filler(n_envs: int, env_s: float, learn_s: float) -> int:
    """The filler (0 .. n_envs - 1 streams) whose batches take the least time
    (:func:`filler_cycle_s`); the smaller on a tie."""
    return min(range(n_envs), key=lambda k: (filler_cycle_s(n_envs, k, env_s, learn_s), k))
