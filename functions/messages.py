"""The public names of :mod:`functions.events`, :mod:`functions.hyper` and
:mod:`functions.wire`, for importers outside ``functions/`` that name them from here.

New code imports from those modules directly.
"""

from functions.events import (
    ActorEvent,
    EvaluatorEvent,
    InvalidEvent,
    LearnerEvent,
    LearnerWarmup,
    VersionRef,
    event_schema,
    parse_event,
)
from functions.hyper import DEFAULT_GAMMA, PolicySpec, PPOHyper
from functions.wire import Gradient, Layout, Trajectory, flat_layout, split_flat

__all__ = [
    "DEFAULT_GAMMA", "ActorEvent", "EvaluatorEvent", "Gradient", "InvalidEvent", "Layout",
    "LearnerEvent", "LearnerWarmup", "PPOHyper", "PolicySpec", "Trajectory", "VersionRef",
    "event_schema", "flat_layout", "parse_event", "split_flat",
]
