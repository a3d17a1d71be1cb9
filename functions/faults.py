"""Fault injection for reliability drills: a fraction of invocations die mid-invocation.

Deployed instead of the real handlers when a run asks for it (``fault_kill_prob``): each
armed invocation is killed at a random moment while it runs — or, if it finishes first, right
before it returns, after its side effects (a written trajectory, streamed gradients) but
before its response: the hardest case for exactly-once accounting. In a function process
(local runtime, AWS Lambda, Ray worker) the process really dies (``os._exit``); in-process
(inline backend) the invocation raises :class:`InjectedFault` instead.
"""

from __future__ import annotations

import os
import random
import threading
from collections.abc import Callable
from typing import Any

PROB_ENV = "STELLARIS_FAULT_KILL_PROB"
MAX_DELAY_ENV = "STELLARIS_FAULT_MAX_DELAY_S"
EXIT_CODE = 137  # what a SIGKILLed process reports


class InjectedFault(RuntimeError):
    """An invocation killed on purpose (in-process mode)."""


def _kill_process() -> None:
    os._exit(EXIT_CODE)


def run_with_faults(
    handler: Callable[[Any, Any], Any], event: Any, context: Any, prob: float, in_process: bool,
    max_delay_s: float = 1.0, rng: random.Random | None = None,
) -> Any:
    # Fresh entropy per invocation: environments forked from one zygote share the parent's
    # RNG state, so a module-level generator would make their fates identical.
    rng = rng or random.Random(os.urandom(16))
    if prob <= 0 or rng.random() >= prob:
        return handler(event, context)
    if in_process:
        # No process to kill: fail halfway through or after the work, like a crash would.
        if rng.random() < 0.5:
            raise InjectedFault("injected fault: invocation killed before it ran")
        handler(event, context)
        raise InjectedFault("injected fault: invocation killed before it could respond")
    timer = threading.Timer(rng.uniform(0.0, max_delay_s), _kill_process)
    timer.daemon = True
    timer.start()
    handler(event, context)
    _kill_process()  # finished before the timer: die before the response leaves
    raise AssertionError("unreachable")  # pragma: no cover


def _wrapped(name: str) -> Callable[[Any, Any], Any]:
    def handler(event: Any, context: Any = None) -> Any:
        import importlib

        real = importlib.import_module(f"functions.{name}").handler
        prob = float(os.environ.get(PROB_ENV, "0") or 0)
        max_delay = float(os.environ.get(MAX_DELAY_ENV, "1.0") or 1.0)
        return run_with_faults(real, event, context, prob, in_process=False, max_delay_s=max_delay)

    handler.__name__ = f"{name}_with_faults"
    return handler


actor = _wrapped("actor")
learner = _wrapped("learner")
evaluator = _wrapped("evaluator")
