"""The lean PPO's second process (``lean_ppo.py --two-core``): it samples rollouts while the
learner learns, so the lean PPO uses both cores, and 'what does overlap buy' has an answer
at equal cores without any of Stellaris' machinery (no functions, no store, no orchestrator).

The sampler runs the actor's ``rollout`` (the same code as Stellaris' actors and the one-core
lean PPO) with the newest weights the learner sent, at most one rollout ahead of the learner:
rollout k+1 is sampled with the weights of update k-1 at the oldest, which is the one-core lean
PPO's ``--lag 1`` and a publishing Stellaris learner's pipeline. Weights go down and rollouts
come up the child's stdin and stdout as length-prefixed blobs in the project's wire formats
(``store.encode`` of the policy tensors, ``Trajectory.to_blob``): nothing is pickled.

    python -m benchmarks.lean_sampler --env Hopper-v5 --n-envs 8 --rollout-steps 256 --seed 1
    (started by lean_ppo.py; not run by hand)
"""

from __future__ import annotations

import argparse
import contextlib
import os
import queue
import select
import struct
import subprocess
import sys
import threading
from pathlib import Path
from typing import IO, Any

os.environ.setdefault("OMP_NUM_THREADS", "1")
REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

_LEN = struct.Struct("<Q")


def write_frame(fh: IO[bytes], blob: bytes) -> None:
    fh.write(_LEN.pack(len(blob)))
    fh.write(blob)
    fh.flush()


def read_frame(fh: IO[bytes]) -> bytes | None:
    """One blob; None at the end of the stream. ``fh`` may be unbuffered (a short read is
    read on)."""
    head = _read_exact(fh, _LEN.size)
    if head is None:
        return None
    blob = _read_exact(fh, _LEN.unpack(head)[0])
    if blob is None:
        raise EOFError("a frame cut short")
    return blob


def _read_exact(fh: IO[bytes], n: int) -> bytes | None:
    parts, got = [], 0
    while got < n:
        chunk = fh.read(n - got)
        if not chunk:
            if got == 0:
                return None
            raise EOFError(f"a frame cut short: {got} of {n} bytes")
        parts.append(chunk)
        got += len(chunk)
    return b"".join(parts)


class RemoteSampler:
    """The learner's side: starts the sampler process, sends it weights, takes its rollouts."""

    def __init__(self, env_id: str, n_envs: int, rollout_steps: int, seed: int,
                 gamma: float) -> None:
        pythonpath = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "benchmarks.lean_sampler", "--env", env_id,
             "--n-envs", str(n_envs), "--rollout-steps", str(rollout_steps), "--seed", str(seed),
             "--gamma", repr(gamma)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, cwd=REPO,
            env={**os.environ, "PYTHONPATH": pythonpath})
        # Weights go down on a thread of their own: a frame larger than the pipe's buffer
        # (Humanoid's policy) would otherwise block the learner in write() while the sampler
        # blocks writing its next rollout, which the learner is not reading yet.
        self._outbox: queue.Queue[bytes | None] = queue.Queue()
        self._writer = threading.Thread(target=self._write_weights, name="lean-weights",
                                        daemon=True)
        self._writer.start()

    def _write_weights(self) -> None:
        with contextlib.suppress(BrokenPipeError, ValueError):  # closed: the run is over
            while (blob := self._outbox.get()) is not None:
                write_frame(self.proc.stdin, blob)

    def publish(self, version: int, model: Any, obs_rms: Any, ret_rms: Any) -> None:
        from functions.policy import policy_tensors
        from store import encode

        self._outbox.put(encode(policy_tensors(model, obs_rms, ret_rms), {"version": version}))

    def next_rollout(self) -> Any:
        from functions.wire import Trajectory

        blob = read_frame(self.proc.stdout)
        if blob is None:
            raise RuntimeError(f"the sampler process ended (exit {self.proc.wait()})")
        return Trajectory.from_blob(blob)

    def close(self) -> None:
        # The sampler is most likely blocked writing the next rollout, which nobody will read:
        # closing both pipes ends it at once (a broken pipe), not after a timeout that would
        # sit on the run's clock and bill.
        self._outbox.put(None)
        self.proc.stdout.close()
        self._writer.join(timeout=10)  # it ends once the sampler stops reading (broken pipe)
        with contextlib.suppress(BrokenPipeError):
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def serve(env_id: str, n_envs: int, rollout_steps: int, seed: int, gamma: float,
          inp: IO[bytes], out: IO[bytes]) -> None:
    """Sample rollouts onto ``out`` with the newest weights read from ``inp``, starting rollout
    k+1 only once the weights after update k-1 have come (one rollout of lag at most)."""
    import torch

    from functions.actor import rollout
    from functions.envs import WarmEnv
    from functions.events import ActorEvent
    from functions.policy import init_policy, load_policy_tensors
    from functions.warm import CachedPolicy
    from store import decode

    torch.set_num_threads(1)
    model, _ = init_policy(env_id, None, seed)
    wenv = WarmEnv(env_id, n_envs, seed)
    pol: CachedPolicy | None = None

    def take(blob: bytes) -> None:
        nonlocal pol
        tensors, meta = decode(blob)
        obs_rms, ret_rms = load_policy_tensors(model, tensors)
        pol = CachedPolicy(int(meta["version"]), model, obs_rms, ret_rms, {})

    sent = 0
    while True:
        # block for the weights this rollout may use at the oldest, then take any newer ones
        while pol is None or pol.version < sent - 1 or select.select([inp], [], [], 0)[0]:
            blob = read_frame(inp)
            if blob is None:
                wenv.close()
                return
            take(blob)
        sent += 1
        ev = ActorEvent(run_id="lean", env_id=env_id, n_envs=n_envs, steps=rollout_steps,
                        seed=seed, gamma=gamma, invocation_id=f"lean-{sent}")
        write_frame(out, rollout(wenv, pol, ev).to_blob())


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--env", required=True, help="gymnasium env id")
    p.add_argument("--n-envs", type=int, required=True, help="envs in the vector env")
    p.add_argument("--rollout-steps", type=int, required=True, help="steps per rollout")
    p.add_argument("--seed", type=int, required=True, help="the envs' and the rollouts' seed")
    p.add_argument("--gamma", type=float, required=True, help="discount (the reward scaling's)")
    a = p.parse_args(argv)
    out = sys.stdout.buffer
    sys.stdout = sys.stderr  # stdout carries frames only
    # unbuffered input: select() then sees every frame not yet read
    with contextlib.suppress(BrokenPipeError):  # the learner closed its end: the run is over
        serve(a.env, a.n_envs, a.rollout_steps, a.seed, a.gamma, sys.stdin.buffer.raw, out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
