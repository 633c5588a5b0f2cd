"""Video-MME, long-duration subset, without subtitles (benchmark name ``videomme_long``).

Expected layout under ``<data_root>/videomme/`` (the lmms-lab/Video-MME release):

    videomme/test-*.parquet      columns video_id, duration ("short"|"medium"|"long"), domain, sub_category, url,
                                 videoID, question_id, task_type, question, options (["A. ...", ...]), answer ("C")
    data/<videoID>.mp4           (also .MP4 / .mkv; the first that exists, else .mp4)

Every column is a string, ``options`` a list of strings (the dataset card's features). The video lookup follows
lmms-eval's ``videomme_doc_to_visual`` (``<cache>/data/<videoID>.mp4``, then ``.MP4``, then ``.mkv``); the
``duration == "long"`` filter is its ``videomme_process_docs_long``. Rows whose ``duration`` is not "long" are
skipped by design (not errors). ``sample_id`` = ``question_id``. Video-MME states no duration in seconds, so
``Sample.duration`` is None; ``meta["task_type"]`` = ``task_type``. A ``videoID`` that would leave the data root,
an empty question or option, and more than 26 options are row errors.
"""

from __future__ import annotations

from pathlib import Path

from cader.evaluate.benchmarks.base import (
    Benchmark,
    BenchmarkError,
    Collector,
    RowMapping,
    RowPlace,
    Sample,
    add_rows,
    answer_letter,
    as_options,
    as_text,
    find_root,
    read_parquet_rows,
    strip_letter_prefixes,
    with_evidence_window,
)

NAME = "videomme_long"
FOLDER = "videomme"


def _video_file(row: dict, place: RowPlace) -> Path:
    video_key = as_text(row["videoID"], "videoID")
    candidates = [
        place.out.inside(place.root / "data", f"{video_key}{suffix}", "videoID")
        for suffix in (".mp4", ".MP4", ".mkv")
    ]
    return next((c for c in candidates if c.exists()), candidates[0])


def _meta(row: dict, place: RowPlace, options: list[str]) -> dict:
    meta = {
        "task_type": row.get("task_type"),
        "domain": row.get("domain"),
        "sub_category": row.get("sub_category"),
        "video_id": row.get("video_id"),
        "videoID": row["videoID"],
        "duration_category": row["duration"],
    }
    return with_evidence_window(meta, row)


ROW = RowMapping(
    required=("duration", "videoID", "question_id", "question", "options", "answer"),
    skip=lambda row: row["duration"] != "long",
    sample_id=lambda row, place: str(row["question_id"]),
    question=lambda row, place: as_text(row["question"], "question"),
    options=lambda row, place: strip_letter_prefixes(as_options(row["options"])),
    answer=lambda row, options, letters: answer_letter(row["answer"], options, letters),
    video=_video_file,
    meta=_meta,
)


def load(data_root: str | Path) -> tuple[list[Sample], list[BenchmarkError]]:
    root = find_root(data_root, FOLDER, "videomme/*.parquet")
    out = Collector(NAME, data_root)
    for file in sorted((root / "videomme").glob("*.parquet")):
        add_rows(out, ROW, file, enumerate(read_parquet_rows(file)), root)
    return out.result()


BENCHMARK = Benchmark(
    name=NAME,
    folder=FOLDER,
    load=load,
    synthetic_writer="cader.dev.synthetic.eval_sets:write_videomme",
    write_order=0,
)
