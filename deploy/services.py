"""Long-running services: ``stellaris up`` (the compose topology as local processes) and
``stellaris redis serve|ping`` (a redis-server without Docker, and a PING of any Redis).

``up`` starts redis-server (or uses ``--redis-url``), the local Lambda runtime, deploys the
functions to it (``deploy --target local``), prints the endpoints and a train command, and
runs until Ctrl-C / SIGTERM, then stops its children. It checks its children once a second
(a blocking wait, not a spin) and exits non-zero if one dies.
"""

from __future__ import annotations

import argparse
import contextlib
import signal
import sys
import threading
from collections.abc import Callable, Iterator

from deploy.aws import make_clients
from deploy.errors import DeployError
from deploy.functions import LOCAL_ROLE, deploy_zip, function_specs
from deploy.package import build_function_zip

_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


@contextlib.contextmanager
def _stop_event() -> Iterator[threading.Event]:
    """An event set by SIGINT/SIGTERM (handlers restored afterwards)."""
    stop = threading.Event()
    previous = {}
    for sig in _STOP_SIGNALS:
        previous[sig] = signal.signal(sig, lambda *_: stop.set())
    try:
        yield stop
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _wait(stop: threading.Event, alive: Callable[[], str | None]) -> int:
    """Block until a stop signal (0) or until ``alive()`` names a dead child (1)."""
    while not stop.wait(1.0):
        dead = alive()
        if dead:
            print(f"error: {dead} exited; stopping", file=sys.stderr, flush=True)
            return 1
    return 0


# -- stellaris redis ... ---------------------------------------------------------------------
def redis_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="stellaris redis", description="A redis-server for Stellaris.")
    sub = p.add_subparsers(dest="command", required=True)
    s = sub.add_parser("serve", help="run redis-server in the foreground until SIGINT/SIGTERM")
    s.add_argument("--host", default="127.0.0.1", help="bind address (loopback by default)")
    s.add_argument("--port", type=int, default=6379)
    s.add_argument("--data-dir", default=None, help="working directory (default: a temp dir)")
    s.add_argument("--persist", action="store_true", help="append-only file, fsync always")
    s.add_argument("--maxmemory", default=None, help="e.g. 2gb")
    pg = sub.add_parser("ping", help="exit 0 if the Redis at --url answers PING (health check)")
    pg.add_argument("--url", default="redis://127.0.0.1:6379/0")
    pg.add_argument("--timeout", type=float, default=2.0)
    return p


def cmd_redis(argv: list[str]) -> int:
    args = redis_parser().parse_args(argv)
    if args.command == "ping":
        import redis

        try:
            client = redis.Redis.from_url(args.url, socket_timeout=args.timeout,
                                          socket_connect_timeout=args.timeout)
            client.ping()
            client.close()
        except (redis.RedisError, OSError, ValueError) as exc:
            print(f"error: redis at {args.url} does not answer: {exc}", file=sys.stderr)
            return 1
        print("PONG")
        return 0

    from store import EmbeddedRedis

    server = EmbeddedRedis(port=args.port, host=args.host, data_dir=args.data_dir,
                           maxmemory=args.maxmemory, persist=args.persist)
    with _stop_event() as stop:
        try:
            server.start()
        except (RuntimeError, TimeoutError, FileNotFoundError) as exc:
            raise DeployError(f"redis-server: {exc}") from None
        print(f"redis ready at redis://{args.host}:{server.port}/0", flush=True)
        try:
            return _wait(stop, lambda: None if server.process and server.process.poll() is None
                         else "redis-server")
        finally:
            server.close()


# -- stellaris up ------------------------------------------------------------------------------
def up_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="stellaris up",
        description="The docker-compose topology as local processes: redis, the local Lambda "
                    "runtime, the functions deployed to it. Runs until Ctrl-C.")
    p.add_argument("--host", default="127.0.0.1", help="bind address of redis and the runtime")
    p.add_argument("--redis-port", type=int, default=6379, help="0: a free port")
    p.add_argument("--redis-url", default=None, help="use this Redis instead of starting one")
    p.add_argument("--runtime-port", type=int, default=9000, help="0: a free port")
    p.add_argument("--prefix", default="stellaris")
    p.add_argument("--actor-memory-mb", type=int, default=1769)
    p.add_argument("--learner-memory-mb", type=int, default=1769)
    p.add_argument("--timeout-s", type=int, default=300)
    p.add_argument("--account-concurrency", type=int, default=64)
    p.add_argument("--zygote", action=argparse.BooleanOptionalAction, default=True)
    p.add_argument("--invoke-latency-ms", type=float, default=0.0,
                   help="emulate a real platform's invoke latency (median ms; runtime/latency.py)")
    p.add_argument("--invoke-latency-sigma", type=float, default=0.0,
                   help="log-normal spread of that latency (stragglers)")
    p.add_argument("--log-file", default=None, help="runtime log (default: inherit the terminal)")
    return p


def cmd_up(argv: list[str]) -> int:
    args = up_parser().parse_args(argv)
    from runtime.launcher import LocalRuntime, free_port
    from store import EmbeddedRedis

    redis_server: EmbeddedRedis | None = None
    runtime: LocalRuntime | None = None
    with _stop_event() as stop:
        try:
            if args.redis_url:
                redis_url = args.redis_url
            else:
                port = args.redis_port or free_port(args.host)
                redis_server = EmbeddedRedis(port=port, host=args.host).start()
                redis_url = redis_server.url
            runtime = LocalRuntime(host=args.host, port=args.runtime_port or None, zygote=args.zygote,
                                   account_concurrency=args.account_concurrency,
                                   log_file=args.log_file,
                                   extra_env={"REDIS_URL": redis_url},
                                   invoke_latency_ms=args.invoke_latency_ms,
                                   invoke_latency_sigma=args.invoke_latency_sigma)
            runtime.start()
            specs = function_specs(args.prefix, args.actor_memory_mb, args.learner_memory_mb,
                                   args.timeout_s, {"REDIS_URL": redis_url})
            client = make_clients("local", None, runtime.endpoint)["lambda"]
            actions = deploy_zip(client, specs, build_function_zip(), LOCAL_ROLE)
            client.close()
            print(f"redis     {redis_url}", flush=True)
            print(f"runtime   {runtime.endpoint}   (AWS Lambda API; health {runtime.endpoint}"
                  "/stellaris/v1/health)")
            print(f"functions {', '.join(s.name for s in specs)}"
                  f"   ({len(actions)} deploy change{'s' if len(actions) != 1 else ''})")
            print("train     stellaris train --backend lambda "
                  f"--endpoint-url {runtime.endpoint} --redis-url {redis_url} "
                  f"--set function_prefix={args.prefix} --env CartPole-v1 --total-steps 50000")
            print("ready (Ctrl-C to stop)", flush=True)

            def alive() -> str | None:
                if redis_server and (redis_server.process is None or redis_server.process.poll() is not None):
                    return "redis-server"
                if runtime is None or runtime.proc is None or runtime.proc.poll() is not None:
                    return "runtime"
                return None

            return _wait(stop, alive)
        finally:
            if runtime is not None:
                runtime.stop()
            if redis_server is not None:
                redis_server.close()
            print("stopped", flush=True)
