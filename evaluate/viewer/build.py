"""Run folders (or trees of them) → one self-contained HTML page (the body of `cader view`)."""

from __future__ import annotations

import datetime
import logging
import os
import shlex
import time
from dataclasses import dataclass, field
from pathlib import Path

from cader.evaluate.viewer.collect import (
    Problems,
    card_of,
    listed,
    mapping,
    question_key,
    read_json,
    read_judgments,
    read_records,
    runs_of,
)
from cader.evaluate.viewer.encode import encode
from cader.evaluate.viewer.page import calibration_html, esc, judge_report_html, render_page, report_html
from cader.evaluate.viewer.runs import Run, pick_reference, runs_html
from cader.evaluate.viewer.shapes import JudgeReportShape, ReportShape, usable
from cader.evaluate.viewer.slices import slices_html
from cader.evaluate.viewer.thumbs import thumb_window, verified_windows, video_file, window_strips
from cader.vlm.files import write_atomic

log = logging.getLogger(__name__)


@dataclass
class ViewerBuild:
    """What a page was built from: cards, the runs, the files used, and every problem met on the way."""

    cards: list[dict] = field(default_factory=list)
    runs: list[str] = field(default_factory=list)
    run_data: list[Run] = field(default_factory=list)
    reference: str | None = None
    calibrations: list[Path] = field(default_factory=list)
    judgment_files: list[Path] = field(default_factory=list)
    judge_owner: dict[Path, str | None] = field(default_factory=dict)
    problems: Problems = field(default_factory=Problems)
    thumbs_made: int = 0
    thumbs_failed: int = 0


CALIBRATION_FILE = "calibration.json"  # what calibrate/fit.py writes


def calibration_candidates(roots: list[Path], reports: list[tuple[Path, dict | None]], given: list[Path],
                           problems: Problems) -> list[Path]:
    """calibration.json files to show: those given, those under the roots, and those a report's config names (its
    path as evaluate/run.py was given it, so relative to where that ran: tried from here and from each folder above
    the run). A report is a run's file, not the user's word: the name it gives is followed only to a file called
    calibration.json, so a run cannot have the page show any other file of the machine; another name is a problem
    (the user may pass it with --calibration)."""
    found = [p / CALIBRATION_FILE if p.is_dir() else p for p in given]
    for root in roots:
        found += [] if root.is_file() else sorted(root.rglob(CALIBRATION_FILE))
    for folder, report in reports:
        named = mapping(mapping(report).get("config")).get("calibration")
        if named and (not isinstance(named, str) or Path(named).name != CALIBRATION_FILE):
            problems.add(f"{folder / 'report.json'}: its config names the calibration {named!r}: not read (a name "
                         f"from a run's files is followed only to a {CALIBRATION_FILE}; pass it with --calibration)")
        elif named:
            found += [base / named for base in [Path.cwd(), *folder.resolve().parents] if (base / named).is_file()][:1]
    unique, seen = [], set()
    for path in found:
        key = path.resolve()
        if key not in seen and path.is_file():
            seen.add(key)
            unique.append(path)
    return unique


def inside_folder(path: Path, folder: Path) -> bool:
    """Whether `path` is a file that really lies in `folder`: both resolved, so neither `..` nor a link (to a file
    or to a folder) leads out of it."""
    return path.resolve().is_relative_to(folder.resolve()) and path.is_file()


def figures_of(path: Path, calibration: dict) -> list[Path]:
    """The PNG figures calibrate/fit.py listed in calibration.json (paths relative to its folder), else those in
    figures/ beside it."""
    # a name that leads out of the calibration's folder (absolute, ../, or a link in the folder to a file
    # elsewhere) is not the run's figure: a page must never inline a file from elsewhere on the machine
    named = [path.parent / f for f in listed(calibration.get("figures")) if isinstance(f, str) and f.endswith(".png")]
    inside = [p for p in named if inside_folder(p, path.parent)]
    return inside or [p for p in sorted((path.parent / "figures").glob("*.png")) if inside_folder(p, path.parent)]


def add_thumbnails(built: ViewerBuild, video_root: Path | None, per_window: int) -> None:
    """Frames of the window each answer was given on (`thumbs`) and a strip per verified crop (each round's
    `strip`), for every card whose video is inside `video_root`; a failure is one problem line naming the sample."""
    for card in built.cards:
        path = video_file(card.get("video"), video_root)
        if path is None or card.get("err", "") and str(card["err"]).startswith("video_unreadable"):
            if isinstance(card.get("video"), str) and card["video"] and video_root is not None and path is None:
                built.problems.add(f"{card['f']['run']}/{card['id']}: no thumbnails: its video {card['video']!r} "
                                   f"is outside --video_root {video_root}")
            continue
        crops = verified_windows(card)
        windows = [thumb_window(card)] + [w for w in dict.fromkeys(crop for _, crop in crops)]
        strips, why = window_strips(path, windows, per_window)
        if why:
            built.thumbs_failed += 1
            built.problems.add(f"{card['f']['run']}/{card['id']}: no thumbnails: {why}")
            continue
        built.thumbs_made += 1
        card["thumbs"] = strips[0]
        by_window = dict(zip(windows[1:], strips[1:]))
        for k, crop in crops:
            card["s2"]["rounds"][k]["strip"] = by_window[crop]


def predictions_named(command: str | None, folder: Path) -> list[Path]:
    """The --predictions path a judge run's recorded command line names, tried from here and from each folder above
    the judge's output (it is relative to where the judge ran)."""
    try:
        words = shlex.split(command or "")
    except ValueError:
        return []
    named = [words[k + 1] for k, w in enumerate(words[:-1]) if w == "--predictions"]
    named += [w.split("=", 1)[1] for w in words if w.startswith("--predictions=")]
    return [base / n for n in named for base in [Path.cwd(), *folder.resolve().parents] if (base / n).is_file()]


def judge_owner(judgments: Path, runs: list[Run], judged_benchmarks: list[str], judge_report: dict | None) -> str | None:
    """The run a judgments file judged: the run it sits in (or below), else the one whose predictions its
    report's command names, else the only run of a judged benchmark; None when it cannot be told."""
    where = Path(os.path.abspath(judgments.parent))
    inside = [r for r in runs if where.is_relative_to(Path(os.path.abspath(r.predictions.parent)))]
    if inside:
        return max(inside, key=lambda r: len(str(r.predictions.parent))).name  # the innermost run
    named = {p.resolve() for p in predictions_named(((judge_report or {}).get("provenance") or {}).get("command"),
                                                    judgments.parent)}
    by_command = [r for r in runs if r.predictions.resolve() in named]
    if len(by_command) == 1:
        return by_command[0].name
    judged = [r for r in runs if any(str(rec.get("benchmark")) in judged_benchmarks for rec in r.records)]
    return judged[0].name if len(judged) == 1 else None


def attach_judgments(built: ViewerBuild, files: list[Path], judged_benchmarks: list[str]) -> list[str]:
    """Judgments onto the cards of the run each file judged (onto every judged-benchmark card when that cannot be
    told, saying so); the judge report goes with its run for the side-by-side table. Returns the reports' HTML."""
    html = []
    by_name = {run.name: run for run in built.run_data}
    for path in files:
        report_path = path.parent / "judge_report.json"
        report = usable(report_path, read_json(report_path, built.problems), JudgeReportShape,
                        built.problems.add)
        owner = judge_owner(path, built.run_data, judged_benchmarks, report)
        built.judge_owner[path] = owner
        if owner is None:
            built.problems.add(f"{path}: cannot tell which run it judged (not inside a run, and its report's "
                               "command names none of the runs shown): shown on every judged question")
        elif report is not None and by_name[owner].judge_report is None:
            by_name[owner].judge_report, by_name[owner].judge_path = report, report_path
        rows = read_judgments(path, built.problems)
        for card in built.cards:
            key = card.get("_key")
            if key in rows and card["f"]["benchmark"] in judged_benchmarks and owner in (None, card["f"]["run"]):
                card.setdefault("judge", []).extend(rows[key])
        if report is not None:
            html.append(judge_report_html(report_path, report))
    return html


def collect(roots: list[Path], video_root: Path | None = None, thumbs: int = 0, calibration: list[Path] = (),
            judgments: list[Path] = (), judged_benchmarks: list[str] = ("agentvidbench",),
            reference: str | None = None) -> tuple[ViewerBuild, dict[str, str]]:
    """Read everything the page shows; returns the build and the static HTML of the Runs, Slices and Reports
    views."""
    built = ViewerBuild()
    for predictions, name in runs_of(roots):
        built.runs.append(name)
        run = Run(name, predictions)
        for read in read_records(predictions, built.problems):
            run.records.append(read.usable)  # what the summaries sum: no field that breaks the contract
            built.cards.append(card_of(read.record, name, read.problem))
            built.cards[-1]["_key"] = question_key(read.record)
        # report.json describes the predictions.jsonl beside it, not another file of the folder
        report = predictions.parent / "report.json" if predictions.name == "predictions.jsonl" else None
        if report is not None:
            run.report = usable(report, read_json(report, built.problems), ReportShape, built.problems.add)
        built.run_data.append(run)
    if not built.runs:
        return built, {}
    built.reference = pick_reference(built.runs, reference)
    below = [p for root in roots if not root.is_file() for p in sorted(root.rglob("judgments.jsonl"))]
    built.judgment_files = sorted({Path(os.path.abspath(p)): p for p in list(judgments) + below}.values())
    judge_html = attach_judgments(built, built.judgment_files, list(judged_benchmarks))
    for card in built.cards:
        card.pop("_key")
    if thumbs > 0:
        add_thumbnails(built, video_root, thumbs)

    top = [report_html(run.name, run.report, open_=len(built.run_data) == 1) for run in built.run_data]
    reports = [(run.predictions.parent, run.report) for run in built.run_data]
    built.calibrations = calibration_candidates(roots, reports, list(calibration), built.problems)
    for path in built.calibrations:
        payload = read_json(path, built.problems)
        if payload is not None:
            top.append(calibration_html(path, payload, figures_of(path, payload)))
    views = {"runs": runs_html(built.run_data, built.reference), "slices": slices_html(built.run_data),
             "reports": "".join(top + judge_html)}
    return built, views


def header_html(title: str, built: ViewerBuild) -> str:
    problems = built.problems.messages
    listed = "".join(f"<li>{esc(m)}</li>" for m in problems[:200])
    more = f"<li>… {len(problems) - 200} more</li>" if len(problems) > 200 else ""
    return (f"<h1>{esc(title)}</h1><p class=meta>{len(built.cards)} samples in "
            f"{len(built.runs)} runs · reference run {esc(built.reference)} · written "
            f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC · "
            f"thumbnails {built.thumbs_made} made, {built.thumbs_failed} failed</p>"
            f'<details class="problems" data-count="{len(problems)}"><summary>{len(problems)} problems reading the '
            f"run</summary><ul>{listed}{more}</ul></details>")


def default_out(roots: list[Path]) -> Path:
    """<root>/viewer.html for one folder, <stem>.viewer.html beside one file, viewer.html in the common folder of
    several roots."""
    if len(roots) == 1:
        root = roots[0]
        return root.parent / f"{root.stem}.viewer.html" if root.is_file() else root / "viewer.html"
    common = Path(os.path.commonpath([os.path.abspath(r) for r in roots]))
    return (common.parent if common.is_file() else common) / "viewer.html"


def write_viewer(root: list[str], out: str | Path | None = None, video_root: str | Path | None = None,
                 thumbs: int = 0, calibration: list[str] = (), judgments: list[str] = (),
                 judged_benchmarks: list[str] = ("agentvidbench",), reference: str | None = None,
                 ) -> tuple[Path, ViewerBuild]:
    """Write the viewer page for one or more run folders or predictions files, the runs side by side.

    The page goes to `<root>/viewer.html` by default, or beside the file; it is written atomically.

    Args:
        root: run folders (predictions.jsonl and report.json), trees of them (e.g. runs/tiny), or predictions files
            (e.g. the side file of `lmms-eval --model cader`); from Python, one path may be given alone
        out: the HTML file to write (default: <root>/viewer.html; for a file, <file stem>.viewer.html beside it; for
            several, viewer.html in their common folder)
        video_root: the folder the records' video paths are relative to (evaluate/run.py's --data_root); with
            thumbs > 0, frames are decoded from the videos found there, and from nowhere else
        thumbs: frames per window: of the window the answer was given on (a Stage-1 exit: the whole video) and of
            each crop the verifier accepted or rejected; 0: none (no video is opened)
        calibration: calibration.json files (or their folders) whose numbers and figures are shown, besides those
            under root and those the reports' configs name
        judgments: judgments.jsonl files to show per question, besides those under root
        judged_benchmarks: benchmarks whose records are matched to judgments by question id
        reference: the run the others are compared with (its name as the page shows it, or its last folders,
            e.g. full/synthetic); default: the first run

    Returns:
        The path written and what the page was built from.
    """
    started = time.perf_counter()
    roots = [Path(root)] if isinstance(root, (str, Path)) else [Path(r) for r in root]
    if not roots:
        raise FileNotFoundError("no run folder given")
    for path in roots:
        if not path.exists():
            raise FileNotFoundError(f"{path}: no such file or folder")
    built, views = collect(roots, Path(video_root) if video_root else None, thumbs, [Path(p) for p in calibration],
                           [Path(p) for p in judgments], list(judged_benchmarks), reference)
    if not built.runs:
        raise FileNotFoundError(f"{', '.join(map(str, roots))}: no predictions.jsonl in it or under it")
    index, card_lines, question_lines = encode(built.cards, built.runs)
    index["view"] = "runs" if len(built.runs) > 1 else "samples"
    index["reference"] = built.reference
    title = f"CADER runs: {' '.join(str(r) for r in roots)}"
    nav = {"runs": f" ({len(built.runs)})", "samples": f" ({len(built.cards)})"}
    page = render_page(title, header_html(title, built), views, index, card_lines, question_lines, nav)
    target = Path(out) if out else default_out(roots)
    write_atomic(target, page)
    log.info("wrote %s (%d samples, %.1f MB) in %.1f s", target, len(built.cards), len(page.encode()) / 1e6,
             time.perf_counter() - started)
    return target, built
