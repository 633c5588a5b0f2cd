"""A run folder (or a tree of runs) → one self-contained HTML page (the body of `cader view`)."""

from __future__ import annotations

import os

import datetime
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path

from cader.evaluate.viewer.collect import (
    FILTERS,
    Problems,
    card_of,
    filter_counts,
    find_runs,
    question_key,
    read_json,
    read_judgments,
    read_records,
    run_name,
)
from cader.evaluate.viewer.page import calibration_html, esc, judge_report_html, render_page, report_html
from cader.evaluate.viewer.thumbs import thumb_window, thumbnails, video_file
from cader.vlm.files import write_atomic

log = logging.getLogger(__name__)


@dataclass
class ViewerBuild:
    """What a page was built from: cards, the runs, the files used, and every problem met on the way."""

    cards: list[dict] = field(default_factory=list)
    runs: list[str] = field(default_factory=list)
    calibrations: list[Path] = field(default_factory=list)
    judgment_files: list[Path] = field(default_factory=list)
    problems: Problems = field(default_factory=Problems)
    thumbs_made: int = 0
    thumbs_failed: int = 0


def calibration_candidates(root: Path, reports: list[tuple[Path, dict | None]], given: list[Path]) -> list[Path]:
    """calibration.json files to show: those given, those under `root`, and those a report's config names (its path
    as evaluate/run.py was given it, so relative to where that ran: tried from here and from each folder above the
    run)."""
    found = [p / "calibration.json" if p.is_dir() else p for p in given]
    found += [] if root.is_file() else sorted(root.rglob("calibration.json"))
    for folder, report in reports:
        named = ((report or {}).get("config") or {}).get("calibration")
        if not named:
            continue
        for base in [Path.cwd(), *folder.resolve().parents]:
            if (base / named).is_file():
                found.append(base / named)
                break
    unique, seen = [], set()
    for path in found:
        key = path.resolve()
        if key not in seen and path.is_file():
            seen.add(key)
            unique.append(path)
    return unique


def figures_of(path: Path, calibration: dict) -> list[Path]:
    """The PNG figures calibrate/fit.py listed in calibration.json (paths relative to its folder), else those in
    figures/ beside it."""
    folder = Path(os.path.abspath(path.parent))
    # a listed name that leads out of the calibration's folder (absolute, ../; folded lexically) is not the run's
    # figure: a page must never inline a file from elsewhere on the machine
    listed = [path.parent / f for f in calibration.get("figures") or [] if str(f).endswith(".png")]
    inside = [p for p in listed if Path(os.path.abspath(p)).is_relative_to(folder) and p.is_file()]
    return inside or sorted((path.parent / "figures").glob("*.png"))


def add_thumbnails(built: ViewerBuild, video_root: Path | None, per_sample: int) -> None:
    """Thumbnails for every card whose video can be found; a failure is one problem line naming the sample."""
    for card in built.cards:
        path = video_file(card.get("video"), video_root)
        if path is None or card.get("err", "") and str(card["err"]).startswith("video_unreadable"):
            if card.get("video") and video_root is not None and path is None:
                built.problems.add(f"{card['f']['run']}/{card['id']}: no thumbnails: its video {card['video']!r} "
                                   f"is outside --video_root {video_root}")
            continue
        start, end = thumb_window(card)
        frames, why = thumbnails(path, start, end, per_sample)
        if why:
            built.thumbs_failed += 1
            built.problems.add(f"{card['f']['run']}/{card['id']}: no thumbnails: {why}")
        else:
            built.thumbs_made += 1
            card["thumbs"] = frames


def collect(root: Path, video_root: Path | None = None, thumbs: int = 0, calibration: list[Path] = (),
            judgments: list[Path] = (), judged_benchmarks: list[str] = ("agentvidbench",)) -> tuple[ViewerBuild, str]:
    """Read everything the page shows; returns the build and the static HTML above the cards."""
    built = ViewerBuild()
    reports: list[tuple[Path, dict | None]] = []
    for predictions in find_runs(root):
        name = run_name(predictions, root)
        built.runs.append(name)
        for record, problem in read_records(predictions, built.problems):
            built.cards.append(card_of(record, name, problem))
            built.cards[-1]["_key"] = question_key(record)
        # report.json describes the predictions.jsonl beside it, not another file of the folder
        report = predictions.parent / "report.json" if predictions.name == "predictions.jsonl" else None
        reports.append((predictions.parent, read_json(report, built.problems) if report else None))
    below = [] if root.is_file() else sorted(root.rglob("judgments.jsonl"))
    built.judgment_files = sorted(set(list(judgments) + below))
    by_question: dict[str, list[dict]] = {}
    for path in built.judgment_files:
        for key, rows in read_judgments(path, built.problems).items():
            by_question.setdefault(key, []).extend(rows)
    for card in built.cards:
        key = card.pop("_key")
        if key is not None and card["f"]["benchmark"] in judged_benchmarks and key in by_question:
            card["judge"] = by_question[key]
    if thumbs > 0:
        add_thumbnails(built, video_root, thumbs)

    top = [report_html(name, report, open_=len(reports) == 1) for name, (_, report) in zip(built.runs, reports)]
    built.calibrations = calibration_candidates(root, reports, list(calibration))
    for path in built.calibrations:
        payload = read_json(path, built.problems)
        if payload is not None:
            top.append(calibration_html(path, payload, figures_of(path, payload)))
    for path in built.judgment_files:
        judge_report = read_json(path.parent / "judge_report.json", built.problems)
        if judge_report is not None:
            top.append(judge_report_html(path.parent / "judge_report.json", judge_report))
    return built, "".join(top)


def header_html(root: Path, built: ViewerBuild) -> str:
    problems = built.problems.messages
    listed = "".join(f"<li>{esc(m)}</li>" for m in problems[:200])
    more = f"<li>… {len(problems) - 200} more</li>" if len(problems) > 200 else ""
    return (f"<h1>CADER trajectories: {esc(root)}</h1><p class=meta>{len(built.cards)} samples in "
            f"{len(built.runs)} runs · written {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC · "
            f"thumbnails {built.thumbs_made} made, {built.thumbs_failed} failed</p>"
            f'<details class="problems" data-count="{len(problems)}"><summary>{len(problems)} problems reading the '
            f"run</summary><ul>{listed}{more}</ul></details>")  # fmt: skip


def write_viewer(root: str | Path, out: str | Path | None = None, video_root: str | Path | None = None,
                 thumbs: int = 0, calibration: list[str] = (), judgments: list[str] = (),
                 judged_benchmarks: list[str] = ("agentvidbench",)) -> tuple[Path, ViewerBuild]:
    """Write the viewer page for a run folder or a predictions file.

    The page goes to `<root>/viewer.html` by default, or beside the file; it is written atomically.

    Args:
        root: a run folder (predictions.jsonl and report.json), a tree of them (e.g. runs/tiny), or one
            predictions file (e.g. the side file of `lmms-eval --model cader`)
        out: the HTML file to write (default: <root>/viewer.html; for a file, <file stem>.viewer.html beside it)
        video_root: the folder the records' video paths are relative to (evaluate/run.py's --data_root); with
            thumbs > 0, frames are decoded from the videos found there
        thumbs: thumbnails per sample of the crop the answer was given on (a Stage-1 exit: the whole video); 0: none
        calibration: calibration.json files (or their folders) whose numbers and figures head the page, besides
            those under root and those the reports' configs name
        judgments: judgments.jsonl files to show per question, besides those under root
        judged_benchmarks: benchmarks whose records are matched to judgments by question id

    Returns:
        The path written and what the page was built from.
    """
    started = time.perf_counter()
    root = Path(root)
    if not root.exists():
        raise FileNotFoundError(f"{root}: no such file or folder")
    built, top = collect(root, Path(video_root) if video_root else None, thumbs, [Path(p) for p in calibration],
                         [Path(p) for p in judgments], list(judged_benchmarks))  # fmt: skip
    if not built.runs:
        raise FileNotFoundError(f"{root}: no predictions.jsonl in it or under it")
    data = {"filters": list(FILTERS), "counts": filter_counts(built.cards), "cards": built.cards}
    page = render_page(f"CADER trajectories: {root}", header_html(root, built), top, data)
    target = Path(out) if out else (root.parent / f"{root.stem}.viewer.html" if root.is_file() else
                                     root / "viewer.html")
    write_atomic(target, page)
    log.info("wrote %s (%d samples, %.1f MB) in %.1f s", target, len(built.cards), len(page.encode()) / 1e6,
             time.perf_counter() - started)  # fmt: skip
    return target, built
