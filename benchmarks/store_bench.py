"""Store benchmark: ParamStore publish/fetch vs raw redis-py SET/GET of the same bytes.

Same Redis server, same process, interleaved in one run so machine noise hits both sides.
Policy-sized blobs for Hopper-v5 (obs 11, act 3): a 64x64 and a 256x256 actor-critic MLP.

    .venv/bin/python benchmarks/store_bench.py [--iters 2000] [--out benchmarks/out/store.json]

Writes the JSON to ``--out`` and one record (kind ``store``: a row per policy size).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

from benchmarks.records import command_line, write_record  # noqa: E402
from store import EmbeddedRedis, ParamStore, Store, encode  # noqa: E402


def mlp_tensors(hidden: int, obs: int = 11, act: int = 3) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    shapes = {}
    for net, out in (("actor", act), ("critic", 1)):
        shapes.update({
            f"{net}.0.weight": (hidden, obs), f"{net}.0.bias": (hidden,),
            f"{net}.2.weight": (hidden, hidden), f"{net}.2.bias": (hidden,),
            f"{net}.4.weight": (out, hidden), f"{net}.4.bias": (out,),
        })
    shapes["actor_logstd"] = (1, act)
    t = {k: rng.standard_normal(s).astype(np.float32) for k, s in shapes.items()}
    t["obs_rms.mean"] = np.zeros(obs)
    t["obs_rms.var"] = np.ones(obs)
    return t


def pct(xs: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(xs) * 1e6, q))  # microseconds


def bench(store: Store, hidden: int, iters: int, tag: str = "") -> dict[str, float]:
    tensors = mlp_tensors(hidden)
    ps = ParamStore(store, f"bench-{hidden}{tag}", keep=4)
    blob = encode(tensors, {"env_id": "Hopper-v5"})
    raw_key = f"bench-raw-{hidden}"
    r = store.redis
    r.set(raw_key + ":v", b"0")
    t_pub, t_raw_set, t_fetch, t_raw_get, t_check, t_raw_check = [], [], [], [], [], []
    for v in range(iters):
        t0 = time.perf_counter()
        ps.publish(v, tensors, {"env_id": "Hopper-v5"})
        t1 = time.perf_counter()
        r.set(raw_key, blob)
        t2 = time.perf_counter()
        snap = ps.latest()
        t3 = time.perf_counter()
        got = r.get(raw_key)
        t4 = time.perf_counter()
        unchanged = ps.fetch_if_newer(v)
        t5 = time.perf_counter()
        r.get(raw_key + ":v")
        t6 = time.perf_counter()
        assert snap.version == v and got is not None and unchanged is None
        t_check.append(t5 - t4)
        t_raw_check.append(t6 - t5)
        t_pub.append(t1 - t0)
        t_raw_set.append(t2 - t1)
        t_fetch.append(t3 - t2)
        t_raw_get.append(t4 - t3)
    out = {
        "blob_bytes": len(blob),
        "publish_p50_us": pct(t_pub, 50), "publish_p99_us": pct(t_pub, 99),
        "raw_set_p50_us": pct(t_raw_set, 50), "raw_set_p99_us": pct(t_raw_set, 99),
        "fetch_p50_us": pct(t_fetch, 50), "fetch_p99_us": pct(t_fetch, 99),
        "raw_get_p50_us": pct(t_raw_get, 50), "raw_get_p99_us": pct(t_raw_get, 99),
        "check_p50_us": pct(t_check, 50), "raw_check_p50_us": pct(t_raw_check, 50),
    }
    out["fetch_ratio_p50"] = out["fetch_p50_us"] / out["raw_get_p50_us"]
    out["publish_ratio_p50"] = out["publish_p50_us"] / out["raw_set_p50_us"]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--iters", type=int, default=2000)
    ap.add_argument("--out", default="benchmarks/out/store.json")
    ap.add_argument("--records", help="records dir (default: $STELLARIS_RECORDS_DIR or "
                    "benchmarks/records)")
    ap.add_argument("--no-record", action="store_true", help="write no record")
    args = ap.parse_args()
    results = {}
    with EmbeddedRedis() as server:
        store = Store(server.url)
        for hidden in (64, 256):
            bench(store, hidden, 100, "-warmup")  # warm-up: scripts loaded, pools filled
            results[f"mlp{hidden}x{hidden}"] = bench(store, hidden, args.iters)
        store.close()
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(results, indent=2))
    print("| policy | blob | fetch p50/p99 (us) | raw GET p50/p99 | fetch ratio | publish p50/p99 | raw SET p50/p99 | publish ratio | unchanged check p50 vs small GET |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name, r in results.items():
        print(
            f"| {name} | {r['blob_bytes'] / 1024:.0f} KiB | {r['fetch_p50_us']:.0f} / {r['fetch_p99_us']:.0f} | "
            f"{r['raw_get_p50_us']:.0f} / {r['raw_get_p99_us']:.0f} | **{r['fetch_ratio_p50']:.2f}x** | "
            f"{r['publish_p50_us']:.0f} / {r['publish_p99_us']:.0f} | {r['raw_set_p50_us']:.0f} / {r['raw_set_p99_us']:.0f} | "
            f"{r['publish_ratio_p50']:.2f}x | {r['check_p50_us']:.0f} vs {r['raw_check_p50_us']:.0f} |"
        )
    if not args.no_record:
        print(write_record("store", command_line("benchmarks/store_bench.py", None),
                           {"iters": args.iters},
                           rows=[{"policy": name, **r} for name, r in results.items()],
                           records=args.records))


if __name__ == "__main__":
    main()
