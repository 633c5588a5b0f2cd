"""The viewer's HTML: one self-contained file (no server, no CDN) with the data inlined as JSON.

The report tables, calibration numbers and figures are static HTML written here (they are few), each table in a box
that scrolls sideways rather than widening the page; the sample cards are drawn by the scripts (viewer_*.js) from
the inlined data (encode.py), only as many as the screen shows, so a page of 20,000 samples opens at once.
"""

from __future__ import annotations

import base64
import html
import json
from pathlib import Path

from cader.evaluate.viewer.encode import finite, script_safe

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
    return ('<div class="scroll"><table><thead><tr>' + "".join(f"<th>{esc(h)}</th>" for h in head)
            + "</tr></thead><tbody>" + "".join(body) + "</tbody></table></div>")


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
]


def ci_cell(value, interval) -> str:
    """'66.67 [9.43, 99.16]' (the interval small); '-' without a value."""
    if value is None:
        return "-"
    low, high = (interval or [None, None])[:2] if isinstance(interval, list) else (None, None)
    return f"{scalar(value)}" + (f" <small>[{scalar(low)}, {scalar(high)}]</small>" if low is not None else "")


def benchmarks_table(benchmarks: dict) -> str:
    """report.json's accuracy per benchmark, the columns one reads first (the rest is in the paper tables)."""
    head = ["benchmark", "n", "accuracy % [95% exact]", "[95% video bootstrap]", "SE clustered", "videos",
            "Stage-1 accuracy % [95% exact]", "Stage-1 exit %", "failures"]
    rows = []
    for name, b in benchmarks.items():
        b = b if isinstance(b, dict) else {}
        boot = b.get("accuracy_ci95_video_bootstrap") or [None, None]
        cells = [esc(name), scalar(b.get("n")), ci_cell(b.get("accuracy"), b.get("accuracy_ci95_exact")),
                 "-" if boot[0] is None else f"[{scalar(boot[0])}, {scalar(boot[1])}]",
                 scalar(b.get("accuracy_se_clustered")), scalar(b.get("n_videos")),
                 ci_cell(b.get("stage1_accuracy"), b.get("stage1_accuracy_ci95_exact")),
                 scalar(b.get("stage1_exit_rate")), scalar(b.get("failures"))]
        rows.append(f'<tr data-benchmark="{esc(name)}">' + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
    return ('<div class="scroll"><table class="sortable"><thead><tr>' + "".join(f"<th>{esc(h)}</th>" for h in head)
            + "</tr></thead><tbody>" + "".join(rows) + "</tbody></table></div>")


def report_html(name: str, report: dict | None, open_: bool) -> str:
    """One run's report.json as tables (a folder without report.json says so)."""
    if report is None:
        return f'<details class="report"><summary>{esc(name)}: no report.json</summary></details>'
    overall = report.get("overall") or {}
    title = (f"{esc(name)}: n = {scalar(report.get('n'))}, accuracy {scalar(overall.get('accuracy'))} %, "
             f"Stage-2 trigger {scalar(overall.get('stage2_trigger_rate'))} %")
    config = report.get("config") or {}
    parts = [f"<p class=config>variant <b>{esc(config.get('variant'))}</b>, T = {scalar(config.get('temperature'))}, "
             f"tau = {scalar(config.get('tau'))}, delta = {scalar(config.get('delta'))}, "
             f"calibration {esc(config.get('calibration'))}</p>" if config else ""]
    sections = [f"<h4>{esc(heading)}</h4>" + (benchmarks_table(report[key]) if key == "benchmarks" and
                                               isinstance(report[key], dict) else table_html(report[key]))
                for key, heading in REPORT_SECTIONS if report.get(key) not in (None, {}, [])]
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
                     "</figcaption></figure>" for f in figures)
    return (f'<details class="calibration" open><summary>Calibration: {esc(path)}</summary>{"".join(parts)}'
            f'<div class="figures">{images}</div></details>')


JUDGE_HEADLINE = ("protocol", "system", "judge_model", "real_judge", "n", "accuracy", "n_correct", "n_judged",
                  "traj", "mc_rate", "P1", "P2", "P3", "P4", "P5", "traj_unjudged_as_zero")
JUDGE_SLICE_COLUMNS = ("n", "accuracy", "n_judged", "traj", "mc_rate", "P1", "P2", "P3", "P4", "P5")


def key_value_table(pairs: list[tuple[str, object]]) -> str:
    """Scalars as a two-column table (a wide one-row table would run off the screen)."""
    rows = "".join(f"<tr><th>{esc(k)}</th><td>{scalar(v)}</td></tr>" for k, v in pairs)
    return f'<div class="scroll"><table class="kv">{rows}</table></div>'


def judge_report_html(path: Path, report: dict) -> str:
    """judge_report.json: the headline numbers, a table per slice (difficulty, category, skill), the failure tags
    that occurred and the coverage by milestone type."""
    parts = [f'<p class="bad">{esc(report["warning"])}</p>' if report.get("warning") else ""]
    parts.append(key_value_table([(k, report.get(k)) for k in JUDGE_HEADLINE if k in report]))
    for name, groups in (report.get("slices") or {}).items():
        if isinstance(groups, dict) and groups:
            rows = [{"__key": g, **{c: (v or {}).get(c) for c in JUDGE_SLICE_COLUMNS}} for g, v in groups.items()]
            parts.append(f"<h5>by {esc(name)}</h5>{rows_table(rows, first=name)}")
    tags = {t: r for t, r in (report.get("failure_tags_per_100") or {}).items() if r}
    if tags:
        ordered = sorted(tags.items(), key=lambda kv: -kv[1])
        parts.append("<h5>failure tags per 100 judged questions</h5>" + key_value_table(ordered))
    if report.get("coverage_by_milestone_type"):
        parts.append(f"<h5>coverage by milestone type</h5>{table_html(report['coverage_by_milestone_type'])}")
    return f'<details class="judge"><summary>Judge report: {esc(path)}</summary>{"".join(parts)}</details>'


def inline_json(payload) -> str:
    """JSON safe inside <script>: no "</script>" or "<!--" can close or confuse the element; NaN and infinities
    become null."""
    return script_safe(json.dumps(finite(payload), ensure_ascii=False, separators=(",", ":"), allow_nan=False))


SCRIPTS = ("viewer_util.js", "viewer_cards.js", "viewer_list.js", "viewer_views.js")  # one scope, in this order
VIEWS = (("runs", "Runs"), ("slices", "Slices"), ("samples", "Samples"), ("question", "Question"),
         ("reports", "Reports"))


def nav_html(counts: dict[str, str]) -> str:
    """The view switcher; viewer.js keeps the other words of the address (filters) when it switches."""
    links = "".join(f'<a href="#v={key}" data-view="{key}">{esc(title)}{esc(counts.get(key, ""))}</a>'
                    for key, title in VIEWS)
    return f'<nav id="views">{links}</nav>'


def render_page(title: str, header_html: str, views: dict[str, str], index: dict, card_lines: list[str],
                question_lines: list[str], nav_counts: dict[str, str] | None = None) -> str:
    """The whole page. `views` holds the static HTML of the Runs, Slices and Reports views; the Samples and
    Question views are drawn by the scripts from `index` and the lines (encode.py)."""
    css = (HERE / "viewer.css").read_text(encoding="utf-8")
    script = "\n".join((HERE / name).read_text(encoding="utf-8") for name in SCRIPTS)
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>{esc(title)}</title><style>{css}</style></head>
<body>
<header>{header_html}{nav_html(nav_counts or {})}</header>
<div id="errors" hidden></div>
<section id="view-runs" class="view" hidden>{views.get("runs", "")}</section>
<section id="view-slices" class="view" hidden>{views.get("slices", "")}</section>
<section id="view-reports" class="view" hidden><div id="top">{views.get("reports", "")}</div></section>
<section id="view-question" class="view" hidden><div id="question"></div></section>
<section id="view-samples" class="view" hidden>
<section id="controls"><div id="filters"></div>
<label class="search">search <input id="search" type="search" placeholder="sample id, question, video"></label>
<span id="shown"></span></section>
<main id="cards"></main><div id="more"></div>
</section>
<script type="application/json" id="data">{inline_json(index)}</script>
<script type="application/x-ndjson" id="question-lines">{chr(10).join(question_lines)}</script>
<script type="application/x-ndjson" id="card-lines">{chr(10).join(card_lines)}</script>
<script>"use strict";
(function () {{
{script}
}})();</script>
</body></html>
"""
