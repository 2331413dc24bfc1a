"""report.html: one self-contained page (inline CSS and SVG, no script or font from elsewhere) a person
reads from the top: how far the output moved, which fixes help and by how much (with the code), where in
the network the error appears, then every layer with its float histogram against its quantizer's range."""
from __future__ import annotations

import html
import math
from typing import Any, Dict, Optional

from hwquant.xquant.similarity import in_db

CSS = """
body{font-family:system-ui,-apple-system,'Segoe UI',Roboto,Helvetica,Arial,sans-serif;margin:24px;color:#1d232b;
background:#fafbfc;font-size:14px}
h1{font-size:22px;margin:0 0 4px}h2{font-size:17px;margin:28px 0 8px;border-bottom:1px solid #d8dde3;padding-bottom:4px}
.sub{color:#5b6673;margin-bottom:16px}
.cards{display:flex;gap:12px;flex-wrap:wrap}.card{background:#fff;border:1px solid #d8dde3;border-radius:8px;
padding:10px 14px;min-width:150px}.card .v{font-size:22px;font-weight:600}.card .k{color:#5b6673;font-size:12px}
table{border-collapse:collapse;background:#fff;border:1px solid #d8dde3;width:100%}
th,td{padding:5px 8px;border-bottom:1px solid #eceff2;text-align:left;vertical-align:top}
th{background:#f0f2f5;font-weight:600;font-size:12px;position:sticky;top:0}
td.n{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
tr.bad td{background:#fff3f2}.tag{display:inline-block;padding:1px 6px;border-radius:9px;font-size:11px;
margin:1px 2px 1px 0;background:#eef1f5;color:#384350}.tag.red{background:#fde2df;color:#a1271b}
.tag.green{background:#dff3e4;color:#1d6b33}
pre{background:#f5f7f9;border:1px solid #e1e5ea;border-radius:6px;padding:8px;margin:6px 0;white-space:pre-wrap;
font-size:12px}details summary{cursor:pointer;color:#2457a6}.muted{color:#5b6673}.gain{font-weight:600}
.pos{color:#1d6b33}.neg{color:#a1271b}svg text{font-family:inherit}
"""


def _e(value: Any) -> str:
    return html.escape(str(value))


def _num(value: Any, digits: int = 2, unit: str = "") -> str:
    if value is None:
        return "&ndash;"
    if isinstance(value, str):
        return _e(value)
    if isinstance(value, float) and math.isinf(value):
        return "&infin;" if value > 0 else "&minus;&infin;"
    return f"{value:.{digits}f}{unit}"


def _db(ratio: Optional[float]) -> Optional[float]:
    return None if ratio is None else in_db(ratio)


def histogram_svg(row: Dict[str, Any], width: int = 220, height: int = 54) -> str:
    """The float values' histogram (log counts) with the quantizer's range as red lines."""
    hist = (row.get("float") or {}).get("histogram")
    if not hist:
        return ""
    counts, edges = hist["counts"], hist["edges"]
    low, high = edges[0], edges[-1]
    span = (high - low) or 1.0
    top = max(math.log1p(c) for c in counts) or 1.0
    bar = width / len(counts)
    bars = "".join(f'<rect x="{i * bar:.1f}" y="{height - 12 - math.log1p(c) / top * (height - 14):.1f}" '
                   f'width="{max(bar - 0.4, 0.5):.1f}" height="{math.log1p(c) / top * (height - 14):.1f}" fill="#6b8fc7"/>'
                   for i, c in enumerate(counts) if c)
    lines = ""
    rng = (row.get("activation") or {}).get("range")
    if rng:
        for v in rng:
            x = (v - low) / span * width
            lines += f'<line x1="{x:.1f}" x2="{x:.1f}" y1="0" y2="{height - 12}" stroke="#d0312d" stroke-width="1.5"/>'
    labels = (f'<text x="0" y="{height - 1}" font-size="9" fill="#5b6673">{low:.3g}</text>'
              f'<text x="{width}" y="{height - 1}" font-size="9" fill="#5b6673" text-anchor="end">{high:.3g}</text>')
    return (f'<svg width="{width}" height="{height}" role="img" aria-label="histogram">'
            f'{bars}{lines}{labels}</svg>')


def channels_svg(entry: Dict[str, Any], width: int = 160, height: int = 40) -> str:
    """A kernel's per-output-channel float range (one bar per channel, from its minimum to its maximum)."""
    lows, highs = entry.get("channel_min") or [], entry.get("channel_max") or []
    if not lows:
        return ""
    low, high = min(lows), max(highs)
    span = (high - low) or 1.0
    step = width / len(lows)
    def y(v: float) -> float:
        return (high - v) / span * (height - 2) + 1
    bars = "".join(f'<rect x="{i * step:.2f}" y="{y(h):.1f}" width="{max(step * 0.8, 0.3):.2f}" '
                   f'height="{max(y(lo) - y(h), 0.5):.1f}" fill="#8a6bc7"/>' for i, (lo, h) in enumerate(zip(lows, highs)))
    zero = f'<line x1="0" x2="{width}" y1="{y(0):.1f}" y2="{y(0):.1f}" stroke="#999" stroke-width="0.5"/>' \
        if low < 0 < high else ""
    return f'<svg width="{width}" height="{height}" role="img" aria-label="kernel channel ranges">{bars}{zero}</svg>'


def similarity_chart(report: Dict[str, Any], width: int = 1100, height: int = 220) -> str:
    """SQNR (dB) of every compared layer, in graph order, on both datasets; degraded layers marked."""
    rows = [r for r in report["layers"] if r["similarity_repr"]]
    if not rows:
        return ""
    series = {"repr": [_db(r["similarity_repr"]["sqnr"]) for r in rows],
              "val": [_db(r["similarity_val"]["sqnr"]) if r["similarity_val"] else None for r in rows]}
    finite = [v for vs in series.values() for v in vs if v is not None and math.isfinite(v)]
    if not finite:
        return ""
    lo, hi = min(finite), max(finite)
    pad = max((hi - lo) * 0.08, 1.0)  # the data fill the chart, with a margin
    lo, hi = lo - pad, hi + pad
    span = hi - lo
    left, bottom = 40, 20
    w, h = width - left - 10, height - bottom - 10
    def x(i: int) -> float:
        return left + (i + 0.5) * w / len(rows)
    def y(v: float) -> float:
        v = min(max(v, lo), hi)
        return 10 + (hi - v) / span * h
    out = [f'<svg width="100%" viewBox="0 0 {width} {height}" role="img" aria-label="layer SQNR">']
    for k in range(5):
        v = lo + span * k / 4
        out.append(f'<line x1="{left}" x2="{width - 10}" y1="{y(v):.1f}" y2="{y(v):.1f}" stroke="#e3e7ec"/>'
                   f'<text x="{left - 4}" y="{y(v) + 3:.1f}" font-size="10" text-anchor="end" fill="#5b6673">{v:.0f}</text>')
    colors = {"repr": "#2457a6", "val": "#e08a1e"}
    for name, values in series.items():
        pts = " ".join(f"{x(i):.1f},{y(v):.1f}" for i, v in enumerate(values) if v is not None and math.isfinite(v))
        out.append(f'<polyline points="{pts}" fill="none" stroke="{colors[name]}" stroke-width="1.6"/>')
    for i, r in enumerate(rows):
        db = series["repr"][i]
        title = f'<title>{_e(r["name"])}: {_num(db, 1)} dB</title>'
        at = y(db if db is not None and math.isfinite(db) else hi)
        if r["degraded"]:
            out.append(f'<circle cx="{x(i):.1f}" cy="{at:.1f}" r="5" fill="none" stroke="#d0312d" stroke-width="2">'
                       f'{title}</circle>')
        else:
            out.append(f'<circle cx="{x(i):.1f}" cy="{at:.1f}" r="2.2" fill="{colors["repr"]}">{title}</circle>')
    out.append(f'<text x="{left}" y="{height - 4}" font-size="11" fill="#5b6673">layers in graph order (input to '
               f'output) &mdash; <tspan fill="{colors["repr"]}">representative</tspan>, '
               f'<tspan fill="{colors["val"]}">validation</tspan>, red circles: degraded; y: SQNR dB of the layer\'s '
               'output against the float model</text></svg>')
    return "".join(out)


def _fix_row(i: int, fix: Dict[str, Any]) -> str:
    m = fix.get("measured")
    if m:
        gain = m["gain_db"]
        cls = "pos" if gain > 0.05 else "neg" if gain < -0.05 else ""
        measured = (f'<td class="n">{_num(m["sqnr_db"], 2)} dB</td><td class="n gain {cls}">{gain:+.2f} dB</td>'
                    f'<td class="n">{_num(None if m["agreement"] is None else 100 * m["agreement"], 1, " %")}</td>')
    else:
        why = "trains for minutes: not measured (XQuantConfig(measure_gptq_epochs=...) measures it)" \
            if fix["kind"] == "gptq" else "not measured"
        measured = f'<td colspan="3" class="muted">{why}</td>'
    tags = "" if fix["deployable"] else '<span class="tag">diagnosis: not deployable</span>'
    return (f'<tr><td class="n">{i}</td><td><b>{_e(fix["title"])}</b> {tags}<div class="muted">{_e(fix["why"])}</div>'
            f'<details><summary>code</summary><pre>{_e(fix["code"])}</pre></details></td>{measured}</tr>')


def _fix_rows(report: Dict[str, Any]) -> str:
    head = '<table><tr><th>#</th><th>fix</th><th>output SQNR</th><th>gain</th><th>top-1 agreement</th></tr>'
    measured = [f for f in report["fixes"] if f.get("measured") or f["kind"] == "gptq"]
    rest = [f for f in report["fixes"] if f not in measured]
    out = head + "".join(_fix_row(i + 1, f) for i, f in enumerate(measured)) + "</table>"
    if rest:  # the other suggestions, folded: the measured ones are what a reader acts on first
        out += (f'<details><summary>{len(rest)} more suggestions, not measured</summary>{head}'
                + "".join(_fix_row(len(measured) + i + 1, f) for i, f in enumerate(rest)) + "</table></details>")
    baseline = report.get("baseline")
    if baseline:
        out = (f'<p class="muted">Measured by quantizing the float model again with each fix and comparing its output with '
               f'the float model\'s on the representative data. The same settings without a fix give '
               f'{_num(baseline["sqnr_db"], 2)} dB'
               + (f', {100 * baseline["agreement"]:.1f} % top-1 agreement' if baseline["agreement"] is not None else "")
               + '.</p>' + out)
    return out


def _layer_rows(report: Dict[str, Any]) -> str:
    rows = []
    for i, r in enumerate(report["layers"]):
        a = r["activation"]
        bits_w = ", ".join(f'{w["n_bits"]}' for w in r["weights"].values()) or "&ndash;"
        kernel = next(iter(r["weights"].values()), None)
        sr, sv = r["similarity_repr"], r["similarity_val"]
        f = r.get("float") or {}
        tags = "".join(f'<span class="tag">{_e(n)}</span>' for n in r["pipeline"])
        if r["degraded"]:
            tags = '<span class="tag red">degraded</span>' + tags
        if r.get("rank") is not None and r["rank"] <= 5:
            tags = f'<span class="tag red">own error #{r["rank"]}</span>' + tags
        clipped = f.get("clipped_fraction")
        rows.append(
            f'<tr class="{"bad" if r["degraded"] else ""}"><td class="n">{i + 1}</td><td><b>{_e(r["name"])}</b><br>'
            f'<span class="muted">{_e(r["type"])}</span><br>{tags}</td>'
            f'<td class="n">{bits_w} / {a["n_bits"] if a else "&ndash;"}</td>'
            f'<td class="n">{_num(_db(sr["sqnr"]) if sr else None, 1)}</td>'
            f'<td class="n">{_num(_db(sv["sqnr"]) if sv else None, 1)}</td>'
            f'<td class="n">{_num(sr["cs"] if sr else None, 4)}</td>'
            f'<td class="n">{_num(r.get("alone_sqnr_db"), 1)}</td>'
            f'<td class="n">{_num(f.get("own_activation_sqnr_db"), 1)}</td>'
            f'<td class="n">{_num(_db(kernel["sqnr"]) if kernel and "sqnr" in kernel else None, 1)}</td>'
            f'<td class="n">{_num(None if clipped is None else 100 * clipped, 3, " %")}</td>'
            f'<td class="n">{_num(f.get("max_zscore"), 1)}</td>'
            f'<td>{histogram_svg(r)}<div class="muted">{_e(a["quantizer"]) if a else ""}'
            f'{" range [" + ", ".join(f"{v:.4g}" for v in a["range"]) + "]" if a and a["range"] else ""}</div></td>'
            f'<td>{channels_svg(kernel) if kernel else ""}<div class="muted">'
            f'{_e(kernel["quantizer"]) if kernel else ""}</div></td></tr>')
    return ('<table><tr><th>#</th><th>layer</th><th>bits W / A</th><th>SQNR repr (dB)</th><th>SQNR val (dB)</th>'
            '<th>cosine</th><th>output SQNR, this layer alone (dB)</th><th>own act. SQNR (dB)</th>'
            '<th>kernel SQNR (dB)</th><th>clipped</th><th>max z</th>'
            '<th>float activation (red: quantizer range)</th><th>kernel ranges per channel</th></tr>'
            + "".join(rows) + "</table>")


def render_html(report: Dict[str, Any]) -> str:
    out = report["output"]
    settings = report["settings"]
    tpc = settings.get("tpc") or {}
    degraded = report["degraded"]
    compared = sum(1 for r in report["layers"] if r["compared"])
    cards = []
    for dataset, label in (("repr", "representative"), ("val", "validation")):
        o = out[dataset]
        cards.append(f'<div class="card"><div class="k">output SQNR, {label}</div><div class="v">'
                     f'{_num(o["sqnr_db"], 1)} dB</div><div class="k">cosine {_num(o["cs"], 4)}'
                     + (f' &middot; top-1 agreement {100 * o["agreement"]:.1f} %' if o["agreement"] is not None else "")
                     + f' &middot; {o["batches"]} batches</div></div>')
    cards.append(f'<div class="card"><div class="k">degraded layers</div><div class="v">{len(degraded)} / {compared}'
                 f'</div><div class="k">by the thresholds below</div></div>')
    res = report.get("resources") or {}
    target = res.get("target") or {}

    def figure(name: str, label: str, unit: str, scale: float) -> str:
        value = res.get(name)
        if value is None or not math.isfinite(value):
            return ""
        limit = target.get(name)
        within = "" if limit is None else (f' &middot; target {limit / scale:.1f} {unit} '
                                           + ('<span class="tag green">met</span>' if value <= limit * (1 + 1e-9)
                                              else '<span class="tag red">exceeded</span>'))
        return f'<div class="k">{label}: <b>{value / scale:.1f} {unit}</b>{within}</div>'
    cards.append('<div class="card"><div class="k">resources (as the mixed-precision search counts them)</div>'
                 + figure("weights_memory", "weights memory", "KiB", 1024)
                 + figure("activation_memory", "activation memory", "KiB", 1024)
                 + figure("total_memory", "total memory", "KiB", 1024)
                 + figure("bops", "BOPs", *(("G", 1e9) if res.get("bops", 0) >= 1e9 else ("M", 1e6))) + "</div>")
    causes = report.get("causes") or {}
    cause_items = []
    def cause(item: Any) -> str:
        if isinstance(item, str):
            return _e(item)
        if str(item[1]).endswith(".png"):  # (layer, its histogram image in the report folder)
            return f'<a href="{_e(item[1])}">{_e(item[0])}</a>'
        return _e(" / ".join(map(str, item)))
    for key, items in causes.items():
        shown = ", ".join(cause(i) for i in items[:12])
        more = f" and {len(items) - 12} more" if len(items) > 12 else ""
        cause_items.append(f"<li><b>{_e(key)}</b>: {shown}{more}</li>")
    if not report["causes_judged"]:
        cause_items.append("<li>Too many layers are degraded by these thresholds for the causes to be judged.</li>")
    notes = "".join(f"<li>{_e(n)}</li>" for n in (report.get("notes") or []) + (settings.get("notes") or []))
    not_compared = ", ".join(_e(n["name"]) for n in report.get("not_compared", []))
    pipeline = settings.get("pipeline") or {}
    did = ", ".join(f"{_e(k.replace('_', ' '))}: {_e(v)}" for k, v in pipeline.items()
                    if v not in (None, 0, [], {}) and not isinstance(v, dict))
    thresholds = report["thresholds"]
    rules = ", ".join(f'{_e(m)} {"&le;" if thresholds["is_detect_under_threshold_quantize_error"].get(m) else "&ge;"} '
                      f'{_e(t)}' for m, t in thresholds["threshold_quantize_error"].items())
    timings = ", ".join(f"{_e(k)} {v:.1f} s" for k, v in report.get("timings_s", {}).items())
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>hwquant troubleshooting report: {_e(report["model"])}</title>
<style>{CSS}</style></head><body>
<h1>Why did {_e(report["model"])} lose accuracy?</h1>
<div class="sub">{_e(report["framework"])} &middot; {_e(settings.get("method") or "quantized")} &middot; TPC
{_e(tpc.get("tpc_platform_type") or "?")} {_e(tpc.get("tpc_version") or "")} &middot; settings
{_e(settings["source"])}</div>
<div class="cards">{"".join(cards)}</div>
<h2>Fixes, best measured first</h2>{_fix_rows(report)}
<h2>Where the error appears</h2>{similarity_chart(report)}
<h2>Judged causes</h2><ul>{"".join(cause_items) or "<li>none found</li>"}</ul>
<h2>Layers</h2>
<p class="muted">Every layer that quantizes something, in graph order. SQNR compares the layer's output with the
float model's at the same point (all error up to there); "this layer alone" predicts the model's output SQNR if only
this layer were quantized (its own error times the output's sensitivity to it: the ranking, "own error #k"); own
activation SQNR is the error of quantizing the float tensor alone; bits are weights / activation.</p>
{_layer_rows(report)}
<h2>About this report</h2><ul>
<li>Degraded when {rules} on either dataset (MCT's rule).</li>
<li>What the pipeline did: {did or "nothing recorded"}.</li>
{"<li>Not compared (no float counterpart): " + not_compared + ".</li>" if not_compared else ""}
{notes}<li>Time: {timings}.</li></ul>
</body></html>
"""
