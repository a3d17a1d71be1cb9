"""compare.py's report: the Markdown text of one env and budget — returns at fixed budgets,
time, $ and env steps to each target, the per-seed table, each system's ratios against the
baselines with bootstrap intervals and bounds where a run missed — from runs as
:mod:`benchmarks.compare_analysis` describes them (run folders or records alike)."""

from __future__ import annotations

import math
import re
import statistics
from pathlib import Path
from typing import Any

from benchmarks.compare_analysis import (
    LABELS,
    SYSTEMS,
    bootstrap_ratio_ci,
    budget_points,
    censored_speedup,
    display,
    run_minutes,
    seed_outcome,
    speedup,
    speedup_ci,
    stats,
)
from benchmarks.records import BASELINE_SYSTEMS

NAMES = {"rllib": "RLlib", "lean": "lean PPO", "sync": "sync PPO", "lean2": "lean PPO, two cores",
         "rllib-norm": "RLlib PPO (norm)", "rllib-appo": "RLlib APPO", "sb3": "SB3 PPO",
         "sb3-ours": "SB3 PPO (ours)", "sf2": "Sample Factory 2"}
BASELINES = BASELINE_SYSTEMS


def md_table(head: list[str], rows: list[list[str]]) -> list[str]:
    """A Markdown table's lines, then a blank one."""
    return ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head),
            *("| " + " | ".join(r) + " |" for r in rows), ""]


def ms(xs: list[float], fmt: str = "{:.0f}") -> str:
    """Mean ± sd (sample sd) of ``xs``; the value alone for one, "-" for none."""
    if not xs:
        return "-"
    m = sum(xs) / len(xs)
    if len(xs) == 1:
        return fmt.format(m)
    sd = math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - 1))
    return f"{fmt.format(m)} ± {fmt.format(sd)}"


def _range(xs: list[float], fmt: str = "{:.0f}") -> str:
    lo, hi = min(xs), max(xs)
    return fmt.format(lo) if fmt.format(lo) == fmt.format(hi) else f"{fmt.format(lo)}–{fmt.format(hi)}"


def order_of(variants: list[str]) -> list[str]:
    """The report's order: the four systems, then every other variant by name."""
    return [s for s in SYSTEMS if s in variants] + sorted(v for v in variants if v not in SYSTEMS)


def _at_target_table(caption: str, name: str, key: str, st: dict[str, Any], order: list[str],
                     targets: list[float]) -> list[str]:
    """A caption and a table of one per-target statistic (``st[v]["to"][t][key]``, mean ± sd
    over the runs) for each system."""
    return [caption, ""] + md_table(
        ["system"] + [f"{name} at {t:g}" for t in targets],
        [[display(v)] + [ms(st[v]["to"][t][key], "{:.2f}") for t in targets]
         for v in order])


def per_seed_table(data: dict[str, list[dict[str, Any]]], order: list[str],
                   tgt: float) -> list[str]:
    """One row per seed: every system's time, $ and env steps to ``tgt`` on it, and each of
    our systems' (Stellaris variants, sync PPO) speed and $ ratios against RLlib and the lean
    PPO on that seed, then the median seed. Pooled folders can hold a seed twice: the i-th run
    of a seed pairs with the i-th of each other system. A miss counts its run to its budget's
    end, so its ratios are bounds (<=, >=) and the median takes them at their bound."""
    by_seed: dict[str, dict[int, list[dict[str, Any]]]] = {}
    for v in order:
        for r in data[v]:
            by_seed.setdefault(v, {}).setdefault(r["seed"], []).append(r)
    baselines = [o for o in ("rllib", "lean") if o in data]
    ours = [v for v in order if v not in baselines]
    if not baselines or not ours:
        return []

    def nth(variant: str, seed: int, i: int) -> dict[str, Any] | None:
        runs = by_seed.get(variant, {}).get(seed) or []
        return runs[i] if i < len(runs) else None

    def cell(run: dict[str, Any] | None) -> str:
        if run is None:
            return "-"
        t, usd, steps, ok = seed_outcome(run, tgt)
        k = f"{steps / 1000:,.0f}k" if steps is not None else "?"
        if ok:
            return f"{t:.0f} s, ${usd:.5f} ({k})"
        best = run["points"].get("best_return")
        return f"missed (best {float('nan') if best is None else best:,.0f}; {k}): " \
               f"{t:.0f} s, ${usd:.5f}"

    def ratio(mine: dict[str, Any] | None, theirs: dict[str, Any] | None,
              column: tuple[list[float], list[float]]) -> str:
        if mine is None or theirs is None:
            return "-"
        tm, um, _, ok_m = seed_outcome(mine, tgt)
        tt, ut, _, ok_t = seed_outcome(theirs, tgt)
        if not (ok_m or ok_t):
            return "n/a"
        speed, usd = tt / max(tm, 1e-9), um / max(ut, 1e-12)
        column[0].append(speed)
        column[1].append(usd)
        if ok_m and ok_t:
            return f"{speed:.2f}x / {usd:.2f}x"
        return f"<= {speed:.2f}x / >= {usd:.2f}x" if not ok_m else f">= {speed:.2f}x / <= {usd:.2f}x"

    pairs = [(m, o) for m in ours for o in baselines]
    head = ["seed"] + [display(v) for v in order] + [
        f"{display(m)} vs {LABELS[o]}: time / $" for m, o in pairs]
    columns: dict[tuple[str, str], tuple[list[float], list[float]]] = {pr: ([], []) for pr in pairs}
    rows = []
    for seed in sorted({s for v in order for s in by_seed.get(v, {})}):
        repeats = max(len(by_seed.get(v, {}).get(seed) or []) for v in order)
        for i in range(repeats):
            runs = {v: nth(v, seed, i) for v in order}
            rows.append([f"{seed}" + (f" ({i + 1})" if repeats > 1 else "")]
                        + [cell(runs[v]) for v in order]
                        + [ratio(runs[m], runs[o], columns[(m, o)]) for m, o in pairs])
    median_row = ["median seed"] + [""] * len(order) + [
        f"{statistics.median(t):.2f}x / {statistics.median(u):.2f}x" if t else "-"
        for t, u in columns.values()]
    return [f"Per seed, to {tgt:g} (time, $ and k env steps; then our systems' speed and $ "
            "against each baseline on that seed; a run that missed counts its run to its "
            "budget's end, so its ratios are bounds and the median takes them at their bound):",
            "",
            *md_table(head, [*rows, median_row])]


def stale_summary(runs: list[dict[str, Any]]) -> str:
    """Staleness over runs: each kind's mean weighted by each run's count, and its largest."""
    parts = []
    for kind in ("traj", "grad"):
        per_run = [r["facts"]["staleness"][kind] for r in runs
                   if kind in (r["facts"].get("staleness") or {})]
        n = sum(s["n"] for s in per_run)
        if n:
            mean = sum(s["mean"] * s["n"] for s in per_run) / n
            parts.append(f"{kind} mean {mean:.2f}, max {max(s['max'] for s in per_run)}")
    return "; ".join(parts) or "-"


def ratio_lines(st: dict[str, Any], data: dict[str, list[dict[str, Any]]], base: str,
                prefix: str, who: str, others: tuple[str, ...], targets: list[float],
                minutes: float) -> list[str]:
    """The ``speedup vs X`` lines of system ``base`` (``prefix`` before each, ``who`` in the
    prose) against each of ``others`` that ran: the highest target both reached in every
    seed, its bootstrap interval, and the censored bounds where one side missed."""
    lines: list[str] = []
    for other in (o for o in others if o in st):
        name = NAMES[other]
        tgt, ratio, usd = speedup(st[base], st[other], targets)
        if tgt is None:
            lines += [f"{prefix}speedup vs {name}: n/a (no target reached by both in every "
                      "seed)", ""]
            continue
        top = max(targets)
        note = "" if tgt == top else (
            f" — on return {tgt:g}, the highest target both reached in every seed "
            f"({top:g} was not)")
        ci = speedup_ci(st[base], st[other], tgt)
        spread = ""
        if ci["time"] is not None:
            spread = (f" (95% bootstrap interval over seeds: time {ci['time'][0]:.2f}–"
                      f"{ci['time'][1]:.2f}x, $ {ci['usd'][0]:.2f}–{ci['usd'][1]:.2f}x)")
        if "steps" in ci:
            spread += (f"; env steps to {tgt:g}: {name} needs {ci['steps']:.2f}x "
                       f"{who}'s (above 1: {who} learns more per env step)")
        # Means over each side's own seeds: say so when those differ (a pooled report's
        # ablation ran on some of the baseline's seeds), as the per-seed table pairs them.
        mine, theirs = sorted(r["seed"] for r in data[base]), sorted(r["seed"] for r in data[other])
        if mine != theirs:
            spread += (f"; over different seeds ({who} {len(mine)} runs, {name} {len(theirs)}: "
                       "the per-seed table pairs them)")
        lines += [f"{prefix}speedup vs {name}: {ratio:.1f}x{note}; $ vs {name}: {usd:.2f}x"
                  + spread, ""]
        lines += dedicated_line(st[base], st[other], tgt, prefix, who, name)
        upper = censored_speedup(st[other], st[base], targets, data[base], minutes)
        if upper is not None and upper[0] > tgt:
            utgt, uratio, uusd, umin = upper
            got = st[base]["to"][utgt]
            lines += [
                f"{prefix}speedup vs {name} on return {utgt:g}: <= {1 / uratio:.2f}x (censored: "
                f"{who} reached {utgt:g} in {got['reached']} of {got['n']} {umin:g}-minute "
                f"runs, {name} in every one; a {who} run that never got there counts its "
                f"length and cost to its budget's end, which is less than it would have "
                f"needed); $ vs {name}: >= {1 / uusd:.2f}x", ""]
        bound = censored_speedup(st[base], st[other], targets, data[other], minutes)
        if bound is not None:
            btgt, bratio, busd, bmin = bound
            reached = st[other]["to"][btgt]
            lines += [
                f"{prefix}speedup vs {name} on return {btgt:g}: >= {bratio:.1f}x (censored: "
                f"{name} reached {btgt:g} in {reached['reached']} of {reached['n']} "
                f"{bmin:g}-minute runs; a run that never got there counts its length "
                f"and cost to its budget's end); $ vs {name}: <= {busd:.2f}x", ""]
    return lines


def dedicated_line(a: dict[str, Any], b: dict[str, Any], tgt: float, prefix: str, who: str,
                   name: str) -> list[str]:
    """``$ vs X at dedicated vCPUs``: ``a``'s functions billed without their wait for the
    shared cores (same runs, same wall clock, same fixed costs); nothing when none was measured."""
    if not a["wait_frac"]:
        return []
    ua, ub = a["to"][tgt]["usd_dedicated"], b["to"][tgt]["usd_dedicated"]
    ratio = (sum(ua) / len(ua)) / max(sum(ub) / len(ub), 1e-12)
    ci = bootstrap_ratio_ci(ua, ub)
    spread = f" (95% bootstrap interval {ci[0]:.2f}–{ci[1]:.2f}x)" if ci is not None else ""
    frac = sum(a["wait_frac"]) / len(a["wait_frac"])
    return [f"{prefix}$ vs {name} at dedicated vCPUs: {ratio:.2f}x{spread} — {who}'s functions "
            f"billed without the {100 * frac:.0f}% of their billed time they spent waiting for a "
            f"core of the shared host, which on Lambda each would have had to itself", ""]


def footprint_line(label: str, footprints: list[dict[str, Any]]) -> list[str]:
    """What the always-on parts of a system's runs used, against their priced instances."""
    if not footprints:
        return []
    orch = [f["orchestrator"] for f in footprints if f.get("orchestrator")]
    redis = [f["redis"] for f in footprints if f.get("redis")]
    vcpu = [o["vcpu_mean"] for o in orch if o.get("vcpu_mean") is not None]
    parts = []
    if orch:
        parts.append(f"orchestrator (priced as a {orch[0]['instance']}, baseline "
                     f"{orch[0]['baseline_vcpu']:g} vCPU, {orch[0]['memory_mib']:.0f} MiB): "
                     + (f"{_range(vcpu, '{:.3f}')} vCPU mean, " if vcpu else "")
                     + f"peak RSS {_range([o['peak_rss_mib'] for o in orch])} MiB")
    if redis:
        parts.append(f"Redis (a {redis[0]['instance']}, baseline {redis[0]['baseline_vcpu']:g} "
                     f"vCPU, {redis[0]['memory_mib']:.0f} MiB, {redis[0]['baseline_mbps']:g} "
                     f"Mbit/s): {_range([r['vcpu_mean'] for r in redis], '{:.3f}')} vCPU mean, "
                     f"peak {_range([r['peak_memory_mib'] for r in redis], '{:.1f}')} MiB, "
                     f"{_range([r['net_mbps_mean'] for r in redis], '{:.1f}')} Mbit/s mean")
    fits = sum(bool(f.get("fits")) for f in footprints)
    return [f"Always-on parts of the {label} runs (`footprint` in summary.json): "
            + "; ".join(parts) + f". Fit their priced instances in {fits} of {len(footprints)} runs.",
            ""]


def _preamble(data: dict[str, list[dict[str, Any]]], st: dict[str, Any], order: list[str],
              minutes: float) -> list[str]:
    """Seeds per system, load, runs longer than the budget, runs stopped at a return."""
    loads = [x for v in order for x in st[v]["load"]]
    seeds = ", ".join(f"{display(v)} {st[v]['n']}" for v in order)
    lines = [f"Seeds per system: {seeds}." + (
        f" Load average (1 min) before each run: {min(loads):.2f}–{max(loads):.2f} (median "
        f"{sorted(loads)[len(loads) // 2]:.2f})." if loads else "")]
    longer = {display(v): sorted({run_minutes(r, minutes) for r in data[v]})
              for v in order if any(run_minutes(r, minutes) != minutes for r in data[v])}
    if longer:
        lines += ["", "Runs longer than the budget (`--system-minutes`), so that their time to "
                  "the targets is measured rather than cut off: " + "; ".join(
                      f"{k} ran {', '.join(f'{m:g}' for m in ms_)} min"
                      for k, ms_ in longer.items())
                  + ". Returns at a budget are read off each run's curve at that time; "
                  "\"-\" = the run was shorter; \"$ per run\" is for the run's own length."]
    runs = [r for v in order for r in data[v]]
    stopped = sum(bool(r["facts"].get("target_reached")) for r in runs)
    if stopped:
        stops = sorted({r["facts"]["stop_at_return"] for r in runs
                        if r["facts"].get("stop_at_return") is not None})
        lines += ["", f"{stopped} runs stopped on reaching return "
                  f"{', '.join(f'{x:g}' for x in stops) or '(see config.json)'} "
                  "(`--stop-at-return`): the returns at a budget count only the runs still "
                  "going then; the time and $ to a target up to that return are unaffected."]
    return lines + [""]


def env_report(env: str, minutes: float, data: dict[str, list[dict[str, Any]]],
               targets: list[float], fig_dir: Path | None = None,
               heading: str = "###") -> list[str]:
    longest = max((run_minutes(r, minutes) for runs in data.values() for r in runs),
                  default=minutes)
    points = budget_points(minutes, longest)
    st = {v: stats(runs, minutes, targets, points) for v, runs in data.items()}
    order = order_of(list(st))
    title = f"{heading} {env}, {minutes:g}-minute budget"
    if not order:
        return [title, "", "No runs found.", ""]
    lines = [title, "", *_preamble(data, st, order, minutes)]
    lines += md_table(
        ["system"] + [f"return @ {p:g} min" for p in points]
        + ["best return", "env steps/s", "$ per run"],
        [[display(v)] + [ms(st[v]["ret_at"][p]) for p in points]
         + [ms(st[v]["best"]), ms(st[v]["sps"]), ms(st[v]["usd"], "{:.5f}")] for v in order])

    def time_cell(h: dict[str, Any]) -> str:
        if not h["reached"]:
            return f"not reached (0/{h['n']})"
        note = "" if h["reached"] == h["n"] else f" ({h['reached']}/{h['n']} seeds)"
        return f"{ms(h['t'])} s / ${ms(h['usd'], '{:.5f}')}{note}"

    def steps_cell(h: dict[str, Any]) -> str:
        note = "" if h["reached"] == h["n"] else f" ({h['reached']}/{h['n']})"
        return ms([n / 1000 for n in h["steps"]]) + note

    lines += ["Time (s) and $ to reach a return (first logged row whose mean of the last 100 "
              "episodes reaches it; mean ± sd over the seeds that reached it):", ""]
    lines += md_table(["system"] + [f"{t:g}: time / $" for t in targets],
                      [[display(v)] + [time_cell(st[v]["to"][t]) for t in targets]
                       for v in order])
    lines += ["Env steps (thousands) to reach a return, over the same seeds: how much each "
              "system learns per env step, whatever its throughput:", ""]
    lines += md_table(["system"] + [f"k steps to {t:g}" for t in targets],
                      [[display(v)] + [steps_cell(st[v]["to"][t]) for t in targets]
                       for v in order])
    lines += _at_target_table(
        "Policy entropy (nats, `losses/entropy`) when each return was first reached: how narrow "
        "each system's policy had become for the same progress (RLlib's is its learner's own "
        "figure, not on the same footing):", "entropy", "entropy", st, order, targets)
    lines += _at_target_table(
        "Reward per env step (mean return / mean episode length) when each return was first "
        "reached: in locomotion, how fast the gait is — the same return from shorter, faster "
        "episodes is a gait that falls:", "reward/step", "per_step", st, order, targets)
    # The Stellaris defaults (or the defaults on another backend) against each baseline; then
    # Stellaris's sync mode against the two baselines outside Stellaris.
    base = next((v for v in order if v == "stellaris" or re.fullmatch(
        r"stellaris\[backend=[a-z]+\]", v)), None)
    lines += per_seed_table(data, order, max(targets))
    if base is not None:
        lines += ratio_lines(st, data, base, "", "Stellaris", (*BASELINES, "sync"),
                             targets, minutes)
    if "sync" in st:
        lines += ratio_lines(st, data, "sync", "sync PPO ", "sync PPO", ("rllib", "lean"),
                             targets, minutes)
    # Each ablation of Stellaris (e.g. ``stellaris[hyper.target_kl=0.02]``) against the
    # baselines too, so a variant is judged on the same lines as the default.
    for v in (x for x in order if x.startswith("stellaris") and x != base):
        lines += ratio_lines(st, data, v, f"{v} ", v, ("rllib", "lean"), targets, minutes)
    stell = [v for v in order if v.startswith("stellaris")]
    for v in [*stell, *(["sync"] if "sync" in st else [])]:
        lines += footprint_line(display(v), st[v]["footprint"])
    if stell:
        lines += ["Staleness (Stellaris runs, versions; with a publishing learner a version "
                  "is one update): " + "; ".join(
                      f"{display(v)}: {stale_summary(data[v])}" for v in stell) + ".", ""]
    if fig_dir is not None:
        lines += [f"Figures (not committed; regenerate with `--report-only`): `{fig_dir}/"
                  f"{env}_return_vs_{{wall,env,cost}}.png`, `{env}_cost.png`, "
                  f"`{env}_staleness.png`.", ""]
    return lines


def headline_rows(data: dict[str, list[dict[str, Any]]], minutes: float,
                  target: float) -> list[dict[str, Any]]:
    """One row per system for the results page's headline table: its training path, cores,
    runs, time and $ to ``target`` (the values, for a bootstrap interval of their mean) and
    the return at each fixed budget its runs reach."""
    longest = max((run_minutes(r, minutes) for runs in data.values() for r in runs),
                  default=minutes)
    points = budget_points(minutes, longest)
    rows = []
    for v in order_of(list(data)):
        runs = data[v]
        st = stats(runs, minutes, [target], points)
        to = st["to"][target]
        paths = sorted({str(r.get("path")) for r in runs if r.get("path")})
        cores = sorted({r.get("facts", {}).get("cores") or r["cores"] for r in runs
                        if r.get("facts", {}).get("cores") or r.get("cores")})
        rows.append({
            "system": display(v), "path": "; ".join(paths) or None,
            "cores": "/".join(str(c) for c in cores) or None, "seeds": len(runs),
            "seed_values": sorted(int(r["seed"]) for r in runs),
            "time_s": {"values": to["t"], "reached": to["reached"], "n": to["n"]},
            "usd": {"values": to["usd"], "reached": to["reached"], "n": to["n"]},
            "return_at_min": {f"{p:g}": {"values": st["ret_at"][p]} for p in points}})
    return rows


def equal_core_line(env: str, data: dict[str, list[dict[str, Any]]], minutes: float,
                    target: float) -> list[str]:
    """The results page's verdict under an env's headline table: Stellaris against the fastest
    baseline to ``target`` among those whose records say they use as many cores as it does,
    and its $ to the target against RLlib PPO's. Only runs that recorded their cores count
    (older records hold the machine's, not the system's). Where a side missed the target, the
    line says by how much (the best return its runs reached) instead of a ratio."""
    def cores(v: str) -> set[int]:
        return {int(r["facts"]["cores"]) for r in data.get(v, []) if r["facts"].get("cores")}

    mine = cores("stellaris")
    if len(mine) != 1:
        return []
    st = {v: stats(data[v], minutes, [target]) for v in data}
    # every baseline's runs at any settings recorded (its own, ours, an env's), fastest wins
    rivals = [v for v in data if v.partition("[")[0] in BASELINES and cores(v) == mine]
    if not rivals:
        return []
    head = f"vs best equal-core baseline, {env}: "

    def missed(v: str) -> str:
        to = st[v]["to"][target]
        bests = [r["points"].get("best_return") for r in data[v]
                 if r["points"]["to_target"].get(f"{target:g}") is None]
        bests = [b for b in bests if b is not None]
        text = (f"{display(v)} reached {target:g} in {to['reached']} of {to['n']} "
                f"{minutes:g}-minute runs")
        if bests:
            text += (f"; the best returns of those that missed: {_range(bests, '{:,.0f}')} "
                     f"(up to {target - min(bests):,.0f} short)")
        return text

    def bound(v: str, key: str) -> float:
        """Mean time or $ (``wall_s``, ``usd``) to the target over v's runs; a run that missed
        it counts its run to the end of its budget, so the mean is a lower bound of the true
        one (censored)."""
        at = 0 if key == "wall_s" else 1  # seed_outcome's (wall s, $, ...)
        return sum(seed_outcome(r, target)[at] for r in data[v]) / len(data[v])

    def censored(v: str) -> bool:
        return st[v]["to"][target]["reached"] < st[v]["n"]

    me = st["stellaris"]["to"][target]
    if me["reached"] < st["stellaris"]["n"] or not me["reached"]:
        return [head + "no ratio: " + missed("stellaris"), ""]
    # The fastest rival by the bound: where it missed in some runs its true time is longer,
    # so the ratio is a lower bound ("at least"), never flattering us.
    best = min(rivals, key=lambda v: bound(v, "wall_s"))
    ratio = bound(best, "wall_s") / max(bound("stellaris", "wall_s"), 1e-9)
    line = f"{head}{ratio:.1f}x faster to {target:g} than {display(best)}"
    if censored(best):
        line += f" (at least: {missed(best)})"
    if "rllib" in data:
        ratio = bound("stellaris", "usd") / max(bound("rllib", "usd"), 1e-12)
        line += f"; $ {ratio:.2f}x RLlib PPO's"
        if censored("rllib"):  # RLlib's true $ is higher: ours over it is at most this
            line += f" (at most: {missed('rllib')})"
    else:
        line += "; $ vs RLlib PPO: n/a (no RLlib PPO runs)"
    return [line, ""]
