"""LongVideoBench validation set (benchmark name ``longvideobench_val``).

Expected layout under ``<data_root>/longvideobench/`` (the longvideobench/LongVideoBench release):

    lvb_val.json        a list of rows: video_id, question, candidates (list, 4-5), correct_choice (0-based int),
                        id, video_path, subtitle_path, duration (s), duration_group (int), question_category,
                        topic_category, starting_timestamp_for_subtitles, ...
    videos/<video_path>          (from videos.tar.part.*)
    subtitles/<subtitle_path>    (from subtitles.tar)

This is what the official ``LongVideoBenchDataset`` reads (``<data_path>/lvb_val.json``, videos under
``videos/``, subtitles under ``subtitles/``, gold ``chr(ord("A") + correct_choice)``). ``sample_id`` = ``id``;
``meta["task_type"]`` = ``question_category``; ``meta["subtitle_path"]`` is relative to the data root.
"""

from __future__ import annotations

from pathlib import Path

from cader.evaluate.benchmarks.base import (
    LETTERS,
    Benchmark,
    BenchmarkError,
    Collector,
    RowError,
    RowMapping,
    RowPlace,
    Sample,
    add_rows,
    as_float,
    as_options,
    as_text,
    find_root,
    read_json_rows,
    with_evidence_window,
)

NAME = "longvideobench_val"
FOLDER = "longvideobench"


def _gold(row: dict, options: list[str], letters: list[str]) -> str:
    choice = row["correct_choice"]
    if isinstance(choice, bool) or not isinstance(choice, int) or not 0 <= choice < len(options):
        raise RowError(f"correct_choice {choice!r} is not an index into {len(options)} candidates")
    return LETTERS[choice]


def _meta(row: dict, place: RowPlace, options: list[str]) -> dict:
    meta = {
        "task_type": row.get("question_category"),
        "duration_group": row.get("duration_group"),
        "level": row.get("level"),
        "video_id": row.get("video_id"),
    }
    if row.get("subtitle_path") is not None:
        subtitle = place.out.inside(place.root / "subtitles", row["subtitle_path"], "subtitle_path")
        meta["subtitle_path"] = place.out.rel(subtitle)
    return with_evidence_window(meta, row)


ROW = RowMapping(
    required=("id", "video_path", "question", "candidates", "correct_choice"),
    sample_id=lambda row, place: str(row["id"]),
    question=lambda row, place: as_text(row["question"], "question"),
    options=lambda row, place: as_options(row["candidates"]),
    answer=_gold,
    video=lambda row, place: place.out.inside(place.root / "videos", row["video_path"], "video_path"),
    meta=_meta,
    duration=lambda row, place: as_float(row.get("duration"), "duration"),
    order=("answer", "meta", "video"),
)


def load(data_root: str | Path) -> tuple[list[Sample], list[BenchmarkError]]:
    root = find_root(data_root, FOLDER, "lvb_val.json")
    out = Collector(NAME, data_root)
    file = root / "lvb_val.json"
    try:
        rows = read_json_rows(file)
    except (ValueError, TypeError) as exc:
        out.error(file, None, str(exc))
        return out.result()
    add_rows(out, ROW, file, enumerate(rows), root)
    return out.result()


BENCHMARK = Benchmark(
    name=NAME,
    folder=FOLDER,
    load=load,
    synthetic_writer="cader.dev.synthetic.eval_sets:write_longvideobench",
    write_order=2,
)
