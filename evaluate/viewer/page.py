"""The viewer's HTML: one self-contained file (no server, no CDN) with the data inlined as JSON.

The report tables, calibration numbers and figures are static HTML written here (they are few); the sample cards are
drawn by viewer.js from the inlined JSON, lazily, so a page of 2,000 samples opens at once.
"""

from __future__ import annotations

import base64
import html
import json
import math
from pathlib import Path

HERE = Path(__file__).parent
MAX_TABLE_ROWS = 200  # a longer list (every failed sample of a big run) is cut, saying how many rows were left out


def esc(value) -> str:
    return html.escape("" if value is None else str(value), quote=True)


def scalar(value) -> str:
    """A table cell: numbers rounded for reading, nested values as compact JSON."""
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, (dict, list)):
        return esc(json.dumps(value, ensure_ascii=False, separators=(", ", ": ")))
    return esc(value)


def is_scalar(value) -> bool:
    return not isinstance(value, (dict, list))


def rows_table(rows: list[dict], first: str | None = None, keys: list[str] | None = None) -> str:
    """A table of dict rows; `first` names a leading column holding each row's key."""
    columns = []
    for row in rows:
        columns += [k for k in row if k not in columns and k != "__key"]
    head = ([first] if first is not None else []) + columns
    body = []
    for row in rows[:MAX_TABLE_ROWS]:
        cells = ([scalar(row.get("__key"))] if first is not None else []) + [scalar(row.get(c)) for c in columns]
        body.append("<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
    more = len(rows) - MAX_TABLE_ROWS
    if more > 0:
        body.append(f'<tr><td colspan="{len(head)}">… {more} more rows in the file</td></tr>')
    return ('<table><thead><tr>' + "".join(f"<th>{esc(h)}</th>" for h in head) + "</tr></thead><tbody>"
            + "".join(body) + "</tbody></table>")  # fmt: skip


def table_html(value) -> str:
    """Any report section as HTML tables: a dict of dicts is one row per key, a list of dicts one row per item, a
    dict of lists (a table per benchmark) one table per key, a dict of scalars a single row."""
    if isinstance(value, list):
        if all(isinstance(v, dict) for v in value):
            return rows_table(value) if value else "<p>(none)</p>"
        return f"<p>{scalar(value)}</p>"
    if not isinstance(value, dict):
        return f"<p>{scalar(value)}</p>"
    if not value:
        return "<p>(none)</p>"
    if all(is_scalar(v) for v in value.values()):
        return rows_table([value])
    if all(isinstance(v, dict) for v in value.values()):
        return rows_table([{"__key": k, **v} for k, v in value.items()], first="")
    if all(isinstance(v, list) for v in value.values()):
        return '<div class="tables">' + "".join(f"<div><h5>{esc(k)}</h5>{table_html(v)}</div>"
                                                for k, v in value.items()) + "</div>"
    flat = {k: v for k, v in value.items() if is_scalar(v)}
    nested = {k: v for k, v in value.items() if not is_scalar(v)}
    return (rows_table([flat]) if flat else "") + "".join(f"<h5>{esc(k)}</h5>{table_html(v)}"
                                                          for k, v in nested.items())


REPORT_SECTIONS = [  # report.json keys in the paper's order (evaluate/report.py), each with its title
    ("benchmarks", "Accuracy per benchmark"), ("overall", "Overall"),
    ("table3_trigger", "Table 3: Stage-2 trigger rate"), ("table4_margin_bins", "Table 4: margin bins"),
    ("table5_low_confidence", "Table 5: low-confidence samples (M < tau)"),
    ("table7_depth", "Table 7: by reflection depth"), ("figure4_net_gain", "Figure 4: net gain (first P_yes >= 0.9)"),
    ("fallbacks", "Stage-2 fallbacks"), ("cycles_histogram", "Crop-and-verify cycles"), ("cost", "Cost"),
    ("failures", "Failures"), ("load_errors", "Benchmark rows not loaded"), ("comparison", "Paired comparison"),
]  # fmt: skip


def report_html(name: str, report: dict | None, open_: bool) -> str:
    """One run's report.json as tables (a folder without report.json says so)."""
    if report is None:
        return f'<details class="report"><summary>{esc(name)}: no report.json</summary></details>'
    overall = report.get("overall") or {}
    title = (f"{esc(name)}: n = {scalar(report.get('n'))}, accuracy {scalar(overall.get('accuracy'))} %, "
             f"Stage-2 trigger {scalar(overall.get('stage2_trigger_rate'))} %")  # fmt: skip
    config = report.get("config") or {}
    parts = [f"<p class=config>variant <b>{esc(config.get('variant'))}</b>, T = {scalar(config.get('temperature'))}, "
             f"tau = {scalar(config.get('tau'))}, delta = {scalar(config.get('delta'))}, "
             f"calibration {esc(config.get('calibration'))}</p>" if config else ""]  # fmt: skip
    sections = [f"<h4>{esc(heading)}</h4>{table_html(report[key])}" for key, heading in REPORT_SECTIONS
                if report.get(key) not in (None, {}, [])]
    # the accuracy table first, in view; the paper's tables one click away (they are long for many benchmarks)
    more = ('<details class="tables-more"><summary>paper tables, Stage 2, cost, failures</summary>'
            f'{"".join(sections[1:])}</details>')
    parts += sections[:1] + ([more] if sections[1:] else [])
    attr = " open" if open_ else ""
    return f'<details class="report"{attr} data-run="{esc(name)}"><summary>{title}</summary>{"".join(parts)}</details>'


def png_data_uri(path: Path) -> str:
    return "data:image/png;base64," + base64.b64encode(path.read_bytes()).decode("ascii")


def calibration_html(path: Path, calibration: dict, figures: list[Path]) -> str:
    """calibration.json's numbers and its figures inlined."""
    numbers = {k: calibration.get(k) for k in ("temperature", "tau", "mode", "alpha", "delta") if k in calibration}
    parts = [rows_table([numbers]) if numbers else ""]
    for key in ("fit", "select"):
        if isinstance(calibration.get(key), dict):
            parts.append(f"<h5>{key}</h5>{table_html(calibration[key])}")
    images = "".join(f'<figure><img alt="{esc(f.name)}" src="{png_data_uri(f)}"><figcaption>{esc(f.name)}'
                     "</figcaption></figure>" for f in figures)  # fmt: skip
    return (f'<details class="calibration" open><summary>Calibration: {esc(path)}</summary>{"".join(parts)}'
            f'<div class="figures">{images}</div></details>')  # fmt: skip


def judge_report_html(path: Path, report: dict) -> str:
    """judge_report.json: the headline numbers and its slices."""
    flat = {k: v for k, v in report.items() if is_scalar(v)}
    parts = [rows_table([flat]) if flat else ""]
    for key in ("slices", "failure_tags_per_100", "coverage_by_milestone_type"):
        if report.get(key):
            parts.append(f"<h5>{esc(key)}</h5>{table_html(report[key])}")
    return f'<details class="judge"><summary>Judge report: {esc(path)}</summary>{"".join(parts)}</details>'


def finite(value):
    """`value` with every NaN or infinite float replaced by None (JSON has no such numbers: a record holding one
    must not cost the page; the card shows '-' there)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite(v) for v in value]
    return value


def inline_json(payload) -> str:
    """JSON safe inside <script>: no "</script>" or "<!--" can close or confuse the element."""
    text = json.dumps(finite(payload), ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    return text.replace("<", "\\u003c").replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")


def render_page(title: str, header_html: str, top_html: str, data: dict) -> str:
    """The whole page. `data` holds the cards and filter order; viewer.js draws from it."""
    css = (HERE / "viewer.css").read_text(encoding="utf-8")
    script = (HERE / "viewer.js").read_text(encoding="utf-8")
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>{esc(title)}</title><style>{css}</style></head>
<body>
<header>{header_html}</header>
<div id="errors" hidden></div>
<section id="top">{top_html}</section>
<section id="controls"><div id="filters"></div>
<label class="search">search <input id="search" type="search" placeholder="sample id, question, video"></label>
<span id="shown"></span></section>
<main id="cards"></main>
<script type="application/json" id="data">{inline_json(data)}</script>
<script>{script}</script>
</body></html>
"""
