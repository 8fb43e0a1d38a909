"""``numoracle report DIR``: a self-contained HTML page and a Markdown summary
of a campaign's results (``campaign.json`` in DIR).

Plots are inline SVG drawn here (no plotting library, no external assets):
acceptance width against each baseline's tolerance per operator, width
histograms, the tuned-tolerance frontier with numoracle's point, and the kill
matrix as a heat map.  Every section is optional: a campaign that skipped a
stage gets a line saying so."""
from __future__ import annotations

import html
import json
import math
import os
from pathlib import Path

from ...errors import InvalidArgument

MODES = ("statistical", "fixed")


def load(path) -> dict:
    p = Path(path)
    f = p / "campaign.json" if p.is_dir() else p
    try:
        data = json.loads(f.read_text())
    except FileNotFoundError:
        raise InvalidArgument(f"{f}: no campaign results there; run `numoracle campaign --out {p}` first.") from None
    except json.JSONDecodeError as exc:
        raise InvalidArgument(f"{f}: not valid JSON ({exc}); was the campaign interrupted while writing?") from None
    if not isinstance(data, dict) or "meta" not in data:
        raise InvalidArgument(f"{f}: not a numoracle campaign file (no 'meta' section).")
    return data


# ---------------------------------------------------------------- tables

def _counts(d: dict, status: str) -> int:
    return int(d.get(status, 0))


def correct_rows(data: dict) -> list[dict]:
    """One row per operator/kernel: runs, rejects per mode, uncertified, errors, widths."""
    rows = []
    for key, r in sorted(data.get("correct", {}).items()):
        if "skipped" in r:
            rows.append({"kernel": key, "skipped": r["skipped"]})
            continue
        c = r["counts"]
        w = r.get("width_ulps", {})
        rows.append({
            "kernel": key, "runs": r["cases"],
            "reject_stat": _counts(c["statistical"], "reject"), "reject_fixed": _counts(c["fixed"], "reject"),
            "uncertified": _counts(c["fixed"], "uncertified"), "errors": r.get("errors", 0),
            "w_stat": w.get("statistical"), "w_fixed": w.get("fixed"),
            "ac": r.get("assert_close_width_ulps"),
        })
    return rows


def group_rows(data: dict) -> tuple[list[str], list[tuple[str, dict]]]:
    """Per operator (all its kernels), per group: (runs, rejects stat, rejects fixed)."""
    groups: list[str] = []
    per_op: dict[str, dict] = {}
    for key, r in data.get("correct", {}).items():
        if "groups" not in r:
            continue
        op = key.split("/")[0]
        for g, v in r["groups"].items():
            if g not in groups:
                groups.append(g)
            cell = per_op.setdefault(op, {}).setdefault(g, [0, 0, 0])
            cell[0] += sum(v["fixed"].values()) + v.get("error", 0)
            cell[1] += v["statistical"].get("reject", 0)
            cell[2] += v["fixed"].get("reject", 0)
    return groups, sorted(per_op.items())


def _fmt(x, digits=3) -> str:
    if x is None:
        return "–"
    if isinstance(x, dict):
        return f"{_fmt(x.get('median'))} / {_fmt(x.get('max'))}"
    if isinstance(x, float):
        if x != x:
            return "nan"
        if x == 0:
            return "0"
        if abs(x) >= 1e5 or abs(x) < 1e-3:
            return f"{x:.2e}"
        return f"{x:.{digits}g}"
    return str(x)


def _tolerance_text(t) -> str:
    if isinstance(t, dict) and "per_output" in t:
        return "; ".join(f"({o.get('atol', 0):.2g}, {o.get('rtol', 0):.2g})" for o in t["per_output"])
    return "–" if t is None else str(t)


def _pct(x) -> str:
    return "–" if x is None else f"{100 * x:.0f}%"


def _table(head: list[str], rows: list[list], cls: str = "") -> str:
    h = "".join(f"<th>{html.escape(str(c))}</th>" for c in head)
    def td(c):
        text = str(c)
        numeric = text.replace(".", "", 1).replace("-", "", 1).replace("e", "", 1).replace("/", "").replace(" ", "").replace("+", "").isdigit()
        return f"<td>{text}</td>" if numeric or text in ("–", "") else f"<td class='t'>{text}</td>"
    body = "".join("<tr>" + "".join(td(c) for c in r) + "</tr>" for r in rows)
    return f'<table class="{cls}"><thead><tr>{h}</tr></thead><tbody>{body}</tbody></table>'


def _md_table(head: list[str], rows: list[list]) -> str:
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    out += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(out)


# ---------------------------------------------------------------- plots (SVG)

def _svg(w: int, h: int, body: str, title: str) -> str:
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" '
            f'role="img" aria-label="{html.escape(title)}"><title>{html.escape(title)}</title>'
            f'<rect width="{w}" height="{h}" fill="white"/>{body}</svg>')


def _log_axis(lo: float, hi: float, x0: float, x1: float):
    llo, lhi = math.log10(lo), math.log10(hi)
    return lambda v: x0 + (math.log10(max(v, lo)) - llo) / (lhi - llo) * (x1 - x0)


def width_plot(data: dict) -> str:
    """Per operator: numoracle's median and max acceptance width (fixed mode)
    against assert_close's, on a log axis of output ulps."""
    rows = [r for r in correct_rows(data) if "skipped" not in r and r.get("w_fixed") and r.get("ac")]
    ops: dict[str, dict] = {}
    for r in rows:
        ops.setdefault(r["kernel"].split("/")[0], r)      # one kernel per operator (the first, "correct")
    if not ops:
        return ""
    H = 26 * len(ops) + 60
    W = 760
    X = _log_axis(1e-3, 1e6, 190, W - 20)
    body = []
    for k in range(-3, 7):
        x = X(10.0 ** k)
        body.append(f'<line x1="{x:.1f}" y1="30" x2="{x:.1f}" y2="{H - 25}" stroke="#ddd"/>'
                    f'<text x="{x:.1f}" y="{H - 8}" font-size="11" text-anchor="middle">1e{k}</text>')
    for i, (op, r) in enumerate(sorted(ops.items())):
        y = 42 + 26 * i
        body.append(f'<text x="180" y="{y + 4}" font-size="12" text-anchor="end">{html.escape(op)}</text>')
        for (summ, color, dy) in ((r["w_fixed"], "#1f77b4", -5), (r["ac"], "#d62728", 5)):
            xm, xx = X(max(summ["median"], 1e-3)), X(max(summ["max"], 1e-3))
            body.append(f'<line x1="{xm:.1f}" y1="{y + dy}" x2="{xx:.1f}" y2="{y + dy}" stroke="{color}" stroke-width="2"/>'
                        f'<circle cx="{xm:.1f}" cy="{y + dy}" r="4" fill="{color}"/>')
    body.append('<circle cx="200" cy="14" r="4" fill="#1f77b4"/><text x="208" y="18" font-size="12">numoracle '
                '(fixed-input) median → max</text><circle cx="450" cy="14" r="4" fill="#d62728"/>'
                '<text x="458" y="18" font-size="12">assert_close defaults median → max</text>')
    return _svg(W, H, "".join(body), "acceptance width in output ulps per operator")


def histogram_plot(data: dict, key: str) -> str:
    r = data.get("correct", {}).get(key)
    if not r or "width_histogram" not in r:
        return ""
    from .correct import HIST_EDGES
    hs = [(r["width_histogram"]["fixed"], "#1f77b4", "numoracle (fixed)"),
          (r["width_histogram"]["statistical"], "#2ca02c", "numoracle (statistical)"),
          (r.get("assert_close_histogram"), "#d62728", "assert_close")]
    hs = [h for h in hs if h[0]]
    top = max(max(h[0]) for h in hs) or 1
    W, H, n = 380, 170, len(HIST_EDGES) + 1
    bw = (W - 40) / n
    body = [f'<text x="10" y="14" font-size="12">{html.escape(key)}: width (log10 output ulps)</text>']
    for j, (h, color, _) in enumerate(hs):
        pts = " ".join(f"{30 + (i + 0.5) * bw:.1f},{H - 25 - 115 * c / top:.1f}" for i, c in enumerate(h))
        body.append(f'<polyline points="{pts}" fill="none" stroke="{color}" stroke-width="2"/>')
        body.append(f'<text x="{30 + 120 * j}" y="30" font-size="10" fill="{color}">{html.escape(hs[j][2])}</text>')
    for i in range(0, n, 4):
        lab = "<" if i == 0 else f"{HIST_EDGES[i - 1]:g}"
        body.append(f'<text x="{30 + i * bw:.1f}" y="{H - 8}" font-size="10">{lab}</text>')
    return _svg(W, H, "".join(body), f"width histogram {key}")


def frontier_plot(frontier: dict) -> str:
    pts = frontier.get("configs") or []
    if not pts:
        return ""
    W, H = 520, 340
    n_mut = max(frontier.get("effective_mutants") or 0, max((p.get("kills", 0) for p in pts), default=0),
                frontier.get("numoracle_kills") or 0, 1)
    X = lambda fa: 50 + (W - 70) * min(fa, 1.0)
    Y = lambda k: H - 40 - (H - 70) * k / n_mut
    body = [f'<line x1="50" y1="{H - 40}" x2="{W - 20}" y2="{H - 40}" stroke="black"/>',
            f'<line x1="50" y1="30" x2="50" y2="{H - 40}" stroke="black"/>',
            f'<text x="{W / 2}" y="{H - 8}" font-size="12" text-anchor="middle">worst false-alarm rate over input groups</text>',
            f'<text x="14" y="{H / 2}" font-size="12" transform="rotate(-90 14 {H / 2})" text-anchor="middle">mutants killed</text>',
            f'<line x1="{X(0.01):.1f}" y1="30" x2="{X(0.01):.1f}" y2="{H - 40}" stroke="#999" stroke-dasharray="4"/>',
            f'<text x="{X(0.01) + 4:.1f}" y="40" font-size="10" fill="#666">1% false alarms</text>']
    for p in pts:
        body.append(f'<circle cx="{X(p.get("max_false_alarm_rate", 0)):.1f}" cy="{Y(p.get("kills", 0)):.1f}" r="2.5" '
                    f'fill="#d62728" fill-opacity="0.5"/>')
    nk = frontier.get("numoracle_kills")
    if nk is not None:
        body.append(f'<circle cx="{X(0):.1f}" cy="{Y(nk):.1f}" r="7" fill="#1f77b4"/>'
                    f'<text x="{X(0) + 10:.1f}" y="{Y(nk) + 4:.1f}" font-size="12">numoracle ({nk})</text>')
    for k in range(0, 11, 2):
        body.append(f'<text x="{X(k / 10):.1f}" y="{H - 26}" font-size="10" text-anchor="middle">{k / 10:g}</text>')
    return _svg(W, H, "".join(body), "tuned-tolerance frontier")


def kill_heatmap(mutation: dict) -> str:
    rows = mutation.get("matrix") or []
    oracles = mutation.get("oracles") or sorted({o for r in rows for o in r.get("killed", {})})
    rows = [r for r in rows if not r.get("equivalent")]
    if not rows or not oracles:
        return ""
    cell, left, topm = 9, 260, 120
    W = left + cell * len(oracles) + 20
    H = topm + cell * len(rows) + 20
    body = []
    for j, o in enumerate(oracles):
        x = left + j * cell + cell / 2
        body.append(f'<text x="{x:.1f}" y="{topm - 6}" font-size="10" transform="rotate(-60 {x:.1f} {topm - 6})">'
                    f'{html.escape(o)}</text>')
    for i, r in enumerate(rows):
        y = topm + i * cell
        if len(rows) <= 160:
            body.append(f'<text x="{left - 4}" y="{y + cell - 1}" font-size="7" text-anchor="end">'
                        f'{html.escape(str(r.get("id", i)))[:48]}</text>')
        for j, o in enumerate(oracles):
            k = r.get("killed", {}).get(o)
            color = "#2b8a3e" if k else ("#e9ecef" if k is None else "#fa5252")
            body.append(f'<rect x="{left + j * cell}" y="{y}" width="{cell - 1}" height="{cell - 1}" fill="{color}"/>')
    return _svg(W, H, "".join(body), "kill matrix: green killed, red survived")


# ---------------------------------------------------------------- documents

CSS = """body{font:14px/1.45 system-ui,sans-serif;margin:24px auto;max-width:1100px;color:#222}
h1{font-size:22px}h2{font-size:18px;margin-top:28px;border-bottom:1px solid #ddd}
table{border-collapse:collapse;margin:8px 0;font-size:12px}td,th{border:1px solid #ccc;padding:3px 6px;text-align:right}
th{background:#f3f3f3}td.t{text-align:left}td:first-child,th:first-child{text-align:left}.bad{background:#ffe3e3}.ok{background:#e6fcf5}
.meta{color:#555}.plots{display:flex;flex-wrap:wrap;gap:8px}"""


def _meta_line(meta: dict) -> str:
    keys = ("backend", "device", "torch", "triton", "python", "numoracle", "date", "size", "seconds")
    return ", ".join(f"{k}: {meta[k]}" for k in keys if k in meta)


def headline(data: dict) -> dict:
    rows = [r for r in correct_rows(data) if "skipped" not in r]
    h = {"correct_runs": sum(r["runs"] for r in rows),
         "false_alarms_statistical": sum(r["reject_stat"] for r in rows),
         "false_alarms_fixed": sum(r["reject_fixed"] for r in rows),
         "uncertified": sum(r["uncertified"] for r in rows),
         "kernel_errors": sum(r["errors"] for r in rows)}
    m = data.get("mutation") or {}
    if m:
        h["effective_mutants"] = m.get("effective")
        h["kills"] = m.get("kills")
    rp = data.get("replays") or []
    if rp:
        pairs = sorted({r["pair"] for r in rp})
        h["change_pairs"] = len(pairs)
        h["change_pairs_exposed"] = sum(1 for p in pairs if any(r.get("faulty_rejected") for r in rp if r["pair"] == p))
        h["change_pairs_passed"] = sum(1 for p in pairs if any(r.get("faulty_rejected") for r in rp if r["pair"] == p)
                                       and not any(r.get("control_rejections") for r in rp if r["pair"] == p))
        h["controls_rejected_runs"] = sum(r.get("control_rejections", 0) for r in rp)
    return h


def render_html(data: dict) -> str:
    meta = data.get("meta", {})
    h = headline(data)
    parts = [f"<!doctype html><html><head><meta charset='utf-8'><title>numoracle campaign</title>"
             f"<style>{CSS}</style></head><body><h1>numoracle campaign</h1>"
             f"<p class='meta'>{html.escape(_meta_line(meta))}</p>"]
    parts.append("<h2>Headline</h2>" + _table(["figure", "value"], [[html.escape(k), html.escape(_fmt(v) if not isinstance(v, dict) else json.dumps(v))] for k, v in h.items()]))
    rows = correct_rows(data)
    if rows:
        parts.append("<h2>Correct kernels and behaviour-preserving variants</h2><p>False alarms (rejects of a "
                     "correct kernel) per mode, uncertified runs, and the acceptance width in output ulps "
                     "(median / max, pre-store interval) beside the width <code>assert_close</code>'s defaults "
                     "allow for the same elements.</p>")
        tr = []
        for r in rows:
            if "skipped" in r:
                tr.append([html.escape(r["kernel"]), "skipped: " + html.escape(r["skipped"][:80]), "", "", "", "", "", "", ""])
                continue
            cls = "bad" if r["reject_stat"] or r["reject_fixed"] else "ok"
            tr.append([html.escape(r["kernel"]), r["runs"], f"<span class='{cls}'>{r['reject_stat']}</span>",
                       f"<span class='{cls}'>{r['reject_fixed']}</span>", r["uncertified"], r["errors"],
                       _fmt(r["w_stat"]), _fmt(r["w_fixed"]), _fmt(r["ac"])])
        parts.append(_table(["kernel", "runs", "rejects (stat)", "rejects (fixed)", "uncertified", "errors",
                             "width stat", "width fixed", "assert_close width"], tr))
        parts.append("<div class='plots'>" + width_plot(data) + "</div>")
        groups, per_op = group_rows(data)
        if groups:
            parts.append("<h3>Per input group: runs / statistical rejects / fixed rejects</h3>")
            parts.append(_table(["operator"] + groups, [[html.escape(op)] + [
                "/".join(str(x) for x in cells.get(g, [0, 0, 0])) for g in groups] for op, cells in per_op]))
        hist = [histogram_plot(data, k) for k in sorted(data.get("correct", {})) if k.endswith("/correct")]
        parts.append("<h3>Width histograms</h3><div class='plots'>" + "".join(hist) + "</div>")
        unc = {k: r["uncertified_sites"] for k, r in data.get("correct", {}).items() if r.get("uncertified_sites")}
        if unc:
            parts.append("<h3>Why runs were uncertified</h3>" + _table(
                ["kernel", "site (kind): runs"], [[html.escape(k), html.escape("; ".join(f"{s}: {n}" for s, n in v.items()))]
                                                 for k, v in sorted(unc.items())]))
    shift = data.get("tuned_shift") or {}
    if shift:
        parts.append("<h2>Tuned tolerances under input shift</h2><p>A tolerance tuned on the calibration group, "
                     "then applied to the same correct runs in every group: false-alarm rate per group.</p>")
        groups = sorted({g for v in shift.values() for g in v.get("groups", {})})
        parts.append(_table(["operator", "tuned (atol, rtol) per output"] + groups, [
            [html.escape(op), html.escape(_tolerance_text(v.get("tolerance")))] +
            [_pct(v["groups"].get(g)) for g in groups] for op, v in sorted(shift.items())]))
    m = data.get("mutation") or {}
    if m:
        parts.append("<h2>Mutation testing</h2>")
        kills = m.get("kills") or {}
        fa = m.get("false_alarms") or {}
        parts.append(_table(["oracle", "kills", "false alarms on correct kernels"],
                            [[html.escape(o), kills.get(o, "–"), fa.get(o, "–")] for o in sorted(kills)]))
        parts.append(f"<p>{m.get('effective', '?')} effective mutants, {m.get('equivalent', '?')} equivalent "
                     f"(no output change on any run) excluded.</p>")
        parts.append("<div class='plots'>" + kill_heatmap(m) + "</div>")
    fr = data.get("frontier") or {}
    if fr:
        parts.append("<h2>Tuned-tolerance frontier</h2><p>Each red point is one (atol, rtol) configuration of the "
                     "grid: its worst false-alarm rate over the input groups against the mutants it kills.</p>")
        best = fr.get("best")
        if best:
            parts.append(f"<p>Best configuration with ≤ 1% false alarms in every group: {html.escape(json.dumps(best))}; "
                         f"numoracle kills {fr.get('numoracle_kills')}.</p>")
        parts.append("<div class='plots'>" + frontier_plot(fr) + "</div>")
    rp = data.get("replays") or []
    if rp:
        parts.append("<h2>Historical change pairs</h2>")
        parts.append(_table(["pair", "operator", "fault", "faulty rejected", "exposed by", "control rejected runs",
                             "baselines catching the fault"], [
            [r.get("pair"), html.escape(str(r.get("operator"))), html.escape(str(r.get("title")))[:160],
             "yes" if r.get("faulty_rejected") else "no", html.escape(", ".join(r.get("exposed_by", [])[:4])),
             r.get("control_rejections", 0), html.escape(", ".join(k for k, v in (r.get("baselines") or {}).items() if v))]
            for r in rp]))
    parts.append("</body></html>")
    return "".join(parts)


def render_markdown(data: dict) -> str:
    meta = data.get("meta", {})
    out = ["# numoracle campaign", "", _meta_line(meta), "", "## Headline", ""]
    out += [f"- {k}: {v}" for k, v in headline(data).items()]
    rows = [r for r in correct_rows(data) if "skipped" not in r]
    if rows:
        out += ["", "## Correct kernels and variants", "", _md_table(
            ["kernel", "runs", "rejects stat", "rejects fixed", "uncertified", "errors", "width stat (med/max ulps)",
             "width fixed", "assert_close width"],
            [[r["kernel"], r["runs"], r["reject_stat"], r["reject_fixed"], r["uncertified"], r["errors"],
              _fmt(r["w_stat"]), _fmt(r["w_fixed"]), _fmt(r["ac"])] for r in rows])]
    m = data.get("mutation") or {}
    if m:
        out += ["", "## Mutation testing", "", f"{m.get('effective')} effective mutants, {m.get('equivalent')} equivalent.", "",
                _md_table(["oracle", "kills", "false alarms"], [[o, v, (m.get("false_alarms") or {}).get(o, "–")]
                                                                for o, v in sorted((m.get("kills") or {}).items())])]
    fr = data.get("frontier") or {}
    if fr.get("best") is not None or fr.get("numoracle_kills") is not None:
        out += ["", "## Tuned-tolerance frontier", "", f"- best configuration with ≤ 1% false alarms in every group: "
                f"{json.dumps(fr.get('best'))}", f"- numoracle: {fr.get('numoracle_kills')} kills"]
    rp = data.get("replays") or []
    if rp:
        out += ["", "## Historical change pairs", "", _md_table(
            ["pair", "operator", "faulty rejected", "exposed by", "control rejected runs"],
            [[r.get("pair"), r.get("operator"), "yes" if r.get("faulty_rejected") else "no",
              ", ".join(r.get("exposed_by", [])[:4]), r.get("control_rejections", 0)] for r in rp])]
    return "\n".join(out) + "\n"


def write(src, out_dir=None) -> tuple[Path, Path]:
    data = load(src)
    d = Path(out_dir or (src if Path(src).is_dir() else Path(src).parent))
    d.mkdir(parents=True, exist_ok=True)
    pages = {d / "report.html": render_html(data), d / "report.md": render_markdown(data)}
    for path, text in pages.items():
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(text)
        os.replace(tmp, path)
    return d / "report.html", d / "report.md"
