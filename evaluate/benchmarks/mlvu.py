"""MLVU dev, multiple-choice tasks (benchmark name ``mlvu_dev``; the paper's M-Avg is the macro mean over
``meta["task_type"]``).

Expected layout under ``<data_root>/mlvu/`` (the MLVU/MVLU release):

    MLVU/json/<n>_<task>.json    a list of rows: video (file name), duration (s, a number), question,
                                 candidates (list of strings), answer (the candidate's text), question_type
    MLVU/video/<n>_<task>/<video>

The open-ended generation tasks (``8_sub_scene.json``, ``9_summary.json``, any file whose rows have no
``candidates``) are not multiple choice and are skipped as whole files by design. ``sample_id`` =
``<json stem>-<row index>`` (e.g. ``1_plotQA-0``).

Scoring follows the official multiple-choice scorer (``choice_bench.py`` in the MLVU repository): every row of a
task file is scored and counted in that task's denominator; the task is the file (``<task>`` of
``<n>_<task>.json``, which is ``meta["task_type"]``); the gold option is the *last* candidate exactly equal to
``answer``. Two kinds of release rows are kept, not rejected, and flagged in ``meta``:

* ``meta["duplicate_options"]``: some candidate text occurs more than once (the gold is still the last match);
* ``meta["answer_not_in_options"]``: no candidate equals ``answer``. The official scorer's gold index is then -1,
  rendered as the character before "A", so no prediction can match it; ``Sample.answer`` is that character
  (``NO_MATCH``), the row counts as wrong for every system, exactly as in the official M-Avg.
* ``meta["empty_question"]``: the question text is blank; ``meta["empty_options"]``: the letters whose candidate
  text is blank. The official scorer formats them into its prompt as they are ("Question: \\n", "(B) ") and scores
  the row, so they are asked as they are here too (other loaders reject such rows: their scorers are not this one).

What still makes a row error: a missing field, or a question, candidate or answer that is not text at all (the
official scorer would print ``None`` into its prompt: a broken row, not a release quirk), and more than 26 candidates.
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
    find_root,
    read_json_rows,
    with_evidence_window,
)

NAME = "mlvu_dev"
FOLDER = "mlvu"
GENERATION_FILES = ("8_sub_scene", "9_summary")
NO_MATCH = chr(ord("A") - 1)  # the official scorer's letter for answer index -1


def official_gold(answer: str, options: list[str]) -> str:
    """The letter the official scorer expects: the last candidate equal (exactly) to the answer text."""
    matches = [i for i, option in enumerate(options) if option == answer]
    return LETTERS[matches[-1]] if matches else NO_MATCH


def task_of(stem: str) -> str:
    """``1_plotQA`` -> ``plotQA``: the official scorer groups (and names) tasks by their annotation file."""
    head, _, tail = stem.partition("_")
    return tail if head.isdigit() and tail else stem


def release_text(value, what: str) -> str:
    """Text as released, blank allowed (the official scorer asks blank text as it is); not text is a row error."""
    if not isinstance(value, str):
        raise RowError(f"{what} must be text, got {value!r}")
    return value


def release_options(value) -> list[str]:
    """The candidates as released: a list of texts, blank ones allowed (flagged in meta)."""
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise RowError(f"candidates must be a list of strings, got {value!r}")
    return list(value)


def _meta(row: dict, place: RowPlace, options: list[str]) -> dict:
    meta = {"task_type": task_of(place.file.stem), "question_type": row.get("question_type")}
    if not row["question"].strip():
        meta["empty_question"] = True
    blank = [LETTERS[i] for i, option in enumerate(options) if not option.strip()]
    if blank:
        meta["empty_options"] = blank
    if len(set(options)) < len(options):
        meta["duplicate_options"] = True
    if official_gold(row["answer"], options) == NO_MATCH:
        meta["answer_not_in_options"] = True
    return with_evidence_window(meta, row)


ROW = RowMapping(
    required=("video", "question", "candidates", "answer"),
    sample_id=lambda row, place: f"{place.file.stem}-{place.row}",
    question=lambda row, place: release_text(row["question"], "question"),
    options=lambda row, place: release_options(row["candidates"]),
    answer=lambda row, options, letters: official_gold(release_text(row["answer"], "answer"), options),
    video=lambda row, place: place.out.inside(
        place.root / "MLVU" / "video" / place.file.stem, row["video"], "video"
    ),
    meta=_meta,
    duration=lambda row, place: as_float(row.get("duration"), "duration"),
    order=("answer", "meta", "video"),
)


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
        add_rows(out, ROW, file, enumerate(rows), root)
    return out.result()


BENCHMARK = Benchmark(
    name=NAME,
    folder=FOLDER,
    load=load,
    macro_metric="M-Avg",  # the paper's Table 1 reports MLVU as M-Avg
    synthetic_writer="cader.dev.synthetic.eval_sets:write_mlvu",
    write_order=1,
)
