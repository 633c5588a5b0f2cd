"""Readable slices: per benchmark, one small table per grouping (difficulty, category, skill, duration group,
question type, ...) with a row per group and a column per run: accuracy with its exact 95 % interval and n.

The groupings and their numbers are evaluate/report_stats.py's (the official scorers' breakdowns that report.json
carries, computed by the same function from the same records); AgentVidBench, whose report.json has only task
types, is sliced as its judge report slices it (difficulty, category, skill: a question counts in each category
and skill it lists), with the judge's Traj per group beside the accuracy when the run was judged.
"""

from __future__ import annotations

from collections import defaultdict

from cader.evaluate.report_stats import benchmark_breakdowns, breakdown
from cader.evaluate.viewer.page import esc
from cader.evaluate.viewer.runs import Run

# benchmark -> (grouping as shown and as the judge report names it, record meta key, a question may list several)
JUDGED_SLICES = {
    "agentvidbench": (("difficulty", "difficulty", False), ("category", "categories", True),
                      ("skill", "skills", True)),
}


def run_slices(run: Run) -> dict[str, dict[str, dict[str, dict]]]:
    """benchmark -> grouping -> group -> report_stats.accuracy_row (n, correct, accuracy, ci95_exact, ...)."""
    by_bench: dict[str, list[dict]] = defaultdict(list)
    for record in run.records:
        if record.get("answer") is not None:
            by_bench[str(record.get("benchmark"))].append(record)
    out = {}
    for bench, scored in sorted(by_bench.items()):
        if bench in JUDGED_SLICES:
            out[bench] = {name: breakdown(scored, key, several) for name, key, several in JUDGED_SLICES[bench]}
        else:
            out[bench] = benchmark_breakdowns(bench, scored)
    return out


def slice_grid(runs: list[Run]) -> dict[str, dict[str, dict[str, dict[str, dict]]]]:
    """benchmark -> grouping -> run -> group -> row, over every run that has the benchmark."""
    grid: dict = {}
    for run in runs:
        for bench, groupings in run_slices(run).items():
            for name, groups in groupings.items():
                grid.setdefault(bench, {}).setdefault(name, {})[run.name] = groups
    return grid


def _judge_traj(run: Run, grouping: str, group: str):
    slices = (run.judge_report or {}).get("slices") or {}
    row = (slices.get(grouping) or {}).get(group) or {}
    return row.get("traj")


def _cell(run: Run, row: dict | None, grouping: str, group: str, n_shown) -> str:
    if row is None:
        return "<td>-</td>"
    accuracy, (low, high) = row.get("accuracy"), row.get("ci95_exact") or [None, None]
    text = "-" if accuracy is None else f"{accuracy:.2f} <small>[{low:.2f}, {high:.2f}]</small>"
    if row["n"] != n_shown:
        text += f" <small>n={row['n']}</small>"
    traj = _judge_traj(run, grouping, group) if run.judge_report else None
    if traj is not None:
        text += f' <small class="traj">Traj {traj:.3f}</small>'
    data = (f'data-run="{esc(run.name)}" data-n="{row["n"]}" data-acc="{"" if accuracy is None else accuracy}" '
            f'data-low="{"" if low is None else low}" data-high="{"" if high is None else high}"')
    sort = "" if accuracy is None else f' data-v="{accuracy}"'
    return f"<td{sort} {data}>{text}</td>"


def slice_table(bench: str, grouping: str, per_run: dict[str, dict[str, dict]], runs: list[Run]) -> str:
    shown = [run for run in runs if run.name in per_run]
    groups: list[str] = []
    for run in shown:
        groups += [g for g in per_run[run.name] if g not in groups]
    head = "<th>group</th><th>n</th>" + "".join(f"<th>{esc(run.name)}</th>" for run in shown)
    body = []
    for group in groups:
        first = next(per_run[run.name][group] for run in shown if group in per_run[run.name])
        cells = [_cell(run, per_run[run.name].get(group), grouping, group, first["n"]) for run in shown]
        body.append(f'<tr data-group="{esc(group)}"><td>{esc(group)}</td><td data-v="{first["n"]}">{first["n"]}'
                    f"</td>{''.join(cells)}</tr>")
    return (f'<div class="slice"><h4>{esc(bench)}: by {esc(grouping)}</h4><div class="scroll">'
            f'<table class="sortable slices" data-benchmark="{esc(bench)}" data-grouping="{esc(grouping)}">'
            f"<thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table></div></div>")


def slices_html(runs: list[Run]) -> str:
    """The Slices view: a section per benchmark, a table per grouping."""
    grid = slice_grid(runs)
    if not grid:
        return "<p>No benchmark here is broken down (no grouping field in its records).</p>"
    note = ("<p class=note>Accuracy % with its exact 95 % interval; n is the first run's, a run with another n "
            "says so. AgentVidBench counts a question under each category and skill it lists. Click a column to "
            "sort.</p>")
    sections = []
    for bench, groupings in grid.items():
        tables = "".join(slice_table(bench, name, per_run, runs) for name, per_run in groupings.items())
        sections.append(f'<section class="bench" data-benchmark="{esc(bench)}"><h3>{esc(bench)}</h3>'
                        f'<div class="slice-grid">{tables}</div></section>')
    return note + "".join(sections)
