"""VideoEval-Pro, scored as multiple choice (benchmark name ``videoevalpro_mcq``).

Expected layout under ``<data_root>/videoevalpro/`` (the TIGER-Lab/VideoEval-Pro release):

    **/*.parquet or **/*.jsonl   (outside videos/) rows: video (file name), question, options (list, optionally
                                 "A. "-prefixed), answer (the MCQ answer: a letter or an option's text),
                                 answer_text (free-form answer), meta, source, qa_type, qa_subtype
    videos/<video>

The gold letter is ``answer`` when it is a letter, else the option equal to ``answer``, else the option equal to
``answer_text``. ``sample_id`` = ``<row index>`` (5 digits), prefixed by ``<file stem>:`` when several
annotation files exist. ``meta["task_type"]`` = ``qa_type``; duration from ``meta.duration`` when stated.
"""

from __future__ import annotations

from pathlib import Path

from cader.evaluate.benchmarks.base import (
    BenchmarkError,
    Collector,
    RowError,
    Sample,
    answer_letter,
    as_float,
    as_options,
    evidence_window,
    find_root,
    iter_jsonl,
    letters_for,
    read_parquet_rows,
    require,
    strip_letter_prefixes,
)

NAME = "videoevalpro_mcq"
FOLDER = "videoevalpro"


def _annotation_files(root: Path) -> list[Path]:
    files = [
        p
        for pattern in ("*.parquet", "*.jsonl")
        for p in root.rglob(pattern)
        if "videos" not in p.relative_to(root).parts
    ]
    return sorted(files)


def _rows(file: Path):
    if file.suffix == ".parquet":
        yield from enumerate(read_parquet_rows(file))
    else:
        for line, row in iter_jsonl(file):
            yield line - 1, row


def _gold(row: dict, options: list[str], letters: list[str]) -> str:
    try:
        return answer_letter(row["answer"], options, letters)
    except RowError:
        if isinstance(row.get("answer_text"), str):
            return answer_letter(row["answer_text"], options, letters)
        raise


def load(data_root: str | Path) -> tuple[list[Sample], list[BenchmarkError]]:
    root = find_root(data_root, FOLDER, "**/*.parquet", "**/*.jsonl")
    out = Collector(NAME, data_root)
    files = _annotation_files(root)
    for file in files:
        prefix = f"{file.stem}:" if len(files) > 1 else ""
        for index, row in _rows(file):
            try:
                if isinstance(row, RowError):
                    raise row
                require(row, "video", "question", "options", "answer")
                options = strip_letter_prefixes(as_options(row["options"]))
                letters = letters_for(options)
                extra = row.get("meta") if isinstance(row.get("meta"), dict) else {}
                meta = {
                    "task_type": row.get("qa_type"),
                    "qa_subtype": row.get("qa_subtype"),
                    "source": row.get("source"),
                    "answer_text": row.get("answer_text"),
                }
                window = evidence_window(row)
                if window:
                    meta["evidence_window"] = window
                out.add(
                    Sample(
                        NAME,
                        f"{prefix}{index:05d}",
                        out.rel(root / "videos" / str(row["video"])),
                        str(row["question"]),
                        options,
                        letters,
                        _gold(row, options, letters),
                        as_float(extra.get("duration"), "meta.duration"),
                        meta,
                    ),
                    file,
                    index,
                )
            except RowError as exc:
                out.error(file, index, str(exc))
    return out.result()
