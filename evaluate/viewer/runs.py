"""Runs side by side: one summary row per run, each run's deltas to a reference run with the paired test
evaluate/report.py computes for `--compare`, and a P1-P5 radar per judged run, as static HTML.

The numbers are the run's own files': accuracy with its exact (Clopper-Pearson) interval, the Stage-1 exit rate
and the cost per sample from report.json (computed from the records only for a folder without one), Traj, MC-rate
and the P1-P5 means from the judge_report.json of the judgments that belong to the run. The paired test is
`cader.evaluate.report.compare_runs`: the questions both runs scored, resampled by video, and McNemar's exact test.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

from cader.evaluate.viewer.page import esc

AXES = ("P1", "P2", "P3", "P4", "P5")
COST_COLUMNS = (("seconds", "s / sample", 1.0, 3), ("forwards", "forwards / sample", 1.0, 3),
                ("frames_decoded", "frames / sample", 1.0, 1), ("flops_total", "TFLOPs / sample", 1e-12, 3))


@dataclass
class Run:
    """One run as the page compares it: its records, its report.json and the judge report made of it."""

    name: str
    predictions: Path
    records: list[dict] = field(default_factory=list)
    report: dict | None = None
    judge_report: dict | None = None
    judge_path: Path | None = None


def records_headline(records: list[dict]) -> dict:
    """What report.json's `overall` says, from the records (a folder without report.json): the report's own summary."""
    from cader.evaluate.report import benchmark_summary

    return benchmark_summary(records) if records else {"n": 0}


def records_cost(records: list[dict]) -> dict:
    """Cost per sample from the records' `cost`: what report.json's cost.per_sample holds, computed by the report."""
    from cader.evaluate.report import cost_summary

    return cost_summary(records)["per_sample"]


def wall_clock(report: dict, predictions: Path) -> dict:
    """{"seconds": per sample} from report.json's timing block, else from timings.jsonl beside the predictions
    (wall-clock time is kept out of the records and their cost); empty when neither has it."""
    seconds = ((report.get("timing") or {}).get("seconds") or {}).get("per_sample")
    if seconds is None:
        from cader.evaluate.runner import read_timings

        timed = read_timings(predictions)
        seconds = sum(timed.values()) / len(timed) if timed else None
    return {} if seconds is None else {"seconds": seconds}


def summary_row(run: Run) -> dict:
    """One run's row: n, accuracy [exact 95 %], exit rate, cost per sample, judge numbers (None when absent)."""
    report = run.report or {}
    overall = report.get("overall") if isinstance(report.get("overall"), dict) else records_headline(run.records)
    per_sample = (report.get("cost") or {}).get("per_sample") if report else None
    judge = run.judge_report or {}
    row = {
        "run": run.name,
        "benchmarks": sorted({str(r.get("benchmark")) for r in run.records}),
        "n": overall.get("n", len(run.records)),
        "accuracy": overall.get("accuracy"),
        "ci": overall.get("accuracy_ci95_exact") or [None, None],
        "exit_rate": overall.get("stage1_exit_rate"),
        "cost": {**(per_sample if isinstance(per_sample, dict) else records_cost(run.records)),
                 **wall_clock(report, run.predictions)},
        "judged": bool(judge),
        "real_judge": judge.get("real_judge", True),
        "traj": judge.get("traj"),
        "mc": judge.get("mc_rate"),
        "n_judged": judge.get("n_judged"),
    }
    row.update({axis: judge.get(axis) for axis in AXES})
    return row


def paired_to(run: Run, reference: Run | None) -> dict | None:
    """evaluate/report.py's paired comparison of `run` against `reference` on the questions both scored (None
    without a reference)."""
    from cader.evaluate.report import compare_runs

    if reference is None or run is reference:
        return None

    def keyed(records: list[dict]) -> list[dict]:  # a record that breaks the contract may lack the key fields
        return [r for r in records if "benchmark" in r and "sample_id" in r]

    return compare_runs(keyed(run.records), keyed(reference.records)) or {"n": 0}


def pick_reference(names: list[str], wanted: str | None) -> str:
    """The reference run: `wanted` as named, or the one run whose name ends with "/<wanted>"; the first run by
    default. ValueError naming the runs when it matches none or several."""
    if not wanted:
        return names[0]
    if wanted in names:
        return wanted
    endings = [n for n in names if n.endswith("/" + wanted.strip("/"))]
    if len(endings) == 1:
        return endings[0]
    listed = ", ".join(names[:20]) + (" ..." if len(names) > 20 else "")
    how = "matches several runs" if endings else "names no run"
    raise ValueError(f"--reference {wanted!r} {how}; the runs are: {listed}")


# ---- HTML -----------------------------------------------------------------------------------------------------------


def _number(value, digits: int = 2) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "-"
    return f"{value:.{digits}f}" if isinstance(value, float) else str(value)


def _cell(value, text: str | None = None, delta: float | None = None, digits: int = 2, scale: float = 1.0) -> str:
    """A sortable cell: data-v holds the number, the text the value and, below it, the change from the reference."""
    shown = text if text is not None else _number(None if value is None else value * scale, digits)
    sort = "" if value is None else f' data-v="{value * scale:.6g}"'
    below = "" if delta is None else f'<div class="delta">{delta * scale:+.{digits}f}</div>'
    return f"<td{sort}>{shown}{below}</td>"


def _delta(value, reference) -> float | None:
    if value is None or reference is None or not isinstance(value, (int, float)):
        return None
    return value - reference


def paired_cells(pair: dict | None, is_reference: bool) -> str:
    """Δ accuracy with its 95 % paired-bootstrap interval (videos resampled) and McNemar's exact p."""
    if is_reference:
        return '<td class="ref" data-v="0">reference</td><td>-</td>'
    if pair is None or not pair.get("n") or "bootstrap" not in pair:
        return '<td data-v="">no shared questions</td><td>-</td>'
    boot, mcnemar = pair["bootstrap"], pair["mcnemar"]
    diff, low, high = 100 * boot["diff"], 100 * boot["low"], 100 * boot["high"]
    return (f'<td data-v="{diff:.6g}" class="paired" data-diff="{diff:.6g}" data-low="{low:.6g}" data-high="{high:.6g}" '
            f'data-n="{pair["n"]}">{diff:+.2f} <small>[{low:+.2f}, {high:+.2f}]<br>n={pair["n"]}, '
            f'{pair.get("n_videos", "-")} videos</small></td>'
            f'<td data-v="{mcnemar["p_value"]:.6g}" data-p="{mcnemar["p_value"]:.6g}">{mcnemar["p_value"]:.3g}<br>'
            f'<small>{mcnemar["only_a"]} vs {mcnemar["only_b"]}</small></td>')


def question_keys(run: Run) -> set[tuple[str, str]]:
    return {(str(r.get("benchmark")), str(r.get("sample_id"))) for r in run.records if r.get("answer") is not None}


def comparison_bases(runs: list[Run], reference: Run) -> list[Run | None]:
    """The run each run is compared with: the reference when they share questions, else the first run that shares
    some with it (the runs of another benchmark get a reference of their own); None for the reference itself and
    for a run that shares questions with no other."""
    keys = {run.name: question_keys(run) for run in runs}
    bases = []
    for run in runs:
        if run is reference:
            bases.append(None)
        elif keys[run.name] & keys[reference.name]:
            bases.append(reference)
        else:
            bases.append(next((o for o in runs if o is not run and keys[run.name] & keys[o.name]), None))
    return bases


def summary_table(rows: list[dict], pairs: list[dict | None], bases: list[dict | None], reference: dict) -> str:
    """The side-by-side table; P1-P5, Traj and MC columns only when some run was judged, a cost column only when
    some run has it. A run's changes are to its base (the reference, or the first run on the same questions)."""
    judged = any(r["judged"] for r in rows)
    costs = [c for c in COST_COLUMNS if any(c[0] in r["cost"] for r in rows)]
    head = ["run", "benchmarks", "n", "accuracy % [95% exact]", "Δ acc, paired [95% CI]",
            "McNemar p (only this / only base)", "Stage-1 exit %"] + [c[1] for c in costs]
    head += ["Traj", "MC-rate", *AXES] if judged else []
    body = []
    for row, pair, base in zip(rows, pairs, bases):
        is_ref = row is reference
        ci = row["ci"]
        accuracy = (f'{_number(row["accuracy"])}<br><small>[{_number(ci[0])}, {_number(ci[1])}]</small>'
                    if row["accuracy"] is not None else "-")
        versus = "" if base is None or base is reference else f'<br><small>vs {esc(base["run"])}</small>'
        cells = [f'<td class="name">{esc(row["run"])}{" ★" if is_ref else ""}{versus}</td>',
                 f'<td class="benchmarks">{esc(", ".join(row["benchmarks"]))}</td>', _cell(row["n"], str(row["n"])),
                 _cell(row["accuracy"], accuracy), paired_cells(pair, is_ref),
                 _cell(row["exit_rate"], delta=_delta(row["exit_rate"], base and base["exit_rate"]))]
        for key, _, scale, digits in costs:
            value = row["cost"].get(key)
            cells.append(_cell(value, delta=_delta(value, base and base["cost"].get(key)), digits=digits, scale=scale))
        if judged:
            for key in ("traj", "mc", *AXES):
                value = row[key]
                delta = _delta(value, base[key]) if base and row["judged"] and base["judged"] else None
                cells.append(_cell(value, delta=delta, digits=3 if key in ("traj", "mc") else 2))
        made_up = row["judged"] and not row["real_judge"]
        attrs = f' data-run="{esc(row["run"])}"' + (' class="reference"' if is_ref else "")
        attrs += f' data-base="{esc(base["run"])}"' if base else ""
        attrs += ' data-made-up-judge="1"' if made_up else ""
        body.append(f"<tr{attrs}>{''.join(cells)}</tr>")
    heads = "".join(f"<th>{esc(h)}</th>" for h in head)
    note = ('<p class="note">★ reference. Under each number: its change from the reference, or, for a run that shares '
            "no question with it, from the first run on the same questions (named under the run). Δ acc is paired on "
            "the questions both runs scored (videos resampled, 10,000 draws; evaluate/report.py's --compare test). "
            "Click a column to sort.</p>")
    if any(r["judged"] and not r["real_judge"] for r in rows):
        note += ('<p class="bad">Some judge numbers come from the loopback test double, not a real judge: '
                 "they measure nothing.</p>")
    return (f'{note}<div class="scroll"><table class="sortable summary" id="summary"><thead><tr>{heads}</tr></thead>'
            f"<tbody>{''.join(body)}</tbody></table></div>")


RADAR_SIZE, RADAR_R = 220, 72


def radar_point(axis: int, value: float | None) -> tuple[float, float]:
    """Where `value` (0-2) sits on axis `axis` (P1 up, clockwise)."""
    angle = -math.pi / 2 + 2 * math.pi * axis / len(AXES)
    radius = RADAR_R * (0.0 if value is None else max(0.0, min(2.0, float(value)))) / 2.0
    centre = RADAR_SIZE / 2
    return centre + radius * math.cos(angle), centre + radius * math.sin(angle)


def _points(values: dict) -> str:
    return " ".join(f"{x:.2f},{y:.2f}" for x, y in (radar_point(k, values.get(a)) for k, a in enumerate(AXES)))


def radar_svg(row: dict, reference: dict | None) -> str:
    """A P1-P5 radar (each axis 0-2) of one run's judge means, the compared run's dashed beneath it."""
    centre = RADAR_SIZE / 2
    grid = "".join(f'<polygon class="grid" points="{_points(dict.fromkeys(AXES, level))}"/>'
                   for level in (0.5, 1.0, 1.5, 2.0))
    spokes, labels = "", ""
    for k, axis in enumerate(AXES):
        x, y = radar_point(k, 2.0)
        spokes += f'<line class="grid" x1="{centre}" y1="{centre}" x2="{x:.2f}" y2="{y:.2f}"/>'
        lx, ly = radar_point(k, 2.42)
        labels += (f'<text x="{lx:.1f}" y="{ly + 4:.1f}" text-anchor="middle">{axis} '
                   f'{_number(row.get(axis))}</text>')
    under = ""
    if reference is not None and reference is not row and reference["judged"]:
        under = f'<polygon class="radar-ref" points="{_points(reference)}"/>'
    values = " ".join(f'data-{a.lower()}="{"" if row.get(a) is None else row[a]}"' for a in AXES)
    return (f'<figure class="radar" data-run="{esc(row["run"])}"><svg viewBox="0 0 {RADAR_SIZE} {RADAR_SIZE}" '
            f'width="{RADAR_SIZE}" height="{RADAR_SIZE}" role="img" data-cx="{centre}" data-cy="{centre}" '
            f'data-r="{RADAR_R}">{grid}{spokes}{under}<polygon class="radar-run" {values} points="{_points(row)}"/>'
            f"{labels}</svg><figcaption>{esc(row['run'])}: Traj {_number(row['traj'], 3)}, MC "
            f"{_number(row['mc'], 3)}, {row.get('n_judged') or 0} judged"
            f"{' (made-up judge)' if not row['real_judge'] else ''}</figcaption></figure>")


def runs_html(runs: list[Run], reference_name: str) -> str:
    """The Runs view: the summary table and the radars."""
    rows = [summary_row(run) for run in runs]
    row_of = {run.name: row for run, row in zip(runs, rows)}
    ref_run = next(run for run in runs if run.name == reference_name)
    bases = comparison_bases(runs, ref_run)
    pairs = [paired_to(run, base) for run, base in zip(runs, bases)]
    base_rows = [None if base is None else row_of[base.name] for base in bases]
    radars = [radar_svg(row, base) for row, base in zip(rows, base_rows) if row["judged"]]
    part = summary_table(rows, pairs, base_rows, row_of[reference_name])
    if radars:
        part += ('<h3>Judge axes, P1-P5 (0-2), per run; dashed: the run it is compared with</h3><div class="radars">'
                 + "".join(radars) + "</div>")
    return part
