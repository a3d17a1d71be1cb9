"""How the results page shows records: provenance lines, cells, the headline table, transcribed
tables verbatim, compare.py's per-run records through its own report, and any other kind as a
generic table (so a new benchmark's records appear without a change here)."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from benchmarks.compare_analysis import bootstrap_mean_ci, default_targets
from benchmarks.compare_report import env_report, md_table
from benchmarks.report_figures import FIGURE_SERIES, ablation_name, figure_name

MAX_COLUMNS = 14  # wider than this, a generic kind gets one key/value table per record


# -- cells and provenance --------------------------------------------------------------------
def num(x: float) -> str:
    """A number at a precision that suits its size (counts whole, $ to three digits)."""
    if isinstance(x, bool):
        return "yes" if x else "no"
    if isinstance(x, int):
        return str(x)
    ax = abs(x)
    if ax >= 1000:
        return f"{x:,.0f}"
    if ax >= 100:
        return f"{x:.0f}"
    if ax >= 10:
        return f"{x:.1f}"
    if ax >= 1:
        return f"{x:.2f}"
    return "0" if x == 0 else f"{x:.3g}"


def _same(fmt_of: float, *xs: float) -> list[str]:
    """``xs`` at the precision :func:`num` picks for ``fmt_of``."""
    digits = num(fmt_of)
    decimals = len(digits.split(".")[1]) if "." in digits and "e" not in digits else 0
    if abs(fmt_of) < 1 and fmt_of != 0:
        return [f"{x:.{max(3, decimals)}f}" for x in xs]
    return [f"{x:,.{decimals}f}" for x in xs]


def cell(v: Any) -> str:
    """A record's value in a table: numbers, strings, lists and ``{"mean", "sd" or "lo" and
    "hi", "reached", "n"}`` aggregates."""
    if v is None:
        return "-"
    if isinstance(v, dict) and "mean" in v:
        if v["mean"] is None:
            out = "-"
        elif v.get("sd") is not None:
            m, sd = _same(v["mean"], v["mean"], v["sd"])
            out = f"{m} ± {sd}"
        elif v.get("lo") is not None and v.get("hi") is not None:
            m, lo, hi = _same(v["mean"], v["mean"], v["lo"], v["hi"])
            out = f"{m} [{lo}–{hi}]"
        else:
            out = num(v["mean"])
        if v.get("n") is not None and v.get("reached") is not None and v["reached"] != v["n"]:
            out += f" ({v['reached']}/{v['n']})"
        return out
    if isinstance(v, (int, float)):
        return num(v)
    if isinstance(v, list):
        return ", ".join(cell(x) for x in v) if len(v) <= 8 else f"[{len(v)} values]"
    if isinstance(v, dict):
        return ", ".join(f"{k} {cell(x)}" for k, x in v.items())
    return str(v).replace("|", "\\|").replace("\n", " ")


def short(commit: str | None, dirty: bool | None = None) -> str:
    if not commit:
        return "an unknown commit"
    return f"`{commit[:7]}`" + (" (with uncommitted changes)" if dirty else "")


def day(date: str) -> str:
    return date[:10]


def provenance(records: list[dict[str, Any]]) -> str:
    """Where a block's numbers come from: the commands, commits, dates and machines of its
    records, whether they were transcribed, and the record files."""
    def distinct(xs: list[str]) -> list[str]:
        return list(dict.fromkeys(x for x in xs if x))

    cmds = distinct([r["command"] for r in records])
    commits = distinct([short(r.get("commit"), r.get("dirty")) for r in records])
    days = sorted({day(r["date"]) for r in records})
    machines = distinct([_machine(r.get("machine") or {}) for r in records])
    files = [r["file"] for r in records]
    what = "; ".join(f"`{c}`" for c in cmds[:3]) + (f" and {len(cmds) - 3} more" if len(cmds) > 3
                                                   else "")
    text = (f"From {what} at {', '.join(commits[:4])}{' and more' if len(commits) > 4 else ''}"
            f" on {days[0]}{f' to {days[-1]}' if len(days) > 1 else ''}")
    if machines:
        text += f", on {'; '.join(machines)}"
    if any(r.get("source") == "transcribed" for r in records):
        text += (". Transcribed: an aggregate copied from the table the benchmark generated "
                 "then, not a per-run record")
    where = files[0] if len(files) == 1 else f"{len(files)} records under `{_common_dir(files)}`"
    return text + f" ({where if len(files) > 1 else f'`{where}`'})."


def _machine(m: dict[str, Any]) -> str:
    if m.get("description") or not m.get("cpu_count"):
        return m.get("description", "")
    text = f"{m['cpu_count']} cores" + (f" ({m['cpu_model']})" if m.get("cpu_model") else "")
    return text + (f", GPU {m['gpu']}" if m.get("gpu") else "")


def _common_dir(files: list[str]) -> str:
    parts = [f.split("/")[:-1] for f in files]
    common = []
    for level in zip(*parts, strict=False):
        if len(set(level)) != 1:
            break
        common.append(level[0])
    return "/".join(common) + "/"


def path_line(record: dict[str, Any]) -> list[str]:
    paths = record.get("paths")
    if paths:
        return ["Training path: " + "; ".join(f"{k}: {v or 'n/a (baseline)'}"
                                              for k, v in paths.items()) + ".", ""]
    if record.get("path"):
        return [f"Training path: {record['path']}.", ""]
    return []


# -- the headline ------------------------------------------------------------------------------
def _interval(values: dict[str, Any], fmt: str) -> str:
    """``mean [lo–hi]`` from the values of the runs that reached the target; a transcribed
    aggregate without them gives ``mean ± sd``."""
    vals = values.get("values")
    reached, n = values.get("reached"), values.get("n")
    if reached == 0:
        return f"not reached (0/{n})"
    if vals:
        mean = sum(vals) / len(vals)
        ci = bootstrap_mean_ci(vals)
        out = fmt.format(mean) + (f" [{fmt.format(ci[0])}–{fmt.format(ci[1])}]" if ci else "")
    elif values.get("mean") is not None:
        out = fmt.format(values["mean"]) + (
            f" ± {fmt.format(values['sd'])}" if values.get("sd") is not None else "")
    else:
        return "-"
    return out + (f" ({reached}/{n} runs)" if reached is not None and reached != n else "")


def _mean_sd(values: dict[str, Any]) -> str:
    vals = values.get("values")
    if vals is not None:
        if not vals:
            return "-"
        m = sum(vals) / len(vals)
        if len(vals) == 1:
            return f"{m:.0f}"
        sd = (sum((x - m) ** 2 for x in vals) / (len(vals) - 1)) ** 0.5
        return f"{m:.0f} ± {sd:.0f}"
    if values.get("mean") is None:
        return "-"
    return f"{values['mean']:.0f}" + (f" ± {values['sd']:.0f}" if values.get("sd") is not None
                                      else "")


def seed_list(seeds: list[int]) -> str:
    """``3001–3005``, ``3001–3003, 3007``: consecutive seeds as ranges."""
    spans: list[list[int]] = []
    for s in sorted(seeds):
        if spans and s == spans[-1][1] + 1:
            spans[-1][1] = s
        else:
            spans.append([s, s])
    return ", ".join(f"{a}" if a == b else f"{a}–{b}" for a, b in spans)


def headline_table(rows: list[dict[str, Any]], target: float) -> list[str]:
    budgets = sorted({float(b) for r in rows for b in r.get("return_at_min", {})})
    head = ["system", "training path", "cores", "seeds", f"time to {target:g} (s)",
            f"$ to {target:g}"] + [f"return @ {b:g} min" for b in budgets]
    body = [[r["system"], r.get("path") or "n/a (baseline)", str(r.get("cores") or "-"),
             (f"{seed_list(r['seed_values'])} ({r['seeds']})" if r.get("seed_values")
              else f"{r['seeds']} run{'' if r['seeds'] == 1 else 's'}"),
             _interval(r["time_s"], "{:.0f}"), _interval(r["usd"], "{:.5f}")]
            + [_mean_sd(r.get("return_at_min", {}).get(f"{b:g}", {})) for b in budgets]
            for r in rows]
    return md_table(head, body)


def compare_groups(records: list[dict[str, Any]]) -> dict[tuple[str, float, str],
                                                          list[dict[str, Any]]]:
    """compare.py's per-run records by (env, budget, series)."""
    groups: dict[tuple[str, float, str], list[dict[str, Any]]] = defaultdict(list)
    for r in records:
        s = r["summary"]
        groups[(s["env"], float(s["budget_min"]), s.get("series") or "")].append(r)
    return dict(sorted(groups.items()))


def runs_of(records: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Per-run records as compare_analysis's runs, by variant."""
    data: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in records:
        s = r["summary"]
        data[s["variant"]].append({
            "seed": int(s["seed"]), "variant": s["variant"], "system": s.get("system"),
            "facts": s, "points": r["curve_points"], "path": r.get("path"),
            "cores": (r.get("machine") or {}).get("cpu_count")})
    return {v: sorted(runs, key=lambda x: x["seed"]) for v, runs in data.items()}


def group_targets(env: str, budget: float, records: list[dict[str, Any]]) -> list[float]:
    """The env's default targets that every run's record kept."""
    kept = [set(r["curve_points"].get("to_target", {})) for r in records]
    common = set.intersection(*kept) if kept else set()
    targets = [t for t in default_targets(env, budget) if f"{t:g}" in common]
    return targets or sorted(float(t) for t in common)


# -- blocks of the per-benchmark sections ------------------------------------------------------
def compare_block(key: tuple[str, float, str], records: list[dict[str, Any]]) -> list[str]:
    env, budget, series = key
    body = env_report(env, budget, runs_of(records), group_targets(env, budget, records),
                      heading="###")
    title = body[0] + (f" (`{series}`)" if series else "")
    figure = ([f"![{env}, {budget:g} min: return vs wall clock, env steps and $]"
               f"(figures/{figure_name(key)})", ""] if series in FIGURE_SERIES else [])
    return [title, "", provenance(records), "", *figure, *body[2:]]


def table_block(record: dict[str, Any]) -> list[str]:
    """A transcribed (or any pre-formatted) record's ``content``, verbatim and in its order:
    each item a line of text or a table (``caption``, ``header``, ``rows``)."""
    lines = [f"### {record.get('title') or record['kind']}", "", provenance([record]), ""]
    if record.get("note"):
        lines += [record["note"], ""]
    lines += path_line(record)
    for item in record.get("content", []):
        if isinstance(item, str):
            lines += [item, ""]
            continue
        if item.get("caption"):
            lines += [item["caption"], ""]
        lines += md_table(item["header"], [[str(c) for c in row] for row in item["rows"]])
    return lines


def flatten(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested dicts as dotted keys; ``{"mean": ...}`` aggregates and lists stay values."""
    out: dict[str, Any] = {}
    for k, v in d.items():
        name = f"{prefix}{k}"
        if isinstance(v, dict) and v and "mean" not in v:
            out.update(flatten(v, name + "."))
        elif v is not None and v != {}:
            out[name] = v
    return out


def generic_blocks(kind: str, records: list[dict[str, Any]]) -> list[str]:
    """Any kind: a record with ``rows`` is its own table; the others share one table (a row
    per record: date, commit, path, then every value of its summary and curve points), but a
    lone record with more values than :data:`MAX_COLUMNS` gets a key/value table."""
    lines: list[str] = []
    plain = []
    for r in records:
        if r.get("rows"):
            head = list(dict.fromkeys(k for row in r["rows"] for k in row))
            lines += [f"### {r.get('title') or kind}, {day(r['date'])}", "", provenance([r]), ""]
            lines += path_line(r)
            if r.get("legend"):
                lines += [r["legend"], ""]
            facts = r.get("summary") or {}
            if kind == "ablation-verdict" and {"env", "env_steps"} <= set(facts):
                # drawn from the runs the verdict was read from
                name = ablation_name(facts["env"], facts["env_steps"])
                lines += [f"![{facts['env']}: return vs env steps and vs versions]"
                          f"(figures/{name})", ""]
            lines += md_table(head, [[cell(row.get(k)) for k in head] for row in r["rows"]])
            extra = flatten({**r.get("summary", {}), **r.get("curve_points", {})})
            if extra:
                lines += ["; ".join(f"{k}: {cell(v)}" for k, v in extra.items()) + ".", ""]
        elif r.get("content"):
            lines += table_block(r)
        else:
            plain.append(r)
    if not plain:
        return lines
    values = [flatten({**r.get("summary", {}), **r.get("curve_points", {})}) for r in plain]
    cols = list(dict.fromkeys(k for v in values for k in v))
    if len(plain) > 1 or len(cols) + 3 <= MAX_COLUMNS:
        lines += [f"### {kind}", "", provenance(plain), ""]
        lines += md_table(["date", "commit", "training path", *cols],
                          [[day(r["date"]), short(r.get("commit"), r.get("dirty")),
                            r.get("path") or "-", *(cell(v.get(c)) for c in cols)]
                           for r, v in zip(plain, values, strict=True)])
        return lines
    for r, v in zip(plain, values, strict=True):
        lines += [f"### {r.get('title') or kind}, {day(r['date'])}", "", provenance([r]), ""]
        lines += path_line(r)
        lines += md_table(["value", ""], [[k, cell(x)] for k, x in v.items()])
    return lines
