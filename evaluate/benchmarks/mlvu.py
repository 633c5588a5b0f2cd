"""MLVU dev, multiple-choice tasks (benchmark name ``mlvu_dev``; the paper's M-Avg is the macro mean over
``meta["task_type"]``).

Expected layout under ``<data_root>/mlvu/`` (the MLVU/MVLU release):

    MLVU/json/<n>_<task>.json    a list of rows: video (file name), duration (s), question, candidates (list),
                                 answer (the candidate's text), question_type
    MLVU/video/<n>_<task>/<video>

The open-ended generation tasks (``8_sub_scene.json``, ``9_summary.json``, any file whose rows have no
``candidates``) are not multiple choice and are skipped as whole files by design. ``sample_id`` =
``<json stem>-<row index>`` (e.g. ``1_plotQA-0``). The gold letter is the candidate equal to ``answer``.
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
    letters_for,
    read_json_rows,
    require,
)

NAME = "mlvu_dev"
FOLDER = "mlvu"
GENERATION_FILES = ("8_sub_scene", "9_summary")


def load(data_root: str | Path) -> tuple[list[Sample], list[BenchmarkError]]:
    root = find_root(data_root, FOLDER, "MLVU/json/*.json")
    out = Collector(NAME, data_root)
    for file in sorted((root / "MLVU" / "json").glob("*.json")):
        if file.stem in GENERATION_FILES:
            continue
        try:
            rows = read_json_rows(file)
        except (ValueError, TypeError) as exc:
            out.error(file, None, str(exc))
            continue
        if rows and all(isinstance(r, dict) and "candidates" not in r for r in rows):
            continue  # an open-ended task file
        task_from_file = file.stem.split("_", 1)[-1]
        for index, row in enumerate(rows):
            try:
                require(row, "video", "question", "candidates", "answer")
                options = as_options(row["candidates"])
                letters = letters_for(options)
                meta = {"task_type": row.get("question_type") or task_from_file}
                window = evidence_window(row)
                if window:
                    meta["evidence_window"] = window
                video = root / "MLVU" / "video" / file.stem / str(row["video"])
                out.add(
                    Sample(
                        NAME,
                        f"{file.stem}-{index}",
                        out.rel(video),
                        str(row["question"]),
                        options,
                        letters,
                        answer_letter(row["answer"], options, letters),
                        as_float(row.get("duration"), "duration"),
                        meta,
                    ),
                    file,
                    index,
                )
            except RowError as exc:
                out.error(file, index, str(exc))
    return out.result()
