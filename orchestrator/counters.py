"""What a run counts as it goes: steps, episodes, failures, retries, staleness, IS truncation.

One place for the numbers the metrics rows and ``summary.json`` report; the loops add to them
under the trainer's lock.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field


@dataclass
class Counters:
    env_steps: int = 0
    episodes: int = 0
    failures: dict[str, int] = field(default_factory=lambda: {"actor": 0, "learner": 0, "evaluator": 0})
    retries: dict[str, int] = field(default_factory=lambda: {"actor": 0, "learner": 0, "evaluator": 0})
    learner_gave_up: int = 0
    # learner batches dropped because the store no longer held their trajectories (a Redis
    # restart lost them): a retry would read the same nothing, so they are counted, not retried
    learner_batches_lost: int = 0
    redis_recoveries: int = 0
    store_errors: int = 0
    grads_applied: int = 0
    lookahead_rebases: int = 0  # mid-invocation rebases of look-ahead learners
    learners_eager: int = 0  # learner invocations that ran the loss eagerly (not compiled)
    preview_steps: int = 0  # env steps sampled with a publishing learner's preview
    previews: int = 0  # previews publishing learners stored (learner_previews)
    filler_rollouts: int = 0  # filler actors started (filler_envs)
    filler_resizes: int = 0  # filler sizes chosen by filler_envs = "auto"
    # IS truncation among several learners: versions another learner held that the store no
    # longer had (never skipped silently), and run sums of the truncated share and of the
    # number of other learners' policies each gradient was truncated against, and of the
    # mean truncated weight (a sample cut from 1.0 to 0.98 counts as truncated all the same)
    is_versions_missing: int = 0
    is_truncated_sum: float = 0.0
    is_others_sum: float = 0.0
    is_weight_sum: float = 0.0
    is_invocations: int = 0
    # epochs the learner invocations ran (``target_kl`` may end one early)
    update_epochs_sum: int = 0
    update_invocations: int = 0
    traj_staleness: list[float] = field(default_factory=list)
    grad_staleness: list[int] = field(default_factory=list)
    last_errors: deque[str] = field(default_factory=lambda: deque(maxlen=5))
