"""``python -m runtime serve ...`` (and ``stellaris runtime serve ...``, which delegates here)."""

from __future__ import annotations

import argparse
import logging
import os
from pathlib import Path

from runtime.core import Settings
from runtime.latency import InvalidLatency, InvokeLatency
from runtime.sigv4 import load_credentials
from runtime.spawner import DEFAULT_PRELOAD

CREDENTIALS_ENV = "STELLARIS_RUNTIME_CREDENTIALS"
LATENCY_ENV = "STELLARIS_RUNTIME_LATENCY_MS"
SIGMA_ENV = "STELLARIS_RUNTIME_LATENCY_SIGMA"


def _env_float(name: str) -> float:
    raw = os.environ.get(name, "").strip()
    try:
        return float(raw) if raw else 0.0
    except ValueError:
        raise SystemExit(f"error: ${name} must be a number, got {raw!r}") from None


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="runtime", description="Local AWS Lambda runtime")
    sub = p.add_subparsers(dest="command", required=True)
    s = sub.add_parser("serve", help="serve the Lambda API")
    s.add_argument("--host", default="127.0.0.1", help="bind address (loopback by default)")
    s.add_argument("--port", type=int, default=9000)
    s.add_argument("--auth", choices=("none", "sigv4"), default="none")
    s.add_argument("--credentials", default=None,
                   help=f"file of AKID:SECRET lines for --auth sigv4 (default: ${CREDENTIALS_ENV})")
    s.add_argument("--zygote", action=argparse.BooleanOptionalAction, default=True,
                   help="fork environments from a pre-initialised zygote")
    s.add_argument("--preload", default=",".join(DEFAULT_PRELOAD),
                   help="modules the zygote imports (comma-separated)")
    s.add_argument("--account-concurrency", type=int, default=1000)
    s.add_argument("--unreserved-min", type=int, default=None,
                   help="executions that must stay unreserved (AWS: 100; default min(100, N/10))")
    s.add_argument("--idle-timeout", type=float, default=300.0, help="seconds a warm environment is kept")
    s.add_argument("--state-dir", default=None, help="function code and logs (default: a temp dir)")
    s.add_argument("--region", default="us-east-1")
    s.add_argument("--account-id", default="000000000000")
    s.add_argument("--event-retry-delays", default="60,120",
                   help="seconds before the retries of a failed Event invocation")
    s.add_argument("--invoke-latency-ms", type=float, default=_env_float(LATENCY_ENV),
                   help="emulated network + frontend latency of each RequestResponse invoke, "
                        f"median in ms (AWS: tens of ms warm; default ${LATENCY_ENV} or 0)")
    s.add_argument("--invoke-latency-sigma", type=float, default=_env_float(SIGMA_ENV),
                   help="log-normal spread of that latency (0: fixed; 1: a p99 ~10x the median; "
                        f"default ${SIGMA_ENV} or 0)")
    s.add_argument("--log-level", default="info")
    s.add_argument("--access-log", action="store_true")
    return p


def settings_from_args(args: argparse.Namespace) -> Settings:
    credentials: dict[str, str] = {}
    if args.auth == "sigv4":
        text = Path(args.credentials).read_text() if args.credentials else os.environ.get(CREDENTIALS_ENV, "")
        credentials = load_credentials(text)
        if not credentials:
            raise SystemExit(f"--auth sigv4 needs --credentials FILE or ${CREDENTIALS_ENV}")
    return Settings(
        region=args.region, account_id=args.account_id,
        account_concurrency=args.account_concurrency, unreserved_min=args.unreserved_min,
        idle_timeout=args.idle_timeout, state_dir=Path(args.state_dir) if args.state_dir else None,
        zygote=args.zygote, preload=tuple(m for m in args.preload.split(",") if m),
        event_retry_delays=tuple(float(x) for x in args.event_retry_delays.split(",") if x),
        credentials=credentials, auth=args.auth,
        invoke_latency=InvokeLatency(args.invoke_latency_ms, args.invoke_latency_sigma),
    )


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        settings = settings_from_args(args)
    except InvalidLatency as exc:
        raise SystemExit(f"error: {exc}") from None
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(name)s %(levelname)s %(message)s")
    latency = settings.invoke_latency
    if latency.enabled:
        logging.getLogger("runtime").info(
            "emulating platform latency: each invoke waits a log-normal median %g ms, sigma %g "
            "(unbilled)", latency.median_ms, latency.sigma)
    import uvicorn

    from runtime.api import create_app

    app = create_app(settings)
    uvicorn.run(app, host=args.host, port=args.port, log_level=args.log_level,
                access_log=args.access_log, timeout_graceful_shutdown=3)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
