"""LVBench (benchmark name ``lvbench``).

Expected layout under ``<data_root>/lvbench/`` (the THUDM/LVBench release):

    video_info.meta.jsonl   (or data/video_info.meta.jsonl) one video per line: key, type,
                            video_info {duration_minutes, fps, ...}, qa [ {uid, question, answer (letter),
                            question_type [..], time_reference "MM:SS-MM:SS"} ]; each question's text ends with
                            its options as lines "(A) ...", "(B) ...".
    videos/<key>.mp4

One Sample per qa item: ``sample_id`` = ``uid``, ``question`` = the text before the options,
``meta["task_type"]`` = the first question_type, ``meta["evidence_window"]`` = time_reference in seconds.
Row errors name the line number and the qa index (``"<line>/qa[<i>]"``).
"""

from __future__ import annotations

import re
from pathlib import Path

from cader.evaluate.benchmarks.base import (
    LETTERS,
    BenchmarkError,
    Collector,
    RowError,
    Sample,
    answer_letter,
    as_float,
    find_root,
    iter_jsonl,
    letters_for,
    require,
)

NAME = "lvbench"
FOLDER = "lvbench"
_OPTION = re.compile(r"\n\s*\(([A-Z])\)\s*")


def split_options(text: str) -> tuple[str, list[str]]:
    """Question stem and options from "stem\\n(A) x\\n(B) y"; the letters must run A, B, C, ... in order."""
    parts = _OPTION.split(text)
    stem, rest = parts[0].strip(), parts[1:]
    letters, options = rest[0::2], [o.strip() for o in rest[1::2]]
    if not options:
        raise RowError("no '(A) ...' options found in the question text")
    if letters != list(LETTERS[: len(letters)]):
        raise RowError(f"option letters {letters} are not A, B, C, ... in order")
    return stem, options


def parse_time_reference(value) -> list[float] | None:
    """'MM:SS-MM:SS' or 'H:MM:SS-H:MM:SS' -> [start, end] seconds; None when absent or unparseable."""
    if not isinstance(value, str):
        return None
    match = re.fullmatch(r"\s*([\d:.]+)\s*-\s*([\d:.]+)\s*", value)
    if not match:
        return None
    try:
        times = [sum(float(p) * 60**k for k, p in enumerate(reversed(t.split(":")))) for t in match.groups()]
    except ValueError:
        return None
    return times if times[0] <= times[1] else None


def load(data_root: str | Path) -> tuple[list[Sample], list[BenchmarkError]]:
    root = find_root(data_root, FOLDER, "video_info.meta.jsonl", "data/video_info.meta.jsonl")
    file = root / "video_info.meta.jsonl"
    if not file.exists():
        file = root / "data" / "video_info.meta.jsonl"
    out = Collector(NAME, data_root)
    for line, row in iter_jsonl(file):
        if isinstance(row, RowError):
            out.error(file, line, str(row))
            continue
        try:
            require(row, "key", "qa")
            if not isinstance(row["qa"], list):
                raise RowError("qa is not a list")
            info = row.get("video_info") or {}
            minutes = as_float(info.get("duration_minutes"), "video_info.duration_minutes")
        except RowError as exc:
            out.error(file, line, str(exc))
            continue
        video = out.rel(root / "videos" / f"{row['key']}.mp4")
        for qa_index, qa in enumerate(row["qa"]):
            where = f"{line}/qa[{qa_index}]"
            try:
                require(qa, "uid", "question", "answer")
                stem, options = split_options(str(qa["question"]))
                letters = letters_for(options)
                types = qa.get("question_type") or []
                meta = {
                    "task_type": types[0] if isinstance(types, list) and types else types or None,
                    "question_type": types,
                    "time_reference": qa.get("time_reference"),
                    "key": row["key"],
                    "video_type": row.get("type"),
                }
                window = parse_time_reference(qa.get("time_reference"))
                if window:
                    meta["evidence_window"] = window
                out.add(
                    Sample(
                        NAME,
                        str(qa["uid"]),
                        video,
                        stem,
                        options,
                        letters,
                        answer_letter(qa["answer"], options, letters),
                        None if minutes is None else minutes * 60.0,
                        meta,
                    ),
                    file,
                    where,
                )
            except RowError as exc:
                out.error(file, where, str(exc))
    return out.result()
