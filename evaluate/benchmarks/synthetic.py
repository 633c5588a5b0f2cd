"""The synthetic benchmark written by ``scripts/make_synthetic_data.py`` (names ``synthetic`` and
``synthetic_heldout``: the test split and the held-out split used to fit calibration).

Layout under ``<data_root>/synthetic/``:

    test.jsonl, heldout.jsonl   {"id", "video" (relative to this folder), "duration" (s), "question",
                                 "options" [..], "answer" (letter), "evidence_window" [t_s, t_e], "colour"}
    videos/

``sample_id`` = ``id``; ``meta["evidence_window"]`` and ``meta["colour"]`` are copied from the row.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path

from cader.evaluate.benchmarks.base import (
    BenchmarkError,
    Collector,
    RowError,
    Sample,
    answer_letter,
    as_float,
    as_options,
    as_text,
    evidence_window,
    find_root,
    iter_jsonl,
    letters_for,
    require,
)

FOLDER = "synthetic"
SPLITS = {"synthetic": "test", "synthetic_heldout": "heldout"}


def load_split(data_root: str | Path, name: str) -> tuple[list[Sample], list[BenchmarkError]]:
    split = SPLITS[name]
    root = find_root(data_root, FOLDER, f"{split}.jsonl")
    out = Collector(name, data_root)
    file = root / f"{split}.jsonl"
    for line, row in iter_jsonl(file):
        try:
            if isinstance(row, RowError):
                raise row
            require(row, "id", "video", "question", "options", "answer")
            question = as_text(row["question"], "question")
            options = as_options(row["options"])
            letters = letters_for(options)
            meta = {"task_type": "colour", "split": split, "colour": row.get("colour")}
            window = evidence_window(row)
            if window:
                meta["evidence_window"] = window
            out.add(
                Sample(
                    name,
                    str(row["id"]),
                    out.rel(out.inside(root, row["video"], "video")),
                    question,
                    options,
                    letters,
                    answer_letter(row["answer"], options, letters),
                    as_float(row.get("duration"), "duration"),
                    meta,
                ),
                file,
                line,
            )
        except RowError as exc:
            out.error(file, line, str(exc))
    return out.result()


load = partial(load_split, name="synthetic")
load_heldout = partial(load_split, name="synthetic_heldout")
