"""compare.py's statistics: a run's curve reduced to its key points, and the key points of
several runs reduced to what the report says (times, env steps and $ to each target, returns
at fixed budgets, ratios between systems with bootstrap intervals, bounds where a run missed).

A run, as everything here takes it, is a dict with ``seed``, ``variant``, ``system``,
``facts`` (its summary's figures: wall time, env steps, $, load, ...) and ``points`` (the
curve's key points: the first row reaching each target, the return at fixed budgets of wall
clock and of env steps). Runs read from run folders (:func:`collect`) also keep ``dir``,
``curve``, ``summary`` and ``bench``; runs read from records have only what the record holds,
and every statistic here is computed from that alone, so the results page and compare.py's
own report agree.
"""

from __future__ import annotations

import json
import math
import random
from pathlib import Path
from typing import Any

from benchmarks._common import read_curve, read_summary

SYSTEMS = ("stellaris", "sync", "rllib", "lean", "lean2", "rllib-norm", "rllib-appo", "sb3",
           "sb3-ours", "sf2")
LABELS = {"stellaris": "Stellaris (async)", "sync": "our sync PPO", "rllib": "RLlib 2.60 PPO",
          "lean": "lean PPO", "lean2": "lean PPO, two cores",
          "rllib-norm": "RLlib 2.60 PPO, reward norm + KL", "rllib-appo": "RLlib 2.60 APPO",
          "sb3": "SB3 PPO (zoo settings)", "sb3-ours": "SB3 PPO (our settings)",
          "sf2": "Sample Factory 2 (MuJoCo v4)"}
# The cores each system's processes use on the 2-core machine: the lean PPO is one process with
# one torch thread; every other system spreads over both (sampling processes, env runners,
# Stellaris' functions).
CORES = {"stellaris": 2, "sync": 2, "rllib": 2, "lean": 1, "lean2": 2, "rllib-norm": 2,
         "rllib-appo": 2, "sb3": 2, "sb3-ours": 2, "sf2": 2}
TARGETS = {"Hopper-v5": [1000, 1500, 2000], "Walker2d-v5": [1000, 2000, 3000],
           "HalfCheetah-v5": [1000, 2000, 3000], "Humanoid-v5": [300, 500, 700],
           "CartPole-v1": [100, 200, 400]}
QUICK_TARGETS = {"Hopper-v5": [250, 500]}  # reachable in a short budget: ratios need a target
GRACE_S = 5.0  # a run's last row may land a few seconds after its budget (shutdown)
RETURN_POINTS_MIN = (1, 2, 3, 5, 10, 15, 20, 30)
RETURN_POINTS_STEPS = (100_000, 200_000, 500_000, 1_000_000, 2_000_000, 5_000_000)


def display(variant: str) -> str:
    """A variant as a reader sees it: its system's label, then its tags
    (``lean PPO, two cores [hyper.ent_coef=0.003]``)."""
    system, _, tags = variant.partition("[")
    return LABELS.get(system, system) + (f" [{tags.rstrip(']')}]" if tags else "")


def default_targets(env: str, minutes: float) -> list[float]:
    """The returns a report times an env's runs to: its targets, and lower ones that a short
    budget reaches (a ratio needs a target both systems reached)."""
    return sorted(set(TARGETS.get(env, [1000, 2000])
                      + (QUICK_TARGETS.get(env, []) if minutes < 5 else [])))


def key(x: float) -> str:
    """A target or budget as a record's JSON key (``2000``, ``0.13``)."""
    return f"{x:g}"


# -- a curve's key points ----------------------------------------------------------------------
def return_at(curve: dict[str, list[float]], t: float) -> float | None:
    """The return logged at wall-clock ``t`` (``None`` when the run ended before ``t``)."""
    if not curve["wall_s"] or curve["wall_s"][-1] < t - GRACE_S:
        return None
    best = None
    for w, r in zip(curve["wall_s"], curve["episodic_return"], strict=True):
        if w <= t + GRACE_S:
            best = r
    return best


def return_at_steps(curve: dict[str, list[float]], steps: float) -> float | None:
    """The return logged at ``steps`` env steps (the last row at or below them); ``None`` when
    the run stopped short of them."""
    if not curve["env_steps"] or curve["env_steps"][-1] < 0.99 * steps:
        return None
    rows = [r for n, r in zip(curve["env_steps"], curve["episodic_return"], strict=True)
            if n <= steps]
    return rows[-1] if rows else None


def first_reaching(curve: dict[str, list[float]], target: float) -> int | None:
    """Index of the first logged row whose return reaches ``target`` (None: never)."""
    return next((i for i, r in enumerate(curve["episodic_return"]) if r >= target), None)


def time_to(curve: dict[str, list[float]], target: float,
            cost: str = "cost_usd") -> tuple[float, float] | None:
    """(wall s, $) at the first row reaching ``target``; ``cost`` names the $ column (e.g.
    ``cost_usd_dedicated_vcpu``; a curve without it has only the one bill)."""
    i = first_reaching(curve, target)
    return None if i is None else (curve["wall_s"][i], (curve.get(cost) or curve["cost_usd"])[i])


def steps_to(curve: dict[str, list[float]], target: float) -> float | None:
    """Env steps at the first row reaching ``target``: sample efficiency, which the machine's
    load does not enter (time = steps / throughput)."""
    i = first_reaching(curve, target)
    return None if i is None else curve["env_steps"][i]


def _at_first(curve: dict[str, list[float]], target: float, column: str) -> float | None:
    """``column``'s value at the first row reaching ``target``; None where the return never
    got there or the run logs no value then (a missing column, NaN)."""
    i = first_reaching(curve, target)
    values = curve.get(column) or []
    if i is None or i >= len(values) or math.isnan(values[i]):
        return None
    return values[i]


def entropy_at(curve: dict[str, list[float]], target: float) -> float | None:
    """The policy's entropy (nats, its last update's) at the first row reaching ``target``:
    how narrow a system's policy had become for the same progress; stale data narrows it
    faster per unit of return. None: not reached, or a run that logs no entropy."""
    return _at_first(curve, target, "entropy")


def reward_per_step_at(curve: dict[str, list[float]], target: float) -> float | None:
    """Reward per env step (mean return / mean episode length, the same last 100 episodes) at
    the first row reaching ``target``. In a locomotion task it is the gait's speed plus the
    alive bonus: the same return from shorter, faster episodes is a gait that falls, and on a
    plateau it climbs while the return stalls — a symptom, not a forecast. None: not reached,
    or no length logged."""
    ret = _at_first(curve, target, "episodic_return")
    length = _at_first(curve, target, "episodic_length")
    return ret / length if ret is not None and length else None  # length 0: none logged


def key_points(curve: dict[str, list[float]], targets: list[float],
               budget_min: float) -> dict[str, Any]:
    """What the report reads off a curve: the first row reaching each target (wall s, env
    steps, $, $ at dedicated vCPUs, entropy, reward per step), the return at fixed wall-clock
    budgets (and ``budget_min``) and at fixed env-step counts, the best and the last row."""
    to: dict[str, dict[str, float | None] | None] = {}
    for tgt in targets:
        i = first_reaching(curve, tgt)
        to[key(tgt)] = None if i is None else {
            "wall_s": curve["wall_s"][i], "env_steps": curve["env_steps"][i],
            "usd": curve["cost_usd"][i],
            "usd_dedicated": (curve.get("cost_usd_dedicated_vcpu") or curve["cost_usd"])[i],
            "entropy": entropy_at(curve, tgt), "reward_per_step": reward_per_step_at(curve, tgt)}
    minutes = sorted(set(RETURN_POINTS_MIN) | {budget_min})
    at_min = {key(p): return_at(curve, p * 60) for p in minutes}
    at_steps = {key(n): return_at_steps(curve, n) for n in RETURN_POINTS_STEPS}
    rets = curve["episodic_return"]
    return {
        "to_target": to,
        "return_at_min": {k: v for k, v in at_min.items() if v is not None},
        "return_at_steps": {k: v for k, v in at_steps.items() if v is not None},
        "best_return": max(rets) if rets else None,
        "last": {"wall_s": curve["wall_s"][-1], "env_steps": curve["env_steps"][-1],
                 "usd": curve["cost_usd"][-1], "return": rets[-1]} if rets else None,
    }


def cpu_wait_fraction(summary: dict[str, Any]) -> float | None:
    """Of a run's billed function time, the share its functions spent waiting for a core of
    the shared host (the local runtime measures it); ``None`` when nothing measured it."""
    comps = ((summary.get("cost") or {}).get("functions") or {}).values()
    billed = sum(float(c.get("billed_ms") or 0) for c in comps if "cpu_wait_ms" in c)
    wait = sum(float(c.get("cpu_wait_ms") or 0) for c in comps)
    return wait / billed if billed > 0 and wait > 0 else None


def staleness(summary: dict[str, Any]) -> dict[str, dict[str, float]]:
    """Per kind (``traj``, ``grad``): the mean (exact where the run reports it: a refreshed
    rollout is a fraction of a version old, the histogram counts whole versions), the
    largest and how many were counted."""
    out = {}
    hists = summary.get("staleness_hist") or {}
    exact = summary.get("staleness_mean") or {}
    for kind, hist in hists.items():
        counts = {int(k): int(n) for k, n in hist.items()}
        n = sum(counts.values())
        if n:
            mean = exact.get(kind, sum(k * c for k, c in counts.items()) / n)
            out[kind] = {"mean": float(mean), "max": max(counts), "n": n}
    return out


FOOTPRINT_KEYS = {"orchestrator": ("instance", "baseline_vcpu", "memory_mib", "vcpu_mean",
                                   "peak_rss_mib"),
                  "redis": ("instance", "baseline_vcpu", "memory_mib", "baseline_mbps",
                            "vcpu_mean", "peak_memory_mib", "net_mbps_mean")}


def facts(summary: dict[str, Any], bench: dict[str, Any]) -> dict[str, Any]:
    """A run's summary and ``bench.json`` reduced to what the report reads."""
    foot = summary.get("footprint") or {}
    footprint = {part: {k: foot[part].get(k) for k in keys}
                 for part, keys in FOOTPRINT_KEYS.items() if foot.get(part)}
    if foot:
        footprint["fits"] = bool(foot.get("fits"))
    return {"wall_s": float(summary.get("wall_s") or 0.0),
            "env_steps": int(summary.get("env_steps") or 0),
            "sps": float(summary.get("sps") or 0.0), "mean_return": summary.get("mean_return"),
            "usd": float((summary.get("cost") or {}).get("total_usd") or 0.0),
            "minutes": bench.get("minutes"), "rc": bench.get("rc"),
            "target_reached": bool(summary.get("target_reached")),
            "stop_at_return": bench.get("stop_at_return"),
            "load_before": bench.get("load_before"), "load_after": bench.get("load_after"),
            "cpu_wait_frac": cpu_wait_fraction(summary), "staleness": staleness(summary),
            "footprint": footprint or None, "cores": bench.get("cores"),
            "clock_offset_s": bench.get("clock_offset_s")}


def outcome(curve: dict[str, list[float]], summary: dict[str, Any], bench: dict[str, Any],
            targets: list[float], budget_min: float) -> dict[str, Any]:
    """A run's ``facts`` and ``points`` (see the module's docstring), on the clock from its
    process's start (:func:`from_process_start`)."""
    curve, summary = from_process_start(curve, summary, bench)
    return {"facts": facts(summary, bench), "points": key_points(curve, targets, budget_min)}


def from_process_start(curve: dict[str, list[float]], summary: dict[str, Any],
                       bench: dict[str, Any]) -> tuple[dict[str, list[float]], dict[str, Any]]:
    """The curve and summary of a run whose own clock started ``clock_offset_s`` after its
    process (``bench.json``: compare.py measured it; Stellaris' starts once its runtime is up),
    moved onto the clock from the process's start: every wall time later by the offset, every
    bill higher by the always-on parts' price for it (the orchestrator VM and Redis, or a
    baseline's machine, at the rate the run paid them). A run without an offset is returned as
    it is (the baselines' clocks start at their process's start)."""
    offset = float(bench.get("clock_offset_s") or 0.0)
    wall = float(summary.get("wall_s") or 0.0)
    if offset <= 0 or wall <= 0:
        return curve, summary
    fixed = (summary.get("cost") or {}).get("fixed") or {}
    usd_per_s = sum(v for k, v in fixed.items() if k != "orchestrator_burst") / wall
    extra = offset * usd_per_s
    moved = {k: list(v) for k, v in curve.items()}
    moved["wall_s"] = [w + offset for w in curve["wall_s"]]
    for col in ("cost_usd", "cost_usd_dedicated_vcpu"):
        if col in moved:
            moved[col] = [u + extra for u in curve[col]]
    cost = dict(summary.get("cost") or {})
    if "total_usd" in cost:
        cost["total_usd"] = float(cost["total_usd"]) + extra
    return moved, {**summary, "wall_s": wall + offset, "cost": cost}


# -- run folders -------------------------------------------------------------------------------
def collect(root: Path, targets: list[float], budget_min: float
            ) -> dict[str, list[dict[str, Any]]]:
    """variant -> runs found under one env/budget folder (``<out>/<env>-<budget>min``)."""
    out: dict[str, list[dict[str, Any]]] = {}
    if not root.exists():
        return out
    for vdir in sorted(p for p in root.iterdir() if p.is_dir() and p.name != "figures"):
        for sdir in sorted(vdir.glob("seed*")):
            bench_file = sdir / "bench.json"
            bench = json.loads(bench_file.read_text()) if bench_file.exists() else {}
            summary = read_summary(sdir)
            if not summary:
                continue
            raw = read_curve(sdir)
            curve, _ = from_process_start(raw, summary, bench)  # for the figures
            variant = bench.get("variant", vdir.name)
            out.setdefault(variant, []).append({
                "dir": sdir, "seed": int(sdir.name[4:]), "variant": variant,
                "system": bench.get("system") or variant.partition("[")[0],
                "curve": curve, "summary": summary, "bench": bench,
                **outcome(raw, summary, bench, targets, budget_min)})  # moves it itself
    return out


def collect_pooled(roots: list[Path], targets: list[float], budget_min: float,
                   by_hyper: bool = False) -> dict[str, list[dict[str, Any]]]:
    """:func:`collect` over several env/budget folders (e.g. earlier ``--out`` folders), each
    variant's runs in one list. A seed found in two folders counts twice: an async run is not
    reproducible from its seed (which version each actor samples with depends on timing), so
    each run is its own draw. ``by_hyper``: each run under :func:`label_by_hyper`'s name."""
    out: dict[str, list[dict[str, Any]]] = {}
    for root in roots:
        for variant, runs in collect(root, targets, budget_min).items():
            for run in runs:
                name = label_by_hyper(variant, run) if by_hyper else variant
                out.setdefault(name, []).append(run)
    return out


def default_hyper(system: str, env_id: str) -> dict[str, Any]:
    """What ``system`` runs with on ``env_id`` when given no hyper-parameters today: RLlib's
    matched baseline for RLlib, PPOHyper's defaults (the env's own included) for ours."""
    from benchmarks.rllib_ppo import baseline_hyper  # imports torch: only when relabelling
    from functions.hyper import env_hyper

    chosen = baseline_hyper(env_id) if system.startswith("rllib") else env_hyper(env_id)
    return chosen.model_dump()


# PPOHyper fields added after runs were recorded, with the value that is exactly what every run
# before the field did (the code had no other way then): such a run is labelled as if it had
# recorded that value, not ``unrecorded``.
BEHAVIOUR_BEFORE_FIELD: dict[str, Any] = {"norm_adv_scope": "minibatch"}


def label_by_hyper(variant: str, run: dict[str, Any]) -> str:
    """``variant`` renamed for the hyper-parameters its run recorded (``config.json``): the
    system, its tags that are not hyper-parameters, and each PPOHyper field that differs from
    what the system runs with by default today (``hyper.target_kl=null``). Runs of the same
    settings then pool whatever flags, or defaults, named them then; a field the run did not
    record (it predates it) is ``unrecorded``, so such a run never passes for today's defaults
    — unless :data:`BEHAVIOUR_BEFORE_FIELD` says what every run before the field did. A run
    without a recorded ``hyper`` keeps its name."""
    cfg = run["dir"] / "config.json"
    hyper = json.loads(cfg.read_text()).get("hyper") if cfg.exists() else None
    if not isinstance(hyper, dict):
        return variant
    name, _, rest = variant.partition("[")
    system = run["bench"].get("system") or name
    tags = [t for t in rest.rstrip("]").split(",") if t and not t.startswith("hyper.")]
    for field, default in default_hyper(system, run["bench"].get("env", "Hopper-v5")).items():
        recorded = field in hyper or field in BEHAVIOUR_BEFORE_FIELD
        ran_with = hyper[field] if field in hyper else BEHAVIOUR_BEFORE_FIELD.get(field)
        if not recorded or ran_with != default:
            tags.append(f"hyper.{field}={json.dumps(ran_with) if recorded else 'unrecorded'}")
    return f"{system}[{','.join(tags)}]" if tags else system


# -- statistics over runs ----------------------------------------------------------------------
def _resample_means(xs: list[float], resamples: int, seed: int) -> Any:
    """Means of ``resamples`` bootstrap resamples of ``xs``. The indices come from Python's
    Mersenne Twister, whose ``random()`` stream is fixed across versions, so a regenerated
    results page is identical on any machine."""
    import numpy as np

    rng = random.Random(seed)
    n = len(xs)
    u = np.fromiter((rng.random() for _ in range(resamples * n)), float, resamples * n)
    idx = (u * n).astype(int).reshape(resamples, n)
    return np.asarray(xs, dtype=float)[idx].mean(axis=1)


def bootstrap_ratio_ci(num: list[float], den: list[float], level: float = 0.95,
                       resamples: int = 10_000, seed: int = 0) -> tuple[float, float] | None:
    """Percentile bootstrap interval of ``mean(num) / mean(den)``, resampling each system's
    seeds independently (their runs share a seed number, not an outcome)."""
    import numpy as np

    if len(num) < 2 or len(den) < 2:
        return None
    ratios = _resample_means(num, resamples, seed) / np.maximum(
        _resample_means(den, resamples, seed + 1), 1e-9)
    tail = (1.0 - level) / 2.0
    return float(np.quantile(ratios, tail)), float(np.quantile(ratios, 1.0 - tail))


def bootstrap_diff_ci(a: list[float], b: list[float], level: float = 0.95,
                      resamples: int = 10_000, seed: int = 0) -> tuple[float, float]:
    """Percentile bootstrap interval of ``mean(a) - mean(b)``, each resampled on its own."""
    import numpy as np

    diffs = _resample_means(a, resamples, seed) - _resample_means(b, resamples, seed + 1)
    tail = (1.0 - level) / 2.0
    return float(np.quantile(diffs, tail)), float(np.quantile(diffs, 1.0 - tail))


def bootstrap_mean_ci(xs: list[float], level: float = 0.95, resamples: int = 10_000,
                      seed: int = 0) -> tuple[float, float] | None:
    """Percentile bootstrap interval of ``mean(xs)`` over the runs (None under two)."""
    import numpy as np

    if len(xs) < 2:
        return None
    means = _resample_means(xs, resamples, seed)
    tail = (1.0 - level) / 2.0
    return float(np.quantile(means, tail)), float(np.quantile(means, 1.0 - tail))


def budget_points(minutes: float, longest: float) -> list[float]:
    """The fixed budgets (2, 5, 10 min) a report can read off runs as long as ``longest``."""
    points = [p for p in (1, 2, 5, 10) if p <= longest + 1e-9 and (p >= 2 or minutes < 5)]
    return sorted(set(points) | {minutes})


def run_minutes(run: dict[str, Any], default: float) -> float:
    return float(run["facts"].get("minutes") or default)


def censored_at(run: dict[str, Any]) -> tuple[float, float]:
    """(wall s, $) where a run stopped learning: the end of its budget on the process-start
    clock (its clock's offset plus its minutes), or its end if sooner, with its bill pro rata.
    The shutdown after the budget is no time toward a target, and counting it would inflate
    a bound that must never flatter the other side."""
    f = run["facts"]
    wall, usd = float(f["wall_s"]), float(f["usd"])
    minutes = f.get("minutes") or f.get("budget_min")
    if not minutes or wall <= 0:
        return wall, usd
    end = float(minutes) * 60.0 + float(f.get("clock_offset_s") or 0.0)
    return (wall, usd) if wall <= end else (end, usd * end / wall)


def seed_outcome(run: dict[str, Any], tgt: float) -> tuple[float, float, float | None, bool]:
    """(wall s, $, env steps, reached) of one run to ``tgt``; a run that never got there gives
    its length and bill up to the end of its budget (:func:`censored_at`; a bound: it would
    have needed more) and its last env steps."""
    hit = run["points"]["to_target"].get(key(tgt))
    if hit is not None:
        return hit["wall_s"], hit["usd"], hit["env_steps"], True
    last = run["points"].get("last") or {}
    wall, usd = censored_at(run)
    return wall, usd, last.get("env_steps"), False


def stats(runs: list[dict[str, Any]], minutes: float, targets: list[float],
          points: list[float] | None = None) -> dict[str, Any]:
    points = points or budget_points(minutes, minutes)
    out: dict[str, Any] = {"n": len(runs), "points": points}
    out["ret_at"] = {p: [r for r in (x["points"]["return_at_min"].get(key(p)) for x in runs)
                         if r is not None] for p in points}
    out["best"] = [x["points"]["best_return"] for x in runs
                   if x["points"].get("best_return") is not None]
    out["sps"] = [x["facts"]["sps"] for x in runs]
    out["usd"] = [x["facts"]["usd"] for x in runs]
    out["wall"] = [x["facts"]["wall_s"] for x in runs]
    out["load"] = [x["facts"]["load_before"] for x in runs
                   if x["facts"].get("load_before") is not None]
    out["wait_frac"] = [x["facts"]["cpu_wait_frac"] for x in runs
                        if x["facts"].get("cpu_wait_frac") is not None]
    out["footprint"] = [x["facts"]["footprint"] for x in runs if x["facts"].get("footprint")]
    out["to"] = {}
    for tgt in targets:
        hits = [x["points"]["to_target"].get(key(tgt)) for x in runs]
        got = [h for h in hits if h is not None]
        out["to"][tgt] = {
            "reached": len(got), "n": len(runs), "t": [h["wall_s"] for h in got],
            "usd": [h["usd"] for h in got], "usd_dedicated": [h["usd_dedicated"] for h in got],
            "steps": [h["env_steps"] for h in got],
            "entropy": [h["entropy"] for h in got if h.get("entropy") is not None],
            "per_step": [h["reward_per_step"] for h in got
                         if h.get("reward_per_step") is not None]}
    return out


def _mean(xs: list[float]) -> float:
    return sum(xs) / len(xs)


def speedup(a: dict[str, Any], b: dict[str, Any], targets: list[float]) -> tuple[
        float | None, float | None, float | None]:
    """(target, time ratio b/a, $ ratio a/b) on the highest target both reached in all seeds."""
    for tgt in sorted(targets, reverse=True):
        ta, tb = a["to"][tgt], b["to"][tgt]
        if ta["n"] and tb["n"] and ta["reached"] == ta["n"] and tb["reached"] == tb["n"]:
            return (tgt, _mean(tb["t"]) / max(_mean(ta["t"]), 1e-9),
                    _mean(ta["usd"]) / max(_mean(tb["usd"]), 1e-12))
    return None, None, None


def speedup_ci(a: dict[str, Any], b: dict[str, Any], tgt: float) -> dict[str, Any]:
    """Bootstrap intervals (over seeds) of :func:`speedup`'s time and $ ratios on ``tgt``, and
    the ratio of mean env steps to it (``b`` over ``a``; above 1: ``a`` needs fewer)."""
    ta, tb = a["to"][tgt], b["to"][tgt]
    out: dict[str, Any] = {"time": bootstrap_ratio_ci(tb["t"], ta["t"]),
                           "usd": bootstrap_ratio_ci(ta["usd"], tb["usd"])}
    if ta["steps"] and tb["steps"]:
        out["steps"] = _mean(tb["steps"]) / max(_mean(ta["steps"]), 1e-9)
    return out


def censored_speedup(a: dict[str, Any], b: dict[str, Any], targets: list[float],
                     runs_b: list[dict[str, Any]], minutes: float,
                     ) -> tuple[float, float, float, float] | None:
    """Bounds on the highest target ``a`` reached in every seed and ``b`` did not (in some or
    all seeds): a seed of ``b`` that never got there counts its run to the end of its budget
    (time and $, :func:`censored_at`), so ``b``'s mean is at least that. Returns (target,
    time ratio >=, $ ratio <=, ``b``'s shortest run in minutes)."""
    for tgt in sorted(targets, reverse=True):
        ta, tb = a["to"][tgt], b["to"][tgt]
        if not (ta["n"] and ta["reached"] == ta["n"]):
            continue
        if not runs_b or tb["reached"] == tb["n"]:
            return None  # b got there in every seed: the uncensored ratio above covers it
        outcomes = [seed_outcome(r, tgt) for r in runs_b]
        mb, ub = _mean([o[0] for o in outcomes]), _mean([o[1] for o in outcomes])
        return tgt, mb / max(_mean(ta["t"]), 1e-9), _mean(ta["usd"]) / max(ub, 1e-12), min(
            run_minutes(r, minutes) for r in runs_b)
    return None
