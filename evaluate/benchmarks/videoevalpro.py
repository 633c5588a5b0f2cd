"""VideoEval-Pro, scored as multiple choice (benchmark name ``videoevalpro_mcq``).

Expected layout under ``<data_root>/videoevalpro/`` (a clone of the TIGER-Lab/VideoEval-Pro dataset):

    data/test-*.parquet          (any **/*.parquet or **/*.jsonl outside the video folders) rows, every column a
                                 string except ``options`` (list of strings): video (file name), question, options
                                 (the source benchmark's options, "A. "-prefixed), answer (the MCQ answer: a
                                 letter), answer_text (free-form answer), meta (a *string* holding the source
                                 benchmark's metadata as a JSON or Python dict literal), source, qa_subtype, qa_type
    videos/<video>               the extracted ``videos_part_*.tar.gz``; ``videos/videos_filtered/<video>`` and
                                 ``videos_filtered/<video>`` (the folder lmms-eval reads) are found as well

The gold letter is ``answer`` when it is a letter, else the option equal to ``answer``, else the option equal to
``answer_text``. ``sample_id`` = ``<row index>`` (5 digits), prefixed by ``<file stem>:`` when several
annotation files exist. ``meta["task_type"]`` = ``qa_type``. The ``meta`` string is parsed; its ``duration``
becomes ``Sample.duration`` when it is a number of seconds (a non-numeric duration, e.g. a duration category, is
kept as ``meta["source_duration"]``); a ``meta`` string that does not parse is kept as text in
``meta["source_meta"]`` and flagged with ``meta["source_meta_unparsed"]``.
"""

from __future__ import annotations

import ast
import json
import math
from pathlib import Path

from cader.evaluate.benchmarks.base import (
    Benchmark,
    BenchmarkError,
    Collector,
    RowError,
    RowMapping,
    RowPlace,
    Sample,
    add_rows,
    answer_letter,
    as_options,
    as_text,
    find_root,
    iter_jsonl,
    read_parquet_rows,
    strip_letter_prefixes,
    with_evidence_window,
)

NAME = "videoevalpro_mcq"
FOLDER = "videoevalpro"
VIDEO_FOLDERS = ("videos", "videos/videos_filtered", "videos_filtered")


def _annotation_files(root: Path) -> list[Path]:
    skip = {"videos", "videos_filtered"}
    files = [
        p
        for pattern in ("*.parquet", "*.jsonl")
        for p in root.rglob(pattern)
        if not skip & set(p.relative_to(root).parts)
    ]
    return sorted(files)


def _rows(file: Path):
    if file.suffix == ".parquet":
        yield from enumerate(read_parquet_rows(file))
    else:
        for line, row in iter_jsonl(file):
            yield line - 1, row


def parse_source_meta(value) -> dict | None:
    """The release's ``meta`` column: a dict written as JSON or as a Python literal; None when it is neither."""
    if isinstance(value, dict):
        return value
    if not isinstance(value, str) or not value.strip():
        return None
    for parse in (json.loads, ast.literal_eval):
        try:
            parsed = parse(value)
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            continue
        if isinstance(parsed, dict):
            return parsed
    return None


def seconds(value) -> float | None:
    """A duration in seconds from a number or a numeric string; None for anything else."""
    if isinstance(value, bool):
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) and number >= 0 else None


def _gold(row: dict, options: list[str], letters: list[str]) -> str:
    raw = as_options(row["options"])  # the options as written, letter prefixes included
    try:
        return answer_letter(row["answer"], options, letters)
    except RowError:
        for candidate in (
            row["answer"],
            row.get("answer_text"),
        ):  # "B. text" as written, then the free answer
            if isinstance(candidate, str) and candidate.strip() in raw:
                return letters[raw.index(candidate.strip())]
        if isinstance(row.get("answer_text"), str):
            return answer_letter(row["answer_text"], options, letters)
        raise


def _video(row: dict, place: RowPlace) -> Path:
    candidates = [place.out.inside(place.root / folder, row["video"], "video") for folder in VIDEO_FOLDERS]
    return next((c for c in candidates if c.is_file()), candidates[0])


def _duration(row: dict, place: RowPlace) -> float | None:
    source_meta = parse_source_meta(row.get("meta"))
    return None if source_meta is None else seconds(source_meta.get("duration"))


def _meta(row: dict, place: RowPlace, options: list[str]) -> dict:
    meta = {
        "task_type": row.get("qa_type"),
        "qa_subtype": row.get("qa_subtype"),
        "source": row.get("source"),
        "answer_text": row.get("answer_text"),
    }
    source_meta = parse_source_meta(row.get("meta"))
    if source_meta is not None:
        if seconds(source_meta.get("duration")) is None and source_meta.get("duration") is not None:
            meta["source_duration"] = source_meta["duration"]
    elif row.get("meta") is not None:
        meta["source_meta"] = row["meta"]
        meta["source_meta_unparsed"] = True
    return with_evidence_window(meta, row)


# ``place.context`` is the file's sample id prefix
ROW = RowMapping(
    required=("video", "question", "options", "answer"),
    sample_id=lambda row, place: f"{place.context}{place.row:05d}",
    question=lambda row, place: as_text(row["question"], "question"),
    options=lambda row, place: strip_letter_prefixes(as_options(row["options"])),
    answer=_gold,
    video=_video,
    meta=_meta,
    duration=_duration,
)


def load(data_root: str | Path) -> tuple[list[Sample], list[BenchmarkError]]:
    root = find_root(data_root, FOLDER, "**/*.parquet", "**/*.jsonl")
    out = Collector(NAME, data_root)
    files = _annotation_files(root)
    for file in files:
        prefix = f"{file.stem}:" if len(files) > 1 else ""
        add_rows(out, ROW, file, _rows(file), root, context=prefix)
    return out.result()


BENCHMARK = Benchmark(
    name=NAME,
    folder=FOLDER,
    load=load,
    synthetic_writer="cader.dev.synthetic.eval_sets:write_videoevalpro",
    write_order=4,
)
