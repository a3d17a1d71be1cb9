"""Local Lambda runtime benchmark.

Measures, in one run: warm invoke latency (p50/p99) of a no-op handler through boto3 and
through httpx next to a bare uvicorn echo endpoint (the floor, same clients); throughput with
1, 4 and 16 concurrent clients; cold start (Init Duration) of a handler importing torch with
and without the zygote.

    python benchmarks/runtime_bench.py [--n 300] [--seconds 3] [--json out.json]

Writes one record (kind ``runtime``) with every figure printed.
"""

from __future__ import annotations

import argparse
import base64
import io
import json
import statistics
import subprocess
import sys
import threading
import time
import zipfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import boto3  # noqa: E402
import httpx  # noqa: E402
from botocore.config import Config  # noqa: E402

from benchmarks.records import command_line, write_record  # noqa: E402
from runtime import LocalRuntime  # noqa: E402
from runtime.launcher import free_port  # noqa: E402

ROLE = "arn:aws:iam::123456789012:role/bench"
NOOP = "def handler(event, context):\n    return None\n"
TORCH = "import torch\ndef handler(event, context):\n    return float(torch.ones(2).sum())\n"
INVOKE = "/2015-03-31/functions/{}/invocations"


async def echo_app(scope, receive, send) -> None:  # type: ignore[no-untyped-def]
    """The floor: a bare ASGI app on uvicorn that answers every POST with its body."""
    if scope["type"] != "http":
        return
    body = b""
    more = True
    while more:
        msg = await receive()
        body += msg.get("body", b"")
        more = msg.get("more_body", False)
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"application/json")]})
    await send({"type": "http.response.body", "body": body or b"null"})


def _zip(code: str) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("app.py", code)
    return buf.getvalue()


def _client(endpoint: str):  # type: ignore[no-untyped-def]
    return boto3.client("lambda", endpoint_url=endpoint, region_name="us-east-1",
                        aws_access_key_id="test", aws_secret_access_key="test",
                        config=Config(retries={"max_attempts": 0}, max_pool_connections=32))


def _pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] * 1000


def latency(endpoint: str, name: str, n: int) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    c = _client(endpoint)
    for _ in range(20):
        c.invoke(FunctionName=name, Payload=b"{}")
    samples = []
    for _ in range(n):
        t0 = time.perf_counter()
        c.invoke(FunctionName=name, Payload=b"{}")["Payload"].read()
        samples.append(time.perf_counter() - t0)
    out["boto3"] = {"p50_ms": _pct(samples, 0.5), "p99_ms": _pct(samples, 0.99)}
    with httpx.Client() as h:
        url = endpoint + INVOKE.format(name)
        for _ in range(20):
            h.post(url, content=b"{}")
        samples = []
        for _ in range(n):
            t0 = time.perf_counter()
            h.post(url, content=b"{}").raise_for_status()
            samples.append(time.perf_counter() - t0)
    out["httpx"] = {"p50_ms": _pct(samples, 0.5), "p99_ms": _pct(samples, 0.99)}
    return out


def throughput(endpoint: str, name: str, clients: int, seconds: float) -> float:
    url = endpoint + INVOKE.format(name)
    counts = [0] * clients
    stop = time.perf_counter() + seconds

    def run(i: int) -> None:
        with httpx.Client(timeout=30) as h:
            while time.perf_counter() < stop:
                r = h.post(url, content=b"{}")
                if r.status_code == 200:
                    counts[i] += 1

    threads = [threading.Thread(target=run, args=(i,)) for i in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sum(counts) / seconds


def cold_starts(rt: LocalRuntime, tries: int) -> list[dict[str, float]]:
    c = _client(rt.endpoint)
    out = []
    for i in range(tries):
        name = f"torch-cold-{i}"
        c.create_function(FunctionName=name, Runtime="python3.11", Role=ROLE, Handler="app.handler",
                          Code={"ZipFile": _zip(TORCH)}, MemorySize=1024, Timeout=60)
        t0 = time.perf_counter()
        resp = c.invoke(FunctionName=name, LogType="Tail")
        wall = time.perf_counter() - t0
        report = base64.b64decode(resp["LogResult"]).decode().strip().splitlines()[-1]
        init = float(report.split("Init Duration: ")[1].split(" ms")[0])
        out.append({"init_ms": init, "first_invoke_wall_ms": wall * 1000})
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=300)
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--cold-tries", type=int, default=3)
    ap.add_argument("--json", default=None)
    ap.add_argument("--records", help="records dir (default: $STELLARIS_RECORDS_DIR or "
                    "benchmarks/records)")
    ap.add_argument("--no-record", action="store_true", help="write no record")
    args = ap.parse_args()
    results: dict[str, object] = {}

    port = free_port()
    echo = subprocess.Popen([sys.executable, "-c",
                             "import sys, uvicorn; sys.path.insert(0, 'benchmarks'); import runtime_bench; "
                             f"uvicorn.run(runtime_bench.echo_app, host='127.0.0.1', port={port}, "
                             "log_level='warning', access_log=False)"],
                            cwd=Path(__file__).resolve().parent.parent)
    try:
        endpoint = f"http://127.0.0.1:{port}"
        for _ in range(100):
            try:
                httpx.post(endpoint + "/x", content=b"{}")
                break
            except httpx.HTTPError:
                time.sleep(0.1)
        results["echo_floor"] = latency(endpoint, "echo", args.n)
        results["echo_throughput_rps"] = {str(k): throughput(endpoint, "echo", k, args.seconds) for k in (1, 4, 16)}
    finally:
        echo.terminate()
        echo.wait()

    with LocalRuntime(zygote=True, preload=("torch",), account_concurrency=64) as rt:
        c = _client(rt.endpoint)
        c.create_function(FunctionName="noop", Runtime="python3.11", Role=ROLE, Handler="app.handler",
                          Code={"ZipFile": _zip(NOOP)})
        results["runtime_warm"] = latency(rt.endpoint, "noop", args.n)
        throughput(rt.endpoint, "noop", 16, 1.0)  # warm 16 environments first
        results["runtime_throughput_rps"] = {str(k): throughput(rt.endpoint, "noop", k, args.seconds)
                                             for k in (1, 4, 16)}
        results["cold_start_zygote"] = cold_starts(rt, args.cold_tries)
    with LocalRuntime(zygote=False, account_concurrency=64) as rt:
        results["cold_start_spawn"] = cold_starts(rt, args.cold_tries)

    floor, warm = results["echo_floor"], results["runtime_warm"]
    results["ratios_p50_vs_floor"] = {k: warm[k]["p50_ms"] / floor[k]["p50_ms"] for k in ("boto3", "httpx")}
    results["cold_start_median_init_ms"] = {
        k: statistics.median(x["init_ms"] for x in results[f"cold_start_{k}"]) for k in ("zygote", "spawn")}
    text = json.dumps(results, indent=2)
    print(text)
    if args.json:
        Path(args.json).write_text(text)
    if not args.no_record:
        print(write_record("runtime", command_line("benchmarks/runtime_bench.py", None), results,
                           records=args.records))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
