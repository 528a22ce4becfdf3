"""Renderers of a parity report's data: a terminal summary, Markdown, JSON and one self-contained
HTML file (inline CSS and SVG, no scripts, no external URLs) that opens offline.

Every renderer reads only the JSON-ready ``data`` of a report, so a saved JSON report can be
rendered again later (``render(json.load(f), "html")``)."""

from __future__ import annotations

import html
import json
import math
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

FORMATS = ("text", "md", "json", "html")
STATUS_ORDER = ("pass", "fail", "error", "timeout", "fallback", "skipped")
STATUS_COLORS = {
    "pass": "#2e8540",
    "fail": "#d83933",
    "error": "#8b1a89",
    "timeout": "#c05621",
    "fallback": "#e5a000",
    "skipped": "#a9aeb1",
}
BAD = ("fail", "error", "timeout")  # what the failure lists show (a 1.0 report has no timeout)


# ----------------------------------------------------------------------------- helpers
def _err(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, str):
        return v
    return "0" if v == 0 else f"{v:.3g}"


def _pct(v: Any) -> str:
    return "n/a" if v is None else f"{v:.1f}%"


def _frac(d: dict[str, Any]) -> str:
    return f"{d['covered']}/{d['total']} ({_pct(d['percent'])})"


def _counts(c: dict[str, int]) -> str:
    return ", ".join(f"{c[s]} {s}" for s in STATUS_ORDER if c.get(s))


def _registered_ops(static: dict[str, Any]) -> list[dict[str, Any]]:
    return [o for o in static["ops"] if o["ep"]["registered"]]


def _header_line(data: dict[str, Any]) -> str:
    ep, ref, env = data["ep"], data["reference"], data["environment"]
    sim = ", CUDA simulator" if env.get("cuda_simulator") else ""
    return (
        f"{ep['name']} {ep['version']} ({ep['kind']}) vs {ref['name']} {ref['version']}: "
        f"onnx {env['onnx']}, schema {data['schema_version']}{sim}"
    )


# ----------------------------------------------------------------------------- terminal
def render_text(data: dict[str, Any]) -> str:
    """A summary a person reads in the terminal after a run."""
    lines = [f"Parity report: {_header_line(data)}"]
    st = data["static"]
    if st is not None:
        cv = st["coverage_vs_onnx"]
        lines.append(
            f"Static: {st['counts']['ep_ops']} ops declared ({st['counts']['ep_kernel_defs']} kernel defs, "
            f"{st['counts']['ep_fusable_defs']} fusable); ONNX ops at newest opset {_frac(cv['ops_latest'])}; "
            f"ONNX op versions {_frac(cv['op_versions'])}; reference ops {_frac(st['coverage_vs_reference'])}"
        )
        extra = []
        if st["ep_only"]:
            extra.append(f"EP-only: {', '.join(st['ep_only'][:10])}{' ...' if len(st['ep_only']) > 10 else ''}")
        if st["delegated_ops"]:
            extra.append(f"{len(st['delegated_ops'])} delegated")
        if st["bad_type_constraints"]:
            extra.append(f"{len(st['bad_type_constraints'])} bad type constraints")
        if extra:
            lines.append("  " + "; ".join(extra))
        for p in st["bad_type_constraints"][:5]:
            lines.append(f"  ! {p}")
    rt = data["runtime"]
    if rt is not None:
        t = rt["totals"]
        lines.append(
            f"Runtime: {t['total']} case{'' if t['total'] == 1 else 's'}: {_counts(t) or 'none'}; pass rate {_pct(rt['pass_rate'])}"
        )
        bad = [o for o in rt["ops"] if o["status"] in BAD]
        if bad:
            shown = ", ".join(f"{o['op_type']} ({_counts(o['counts'])})" for o in bad[:12])
            lines.append(f"  ops with failures: {shown}{' ...' if len(bad) > 12 else ''}")
        hung = [c["name"] for c in rt["cases"] + rt["models"] if c["status"] == "timeout"]
        if hung:
            lines.append(f"  timed out: {', '.join(hung[:10])}{' ...' if len(hung) > 10 else ''}")
        seen = rt.get("observed_ops") or {}
        if seen:
            lines.append(
                f"  {len(seen)} op types ran on the EP: {', '.join(list(seen)[:20])}{' ...' if len(seen) > 20 else ''}"
            )
        fb = [o for o in rt["ops"] if o["counts"]["fallback"]]
        if fb:
            lines.append(
                f"  ops that fell back: {', '.join(o['op_type'] for o in fb[:15])}{' ...' if len(fb) > 15 else ''}"
            )
        for m in rt["models"]:
            lines.append(
                f"  model {m['name']}: {m['status']} ({m['nodes_on_ep']}/{m['nodes_total']} nodes on the EP, "
                f"max abs {_err(m['max_abs_err'])}){' - ' + _first_line(m['reason']) if m['reason'] else ''}"
            )
    s = data["summary"]
    lines.append(f"Score {_pct(s['score'])} ({s['score_basis']}); defects: {s['defects']}")
    return "\n".join(lines) + "\n"


def _first_line(text: str) -> str:
    """A reason's first line, whole: the terminal wraps it, a cut would lose the words that matter."""
    return text.strip().splitlines()[0] if text.strip() else ""


def _top_reasons(reasons: Iterable[str], n: int = 2, width: int = 160) -> list[str]:
    counts: dict[str, int] = {}
    for r in reasons:
        if r:
            counts[r] = counts.get(r, 0) + 1
    top = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:n]
    return [(r if len(r) <= width else r[: width - 3] + "...") + (f" (x{c})" if c > 1 else "") for r, c in top]


# ----------------------------------------------------------------------------- markdown
def _md_escape(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _md_table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> list[str]:
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(_md_escape(str(c)) for c in r) + " |" for r in rows]
    return out


def render_markdown(data: dict[str, Any]) -> str:
    ep, env, s = data["ep"], data["environment"], data["summary"]
    out = [
        f"# Parity report: {ep['name']}",
        "",
        f"{_header_line(data)}. Generated {data['generated_at']} by `{data['tool']}`.",
        "",
        f"**Score: {_pct(s['score'])}** ({s['score_basis']}). Defects: **{s['defects']}**.",
        "",
        f"Environment: Python {env['python']}, NumPy {env['numpy']}, ep-core {env['ep_core']}, {env['platform']}"
        f"{'; CUDA simulator on' if env.get('cuda_simulator') else ''}.",
        "",
    ]
    st = data["static"]
    if st is not None:
        cv = st["coverage_vs_onnx"]
        out += [
            "## Static coverage",
            "",
            f"EP kind: `{st['ep_kind']}`; fusable ops declared: {'yes' if st['fusable_declared'] else 'no'}.",
            "",
        ]
        if not st["fusable_declared"]:
            out += [
                "The EP does not implement `ep_factory_get_fusable_ops` (see docs/parity.md), so ops it only serves by "
                "compiling fused groups are not counted here; the runtime section shows what actually ran "
                "on it.",
                "",
            ]
        out += _md_table(
            ["measure", "covered"],
            [
                ["ONNX ops at their newest opset", _frac(cv["ops_latest"])],
                ["ONNX op versions (schema ranges)", _frac(cv["op_versions"])],
                ["reference EP ops", _frac(st["coverage_vs_reference"])],
            ]
            + [
                [f"domain `{d}`", f"{v['covered_latest']}/{v['ops']} ({_pct(v['percent'])})"]
                for d, v in cv["per_domain"].items()
            ],
        )
        out += [
            "",
            "### Declared ops",
            "",
            "Segments follow the ONNX schema versions: `ok` every schema type, `partial` some types missing, "
            "`missing` no kernel; `(delegated)` forwards to onnx.reference, `(fusable)` is compile-only.",
            "",
        ]
        rows = [
            [
                f"`{o['domain']}::{o['op_type']}`",
                o["ep"]["summary"],
                ", ".join(o["gaps_vs_reference"]) or "-",
                "; ".join(o["bad_type_constraints"]) or "",
            ]
            for o in _registered_ops(st)
        ]
        out += (
            _md_table(["op", "EP versions", "gaps vs reference", "problems"], rows)
            if rows
            else ["_The EP declares no ops._"]
        )
        for title, items in (
            ("EP-only ops (not in the reference EP)", st["ep_only"]),
            ("Ops served by delegation", st["delegated_ops"]),
            ("Declared fusable (compile) ops", st["fusable_ops"]),
            ("Type constraints not in the schema", st["bad_type_constraints"]),
            ("Registry problems (KernelRegistry.validate)", st["registry_problems"]),
        ):
            if items:
                out += ["", f"### {title} ({len(items)})", "", ", ".join(f"`{i}`" for i in items)]
        if st["reference_only"]:
            out += [
                "",
                f"### Reference-only ops ({len(st['reference_only'])})",
                "",
                ", ".join(f"`{i.split('::', 1)[1] if i.startswith('ai.onnx::') else i}`" for i in st["reference_only"]),
            ]
    rt = data["runtime"]
    if rt is not None:
        t = rt["totals"]
        f = rt["filters"]
        out += [
            "",
            "## Runtime parity",
            "",
            f"Reference EP (oracle): `{rt['reference_ep']}`. Cases: {t['total']} ({_counts(t) or 'none'}); "
            f"pass rate {_pct(rt['pass_rate'])}.",
            "",
            f"Selection: ops={f.get('ops') or 'all'}, filter=`{f.get('filter') or ''}`, expanded cases "
            f"{'included' if f.get('include_expanded') else 'excluded'}, only EP ops: {f.get('only_ep_ops')}, "
            f"max input elements: {f.get('max_elements') or 'no limit'}.",
            "",
        ]
        seen = rt.get("observed_ops") or {}
        out += [
            f"Op types that ran on the EP in at least one case ({len(seen)}, fused nodes included): "
            + (", ".join(f"`{k}` ({v})" for k, v in seen.items()) or "none")
            + ".",
            "",
            "### By op family",
            "",
        ]
        out += _md_table(
            ["family", "cases"] + list(STATUS_ORDER) + ["max abs err"],
            [
                [fam, g["cases"]] + [g["counts"].get(s, 0) for s in STATUS_ORDER] + [_err(g["max_abs_err"])]
                for fam, g in rt["families"].items()
            ],
        )
        out += ["", "### By op", ""]
        out += _md_table(
            ["op", "family", "cases"] + list(STATUS_ORDER) + ["max abs err", "max rel err"],
            [
                [
                    f"`{o['op_type']}`" if o["domain"] == "ai.onnx" else f"`{o['domain']}::{o['op_type']}`",
                    o["family"],
                    o["cases"],
                ]
                + [o["counts"].get(s, 0) for s in STATUS_ORDER]
                + [_err(o["max_abs_err"]), _err(o["max_rel_err"])]
                for o in rt["ops"]
            ],
        )
        if rt["models"]:
            out += ["", "### Real models", ""]
            out += _md_table(
                ["model", "status", "nodes on EP", "max abs err", "max rel err", "reason"],
                [
                    [
                        m["name"],
                        m["status"],
                        f"{m['nodes_on_ep']}/{m['nodes_total']}",
                        _err(m["max_abs_err"]),
                        _err(m["max_rel_err"]),
                        m["reason"],
                    ]
                    for m in rt["models"]
                ],
            )
        bad = [c for c in rt["cases"] if c["status"] in BAD]
        if bad:
            out += ["", f"### Failures, errors and timeouts ({len(bad)})", ""]
            out += _md_table(
                ["case", "op", "status", "defect", "reason"],
                [
                    [
                        c["name"],
                        c["op_type"],
                        c["status"],
                        "yes" if c["status"] == "fail" or c["reference_status"] == "ok" else "no (reference fails too)",
                        c["reason"][:300],
                    ]
                    for c in bad[:300]
                ],
            )
            if len(bad) > 300:
                out += ["", f"{len(bad) - 300} more in the JSON report."]
        fb = [c for c in rt["cases"] if c["status"] == "fallback"]
        if fb:
            per_op: dict[str, list[dict[str, Any]]] = {}
            for c in fb:
                per_op.setdefault(c["op_type"], []).append(c)
            out += [
                "",
                f"### Fallbacks ({len(fb)} cases, {len(per_op)} ops)",
                "",
                "A fallback is never a pass: these cases ran wholly (`full`) or partly (`partial`) on another EP. "
                "Every node that fell back is listed per case in the JSON report (`fallback_nodes`).",
                "",
            ]
            rows = []
            for op, cs in sorted(per_op.items()):
                full = sum(1 for c in cs if c["nodes_on_ep"] == 0)
                took = sorted({f"{n['op_type']} on {n['ep']}" for c in cs for n in c["fallback_nodes"]})
                whys = _top_reasons(n.get("why", "") for c in cs for n in c["fallback_nodes"])
                rows.append(
                    [
                        f"`{op}`",
                        len(cs),
                        full,
                        len(cs) - full,
                        ", ".join(took[:8]) + (f" (+{len(took) - 8} more)" if len(took) > 8 else ""),
                        "; ".join(whys),
                    ]
                )
            out += _md_table(["op", "cases", "full", "partial", "nodes that fell back", "why (most frequent)"], rows)
        sk = [c for c in rt["cases"] + rt["models"] if c["status"] == "skipped"]
        if sk:
            reasons: dict[str, int] = {}
            for c in sk:
                reasons[c["reason"]] = reasons.get(c["reason"], 0) + 1
            out += ["", f"### Skipped ({len(sk)})", ""]
            out += _md_table(["reason", "cases"], sorted(reasons.items(), key=lambda kv: -kv[1]))
    return "\n".join(out) + "\n"


# ----------------------------------------------------------------------------- json
def render_json(data: dict[str, Any]) -> str:
    """Valid JSON laid out for diffs: the top two levels indented, then one line per op, case or
    model, so a regenerated report changes only the lines of what changed."""

    def compact(obj: Any) -> str:
        return json.dumps(obj, separators=(",", ":"), allow_nan=False, ensure_ascii=False)

    def dump(obj: Any, level: int) -> str:
        pad = " " * (level + 1)
        if isinstance(obj, dict) and level <= 1 and obj:
            items = [f"{pad}{json.dumps(k)}: {dump(v, level + 1)}" for k, v in obj.items()]
            return "{\n" + ",\n".join(items) + "\n" + " " * level + "}"
        if isinstance(obj, list) and level <= 2 and obj and all(isinstance(x, dict) for x in obj):
            return "[\n" + ",\n".join(pad + compact(x) for x in obj) + "\n" + " " * level + "]"
        return compact(obj)

    return dump(data, 0) + "\n"


# ----------------------------------------------------------------------------- html
_CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,Helvetica,Arial,sans-serif;margin:24px;color:#1b1b1b;
 background:#fff;max-width:1280px}
h1{font-size:24px;margin:0 0 4px}h2{font-size:19px;margin:28px 0 8px;border-bottom:1px solid #ddd;padding-bottom:4px}
h3{font-size:15px;margin:18px 0 6px}.sub{color:#555;font-size:13px;margin-bottom:14px}
.cards{display:flex;flex-wrap:wrap;gap:12px;margin:12px 0}
.card{border:1px solid #ddd;border-radius:6px;padding:10px 14px;min-width:150px}
.card .v{font-size:22px;font-weight:600}.card .k{font-size:12px;color:#555}
table{border-collapse:collapse;font-size:12.5px;margin:6px 0}
th,td{border:1px solid #ddd;padding:3px 7px;text-align:left;vertical-align:top}
th{background:#f3f4f6;position:sticky;top:0}td.n{text-align:right;font-variant-numeric:tabular-nums}
.st{display:inline-block;padding:0 6px;border-radius:3px;color:#fff;font-size:11.5px}
.pass{background:#2e8540}.fail{background:#d83933}.error{background:#8b1a89}.timeout{background:#c05621}
.fallback{background:#e5a000}
.skipped,.none{background:#a9aeb1}.ok{background:#2e8540}.partial{background:#e5a000}.missing{background:#d83933}
.legend span{display:inline-block;margin-right:14px;font-size:12px}
.legend i{display:inline-block;width:11px;height:11px;margin-right:4px;vertical-align:-1px}
svg text{font-family:inherit;font-size:11px;fill:#1b1b1b}svg .axis{stroke:#999;stroke-width:1}
svg .grid{stroke:#e5e5e5;stroke-width:1}code{font-size:12px}.muted{color:#666}
details{margin:6px 0}summary{cursor:pointer}
"""


def _e(text: Any) -> str:
    return html.escape(str(text), quote=True)


def _legend(items: Sequence[tuple[str, str]]) -> str:
    return (
        '<div class="legend">'
        + "".join(f'<span><i style="background:{c}"></i>{_e(n)}</span>' for n, c in items)
        + "</div>"
    )


def stacked_bars_svg(
    rows: Sequence[tuple[str, dict[str, int]]], keys: Sequence[str], colors: dict[str, str], title: str
) -> str:
    """Horizontal stacked bars, one row per label, widths proportional to counts."""
    label_w, bar_w, row_h = 190, 560, 22
    height = 30 + row_h * len(rows)
    total_max = max([sum(c.get(k, 0) for k in keys) for _, c in rows] + [1])
    parts = [
        f'<svg role="img" aria-label="{_e(title)}" width="{label_w + bar_w + 80}" height="{height}" '
        f'viewBox="0 0 {label_w + bar_w + 80} {height}"><title>{_e(title)}</title>'
    ]
    for i, (label, counts) in enumerate(rows):
        y = 10 + i * row_h
        parts.append(f'<text x="{label_w - 6}" y="{y + 14}" text-anchor="end">{_e(label)}</text>')
        x = float(label_w)
        for k in keys:
            n = counts.get(k, 0)
            if not n:
                continue
            w = bar_w * n / total_max
            parts.append(
                f'<rect class="bar {k}" x="{x:.1f}" y="{y + 3}" width="{max(w, 1):.1f}" height="{row_h - 6}" '
                f'fill="{colors[k]}"><title>{_e(label)}: {n} {k}</title></rect>'
            )
            x += w
        parts.append(f'<text x="{x + 5:.1f}" y="{y + 14}">{sum(counts.get(k, 0) for k in keys)}</text>')
    parts.append("</svg>")
    return "".join(parts)


def log_error_svg(rows: Sequence[tuple[str, float, str]], title: str, lo_exp: int = -12, hi_exp: int = 2) -> str:
    """Horizontal bars of max errors on a log10 axis; exact (0) results sit at the left edge,
    inf/nan at the right, each labelled."""
    label_w, bar_w, row_h = 190, 520, 18
    height = 46 + row_h * len(rows)
    span = hi_exp - lo_exp

    def xpos(v: float) -> float:
        e = min(max(math.log10(v), lo_exp), hi_exp) if v > 0 else lo_exp
        return label_w + bar_w * (e - lo_exp) / span

    parts = [
        f'<svg role="img" aria-label="{_e(title)}" width="{label_w + bar_w + 110}" height="{height}" '
        f'viewBox="0 0 {label_w + bar_w + 110} {height}"><title>{_e(title)}</title>'
    ]
    axis_y = 10 + row_h * len(rows)
    for e in range(lo_exp, hi_exp + 1, 2):
        x = label_w + bar_w * (e - lo_exp) / span
        parts.append(f'<line class="grid" x1="{x:.1f}" y1="6" x2="{x:.1f}" y2="{axis_y}"/>')
        parts.append(f'<text x="{x:.1f}" y="{axis_y + 14}" text-anchor="middle">1e{e}</text>')
    parts.append(f'<line class="axis" x1="{label_w}" y1="{axis_y}" x2="{label_w + bar_w}" y2="{axis_y}"/>')
    for i, (label, value, status) in enumerate(rows):
        y = 8 + i * row_h
        parts.append(f'<text x="{label_w - 6}" y="{y + 12}" text-anchor="end">{_e(label)}</text>')
        special = math.isinf(value) or math.isnan(value)
        x_end = label_w + bar_w if special else xpos(value)
        color = STATUS_COLORS.get(status, "#4a77b4")
        text = "inf/nan" if special else ("exact" if value == 0 else f"{value:.2g}")
        parts.append(
            f'<rect class="bar err {status}" x="{label_w}" y="{y + 3}" width="{max(x_end - label_w, 2):.1f}" '
            f'height="{row_h - 6}" fill="{color}"><title>{_e(label)}: {text}</title></rect>'
        )
        parts.append(f'<text x="{max(x_end, label_w + 2) + 5:.1f}" y="{y + 12}">{text}</text>')
    parts.append(
        f'<text x="{label_w + bar_w / 2:.1f}" y="{axis_y + 30}" text-anchor="middle">max abs error (log scale)</text>'
    )
    parts.append("</svg>")
    return "".join(parts)


def _num(v: Any) -> float:
    if v is None:
        return 0.0
    if isinstance(v, str):
        return math.inf if v == "inf" else math.nan
    return float(v)


def _static_family_rows(st: dict[str, Any]) -> list[tuple[str, dict[str, int]]]:
    fams: dict[str, dict[str, int]] = {}
    for o in st["ops"]:
        if not o["in_onnx"] or o["deprecated"]:
            continue
        c = fams.setdefault(o["family"], {"ok": 0, "partial": 0, "missing": 0})
        c[o["ep"]["latest"] if o["ep"]["latest"] in c else "missing"] += 1
    return sorted(fams.items())


def render_html(data: dict[str, Any]) -> str:
    ep, s = data["ep"], data["summary"]
    st, rt = data["static"], data["runtime"]
    body: list[str] = [
        f"<h1>Parity report: {_e(ep['name'])}</h1>",
        f'<div class="sub">{_e(_header_line(data))}. Generated {_e(data["generated_at"])}.</div>',
        '<div class="cards">',
        f'<div class="card"><div class="v">{_e(_pct(s["score"]))}</div><div class="k">score: {_e(s["score_basis"])}</div></div>',
        f'<div class="card"><div class="v">{s["defects"]}</div><div class="k">defects (wrong results, or errors the reference does not have)</div></div>',
    ]
    if st is not None:
        cv = st["coverage_vs_onnx"]
        body.append(
            f'<div class="card"><div class="v">{_e(_frac(cv["ops_latest"]))}</div><div class="k">ONNX ops at newest opset</div></div>'
        )
        body.append(
            f'<div class="card"><div class="v">{_e(_frac(st["coverage_vs_reference"]))}</div><div class="k">reference EP ops</div></div>'
        )
    if rt is not None:
        t = rt["totals"]
        body.append(
            f'<div class="card"><div class="v">{t["pass"]}/{t["ran"]}</div><div class="k">cases passed on the EP</div></div>'
        )
    body.append("</div>")

    # charts
    if rt is not None and rt["families"]:
        body.append("<h2>Results by op family</h2>")
        body.append(_legend([(k, STATUS_COLORS[k]) for k in STATUS_ORDER]))
        body.append(
            stacked_bars_svg(
                [(f, g["counts"]) for f, g in rt["families"].items()],
                STATUS_ORDER,
                STATUS_COLORS,
                "pass / fail / error / timeout / fallback / skipped per op family",
            )
        )
        err_rows = [
            (o["op_type"], _num(o["max_abs_err"]), o["status"]) for o in rt["ops"] if o["max_abs_err"] is not None
        ]
        err_rows.sort(key=lambda r: (-(r[1] if not math.isnan(r[1]) else math.inf), r[0]))
        if err_rows:
            shown = err_rows[:60]
            body.append(f"<h2>Max absolute error per op{' (worst 60)' if len(err_rows) > 60 else ''}</h2>")
            body.append(
                '<div class="sub">Against the expected outputs of the ONNX node tests, over the cases where '
                "at least one node ran on the EP (a full fallback measures another EP); bar colour is the "
                "op's status.</div>"
            )
            body.append(log_error_svg(shown, "max abs error per op, log scale"))
    if st is not None:
        colors = {"ok": "#2e8540", "partial": "#e5a000", "missing": "#d83933"}
        body.append("<h2>Static coverage by op family (newest opset)</h2>")
        body.append(_legend([(k, c) for k, c in colors.items()]))
        body.append(
            stacked_bars_svg(
                _static_family_rows(st),
                ("ok", "partial", "missing"),
                colors,
                "ONNX ops covered at their newest opset, per family",
            )
        )

    # coverage table
    body.append("<h2>Coverage table</h2>")
    body.append(
        '<div class="sub">One row per op the EP declares or the tests ran. Static versions follow the ONNX '
        "schema versions; runtime counts are node test cases.</div>"
    )
    runtime_ops = {(o["domain"], o["op_type"]): o for o in rt["ops"]} if rt is not None else {}
    static_ops = {(o["domain"], o["op_type"]): o for o in st["ops"]} if st is not None else {}
    keys = sorted({k for k, o in static_ops.items() if o["ep"]["registered"]} | set(runtime_ops))
    head = ["op", "family"]
    if st is not None:
        head += ["EP versions (static)", "gaps vs reference"]
    if rt is not None:
        head += ["status", "cases"] + list(STATUS_ORDER) + ["max abs err", "max rel err"]
    rows_html = []
    for k in keys:
        so, ro = static_ops.get(k), runtime_ops.get(k)
        name = k[1] if k[0] == "ai.onnx" else f"{k[0]}::{k[1]}"
        cells = [f"<td><code>{_e(name)}</code></td>", f"<td>{_e((so or ro or {}).get('family', ''))}</td>"]
        if st is not None:
            if so is not None and so["ep"]["registered"]:
                segs = " ".join(
                    f'<span class="st {_e(x["status"] if x["status"] in ("ok", "partial", "missing") else "none")}" '
                    f'title="{_e(x["via"])}">{_e(_seg_label(x))}</span>'
                    for x in so["ep"]["segments"]
                )
                gaps = ", ".join(so["gaps_vs_reference"]) or "-"
            else:
                segs, gaps = '<span class="muted">not declared</span>', "-"
            cells += [f"<td>{segs}</td>", f"<td>{_e(gaps)}</td>"]
        if rt is not None:
            if ro is not None:
                cells += [
                    f'<td><span class="st {_e(ro["status"])}">{_e(ro["status"])}</span></td>',
                    f'<td class="n">{ro["cases"]}</td>',
                ]
                cells += [f'<td class="n">{ro["counts"].get(x, 0)}</td>' for x in STATUS_ORDER]
                cells += [
                    f'<td class="n">{_e(_err(ro["max_abs_err"]))}</td>',
                    f'<td class="n">{_e(_err(ro["max_rel_err"]))}</td>',
                ]
            else:
                cells += ['<td class="muted">not run</td>'] + ["<td></td>"] * (len(STATUS_ORDER) + 3)
        rows_html.append("<tr>" + "".join(cells) + "</tr>")
    body.append(
        '<table id="coverage-table"><thead><tr>'
        + "".join(f"<th>{_e(h)}</th>" for h in head)
        + "</tr></thead><tbody>"
        + ("".join(rows_html) or f'<tr><td colspan="{len(head)}">no ops</td></tr>')
        + "</tbody></table>"
    )

    if rt is not None and rt.get("observed_ops"):
        seen = rt["observed_ops"]
        body.append(
            f"<details><summary>Op types that ran on the EP ({len(seen)}, fused nodes included)</summary><p>"
            + ", ".join(f"<code>{_e(k)}</code> ({v})" for k, v in seen.items())
            + "</p></details>"
        )
    if st is not None:
        for title, items in (
            ("EP-only ops", st["ep_only"]),
            ("Delegated ops", st["delegated_ops"]),
            ("Declared fusable ops", st["fusable_ops"]),
            ("Reference-only ops", st["reference_only"]),
            ("Type constraints not in the schema", st["bad_type_constraints"]),
            ("Registry problems", st["registry_problems"]),
        ):
            if items:
                body.append(
                    f"<details><summary>{_e(title)} ({len(items)})</summary><p>"
                    + ", ".join(f"<code>{_e(i)}</code>" for i in items)
                    + "</p></details>"
                )
    if rt is not None:
        if rt["models"]:
            body.append(
                "<h2>Real models</h2><table><thead><tr><th>model</th><th>status</th><th>nodes on EP</th>"
                "<th>max abs err</th><th>max rel err</th><th>reason</th></tr></thead><tbody>"
            )
            for m in rt["models"]:
                body.append(
                    f'<tr><td>{_e(m["name"])}</td><td><span class="st {_e(m["status"])}">{_e(m["status"])}</span></td>'
                    f'<td class="n">{m["nodes_on_ep"]}/{m["nodes_total"]}</td><td class="n">{_e(_err(m["max_abs_err"]))}</td>'
                    f'<td class="n">{_e(_err(m["max_rel_err"]))}</td><td>{_e(m["reason"])}</td></tr>'
                )
            body.append("</tbody></table>")
        bad = [c for c in rt["cases"] if c["status"] in (*BAD, "fallback")]
        if bad:
            body.append(
                f"<h2>Cases that did not pass ({len(bad)})</h2><table><thead><tr><th>case</th><th>op</th>"
                "<th>status</th><th>reason</th></tr></thead><tbody>"
            )
            for c in bad[:500]:
                why = _top_reasons(n.get("why", "") for n in c["fallback_nodes"]) if c["status"] == "fallback" else []
                reason = c["reason"][:400] + (f" - why: {'; '.join(why)}" if why else "")
                body.append(
                    f"<tr><td><code>{_e(c['name'])}</code></td><td>{_e(c['op_type'])}</td>"
                    f'<td><span class="st {_e(c["status"])}">{_e(c["status"])}</span></td><td>{_e(reason)}</td></tr>'
                )
            body.append("</tbody></table>")
            if len(bad) > 500:
                body.append(f'<p class="muted">{len(bad) - 500} more in the JSON report.</p>')
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>Parity report: {_e(ep['name'])}</title><style>{_CSS}</style></head><body>"
        + "\n".join(body)
        + "</body></html>\n"
    )


def _seg_label(seg: dict[str, Any]) -> str:
    end = seg["to"]
    rng = f"{seg['from']}+" if end is None else (str(end) if end == seg["from"] else f"{seg['from']}-{end}")
    return f"{rng} {seg['status']}"


RENDERERS: dict[str, Callable[[dict[str, Any]], str]] = {
    "text": render_text,
    "md": render_markdown,
    "json": render_json,
    "html": render_html,
}


def render(data: dict[str, Any], fmt: str) -> str:
    try:
        return RENDERERS[fmt](data)
    except KeyError:
        raise ValueError(f"unknown report format {fmt!r}; choose one of {list(RENDERERS)}") from None


def write_report(data: dict[str, Any], fmt: str, path: str | Path) -> Path:
    """Write one format to ``path`` atomically (a temporary name, then rename)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".part")
    tmp.write_text(render(data, fmt), encoding="utf-8")
    tmp.replace(path)
    return path
