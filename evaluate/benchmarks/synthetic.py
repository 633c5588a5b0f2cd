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
    Benchmark,
    BenchmarkError,
    Collector,
    RowMapping,
    Sample,
    add_rows,
    answer_letter,
    as_float,
    as_options,
    as_text,
    find_root,
    iter_jsonl,
    with_evidence_window,
)

FOLDER = "synthetic"
SPLITS = {"synthetic": "test", "synthetic_heldout": "heldout"}

ROW = RowMapping(
    required=("id", "video", "question", "options", "answer"),
    sample_id=lambda row, place: str(row["id"]),
    question=lambda row, place: as_text(row["question"], "question"),
    options=lambda row, place: as_options(row["options"]),
    answer=lambda row, options, letters: answer_letter(row["answer"], options, letters),
    video=lambda row, place: place.out.inside(place.root, row["video"], "video"),
    # the split (place.context) is kept so a run over both splits can tell them apart
    meta=lambda row, place, options: with_evidence_window(
        {"task_type": "colour", "split": place.context, "colour": row.get("colour")}, row
    ),
    duration=lambda row, place: as_float(row.get("duration"), "duration"),
    order=("meta", "video", "answer"),
)


def load_split(data_root: str | Path, name: str) -> tuple[list[Sample], list[BenchmarkError]]:
    split = SPLITS[name]
    root = find_root(data_root, FOLDER, f"{split}.jsonl")
    out = Collector(name, data_root)
    file = root / f"{split}.jsonl"
    add_rows(out, ROW, file, iter_jsonl(file), root, context=split)
    return out.result()


load = partial(load_split, name="synthetic")
load_heldout = partial(load_split, name="synthetic_heldout")

BENCHMARKS = (
    Benchmark(
        name="synthetic",
        folder=FOLDER,
        load=load,
        synthetic_writer="cader.dev.synthetic.eval_sets:write_synthetic_test",
        synthetic_size="test",
        released=False,
        write_order=6,
    ),
    Benchmark(
        name="synthetic_heldout",
        folder=FOLDER,
        load=load_heldout,
        synthetic_writer="cader.dev.synthetic.eval_sets:write_synthetic_heldout",
        synthetic_size="heldout",
        released=False,
        write_order=7,
    ),
)
