"""Regression: an environment whose death the memory monitor reports before its socket closes
must end DEAD, not go back to the warm pool (where it failed every later invocation with
``Runtime.ExitError`` in 0.05 ms until reaped — seen under fault injection)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from runtime.environment import EnvState, ExecutionEnvironment, WorkerExited
from runtime.functions import FunctionConfig


def _config() -> FunctionConfig:
    return FunctionConfig(name="f", arn="arn:aws:lambda:us-east-1:000000000000:function:f",
                          runtime="python3.11", role="r", handler="app.handler",
                          code_dir=Path("."), zip_path=Path("x.zip"), code_sha256="", code_size=0)


def test_monitor_death_during_invoke_leaves_the_environment_dead() -> None:
    async def scenario() -> ExecutionEnvironment:
        env = ExecutionEnvironment(_config())
        reader = asyncio.StreamReader()  # a worker that never answers

        class _Writer:
            def write(self, data: bytes) -> None:
                pass

            def close(self) -> None:
                pass

        env.attach(reader, _Writer())  # type: ignore[arg-type]
        env.transition(EnvState.READY)
        env.transition(EnvState.BUSY)
        asyncio.get_running_loop().call_later(0.05, env.mark_died, "exited")
        with pytest.raises(WorkerExited):
            await env.invoke({"type": "invoke"}, timeout=5.0)
        return env

    env = asyncio.run(scenario())
    assert env.state is EnvState.DEAD
