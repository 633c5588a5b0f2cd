"""The files a run writes and reads back: predictions.jsonl (records through the contract, one per sample), the
timings.jsonl beside it (wall-clock seconds kept apart, so records compare equal across machines), and the merge of
per-shard files into one (`--shard I/N` writes predictions.shard-I-of-N.jsonl)."""

from __future__ import annotations

import logging
from contextlib import ExitStack
from pathlib import Path

from cader.contracts.jsonl import JsonlAppender, exclusive_writer, jsonl_line, read_validated
from cader.contracts.records import PredictionRecord, TimingRecord, split_timing
from cader.evaluate.shards import PREDICTIONS
from cader.vlm.files import write_atomic

log = logging.getLogger(__name__)


def read_records(path: str | Path) -> list[dict]:
    """The predictions records of `path` that satisfy the contract, in order (a missing file is empty); every other
    line (torn, not UTF-8, not JSON, breaking the contract) is logged with file, line and field, and skipped. A
    second record of a sample (two runs that once wrote one file) is logged and left out: the first one counts."""
    read = read_validated(path, PredictionRecord)
    for problem in read.problems:
        log.warning("skipped a predictions line: %s", problem)
    seen, records = {}, []
    for line, record in zip(read.lines, read.records):
        key = record_key(record)
        if key in seen:
            log.warning("skipped a predictions line: %s:%d: a second record of %s/%s (line %d counts)", path, line,
                        *key, seen[key])
            continue
        seen[key] = line
        records.append(record)
    return records


def record_key(record: dict) -> tuple[str, str]:
    return str(record.get("benchmark")), str(record.get("sample_id"))


def timings_path(predictions_file: str | Path) -> Path:
    """The wall-clock side file of a predictions file: timings.jsonl beside predictions.jsonl,
    timings.shard-I-of-N.jsonl beside a shard's file, <stem>.timings.jsonl beside a file of any other name."""
    path = Path(predictions_file)
    stem = PREDICTIONS.removesuffix(".jsonl")
    if path.name.startswith(stem):
        return path.with_name("timings" + path.name[len(stem):])
    return path.with_name(f"{path.stem}.timings.jsonl")


def read_timings(predictions_file: str | Path) -> dict[tuple[str, str], float]:
    """(benchmark, sample_id) -> seconds from the timings file of `predictions_file` (missing: empty). A sample run
    again (--retry_failed) has a later line, which counts; a line that breaks the contract is logged and skipped."""
    read = read_validated(timings_path(predictions_file), TimingRecord)
    for problem in read.problems:
        log.warning("skipped a timings line: %s", problem)
    return {record_key(t): float(t["seconds"]) for t in read.records}


class RecordWriter:
    """Appends a sample's record to its predictions file and its wall-clock time to the timings file beside it."""

    def __init__(self, predictions_file: str | Path):
        self.records = JsonlAppender(predictions_file, fsync=True)
        self.timings = JsonlAppender(timings_path(predictions_file))

    def write(self, record: dict) -> None:
        kept, timing = split_timing(record)
        self.records.write(kept)
        if timing is not None:   # after the record: a timing never names a sample the predictions lack
            self.timings.write(timing)

    def close(self) -> None:
        self.records.close()
        self.timings.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def merge_shards(out_dir: str | Path) -> tuple[Path, int]:
    """Join predictions.shard-*-of-N.jsonl (and an existing predictions.jsonl) into predictions.jsonl, and their
    timings files into timings.jsonl (`merge_timings`).

    Duplicates (same benchmark + sample_id): a record without `error` beats a failed one (a shard rerun with
    --retry_failed replaces the failures an earlier merge kept), else the first seen stays. Written atomically.
    """
    out_dir = Path(out_dir)
    target = out_dir / PREDICTIONS
    sources = ([target] if target.exists() else []) + sorted(out_dir.glob("predictions.shard-*-of-*.jsonl"))
    merged: dict = {}
    with ExitStack() as locks:  # no shard still being written, no second merge rewriting the target
        for source in dict.fromkeys([target, *sources]):
            locks.enter_context(exclusive_writer(source))
        for source in sources:
            for record in read_records(source):
                kept = merged.get(record_key(record))
                if kept is None or (kept.get("error") and not record.get("error")):
                    merged[record_key(record)] = record  # a replaced key keeps its first position
        write_atomic(target, (jsonl_line(record) for record in merged.values()))
        merge_timings(sources, target)
    return target, len(merged)


def merge_timings(sources: list[Path], target: Path) -> None:
    """The timings files of the predictions files `sources` joined into the one of `target` (a sample timed twice:
    the later source counts, as a rerun's line does within one file). Nothing is written when none has timings."""
    timings = {}
    for source in sources:
        timings.update(read_timings(source))
    if timings:
        write_atomic(timings_path(target), (jsonl_line({"benchmark": benchmark, "sample_id": sample, "seconds": t})
                                            for (benchmark, sample), t in timings.items()))
