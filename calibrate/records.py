"""Reading Stage-1 outcomes from predictions.jsonl files (`cader.contracts.records.PredictionRecord`); they are
split into fit and selection parts by `cader.calibrate.videos`.

Policy: bad input never crashes a run and is never silently dropped.
- a row whose ``error`` is set is a failed sample: counted under "row_error" and skipped;
- a malformed row (bad JSON, blank line, missing logits, a NaN or infinite logit or margin, which the
  PredictionRecord contract refuses: "non_finite", logits not matching the letters, answer not among the letters,
  then anything else the contract refuses: "invalid_record") is skipped and recorded as a RowProblem naming file,
  line and sample (and the field); with ``strict=True`` the first one raises PredictionRowError instead;
- a file that is missing, empty, or has no usable row raises PredictionFileError naming the file (and the
  first problem's line), because calibrating on nothing must not look like success.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from cader.calibrate.margin import InvalidLogits, validate_logits
from cader.contracts.jsonl import LineProblem, iter_lines
from cader.contracts.records import NON_FINITE, PredictionRecord, present_field_problem

log = logging.getLogger(__name__)


class PredictionFileError(ValueError):
    """A predictions file that cannot be used at all."""


class PredictionRowError(ValueError):
    """One unusable row; the message reads ``<file>:<line>: <what is wrong>``."""

    def __init__(self, path: str, line: int, reason: str, message: str):
        super().__init__(f"{path}:{line}: {message}")
        self.path, self.line, self.reason = path, line, reason


@dataclass(frozen=True)
class RowProblem:
    path: str
    line: int
    reason: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.message}"


@dataclass
class Stage1Record:
    source: str
    line: int
    benchmark: str
    sample_id: str
    letters: list[str]
    logits: np.ndarray  # raw option logits, float64, same order as letters
    gold: int  # index of the answer letter
    stage2_correct: bool | None = None  # outcome had this sample gone to Stage 2 (None = unknown)
    video: str | None = None  # the row's video path; questions on one video share its difficulty
    fingerprint: dict | None = None  # stage1.fingerprint: the model and frame settings the logits came from
    n_frames: int | None = None  # stage1.n_frames: frames Stage 1 showed the model

    @property
    def key(self) -> tuple[str, str]:
        return (self.benchmark, self.sample_id)


@dataclass
class LoadedPredictions:
    records: list[Stage1Record]
    problems: list[RowProblem] = field(default_factory=list)  # malformed rows, each named by file and line
    skipped: Counter = field(
        default_factory=Counter
    )  # reason -> count (row_error, non_finite, duplicate, ...)
    rows_read: int = 0
    rows_without_video: int = 0  # usable rows with no video path: each is split as a video of its own


def _row_to_record(row, path: str, line: int) -> Stage1Record:
    def bad(reason: str, message: str):
        sid = row.get("sample_id") if isinstance(row, dict) else None
        where = f" (sample {row.get('benchmark')}/{sid})" if sid is not None else ""
        raise PredictionRowError(path, line, reason, message + where)

    if not isinstance(row, dict):
        bad("not_an_object", f"expected a JSON object, got {type(row).__name__}")
    for key in ("benchmark", "sample_id", "letters", "answer"):
        if key not in row:
            bad("missing_field", f"missing field {key!r}")
    stage1 = row.get("stage1")
    if not isinstance(stage1, dict) or stage1.get("logits") is None:
        bad("missing_logits", "no stage1.logits (raw option logits are required for calibration)")
    # Fields calibration does not need may be absent; those present must keep the contract, whose non-finite
    # numbers are named first (the contract, not this reader, says what a usable logit or margin is)
    problem = present_field_problem(PredictionRecord, row)
    if problem is not None and problem[0] == NON_FINITE:
        bad(NON_FINITE, f"breaks the predictions contract: {problem[1]}")
    letters = row["letters"]
    if (
        not isinstance(letters, list)
        or not all(isinstance(x, str) for x in letters)
        or len(set(letters)) != len(letters)
    ):
        bad("bad_letters", f"letters must be a list of distinct strings, got {letters!r}")
    try:
        logits = validate_logits(stage1["logits"])
    except InvalidLogits as exc:
        bad(exc.reason, f"stage1.logits: {exc}")
    if len(logits) != len(letters):
        bad("length_mismatch", f"{len(logits)} logits for {len(letters)} letters")
    answer = row["answer"]
    if answer is None:
        bad("no_answer", "answer is null (no gold letter to calibrate against)")
    if answer not in letters:
        bad("answer_not_in_letters", f"answer {answer!r} is not one of {letters}")
    gold = letters.index(answer)
    if problem is not None:
        bad("invalid_record", f"breaks the predictions contract: {problem[1]}")
    stage2_correct = None
    stage2 = row.get("stage2")
    if row.get("route") == "stage2" and isinstance(stage2, dict):
        # a Stage-2 fallback (too broad / not accepted) returns the Stage-1 answer, recorded as the final pred
        s2_pred = stage2.get("pred") if stage2.get("pred") is not None else row.get("pred")
        if s2_pred is not None:
            stage2_correct = s2_pred == answer
    return Stage1Record(
        source=path,
        line=line,
        benchmark=str(row["benchmark"]),
        sample_id=str(row["sample_id"]),
        letters=list(letters),
        logits=logits,
        gold=gold,
        stage2_correct=stage2_correct,
        video=row["video"] if isinstance(row.get("video"), str) and row["video"] else None,
        fingerprint=stage1.get("fingerprint") if isinstance(stage1.get("fingerprint"), dict) else None,
        n_frames=stage1.get("n_frames") if isinstance(stage1.get("n_frames"), int) else None,
    )


def read_prediction_file(path: str | Path, strict: bool = False) -> LoadedPredictions:
    path_s = str(path)
    p = Path(path)
    if not p.is_file():
        raise PredictionFileError(f"{path_s}: no such predictions file")
    out = LoadedPredictions(records=[])
    for line_no, row in iter_lines(p, keep_blank=True):
        out.rows_read += 1
        try:
            if isinstance(row, LineProblem):
                raise PredictionRowError(path_s, line_no, row.reason, row.message)
            if isinstance(row, dict) and row.get("error"):
                out.skipped["row_error"] += 1  # a failed sample, already reported by the run that wrote it
                continue
            out.records.append(_row_to_record(row, path_s, line_no))
            out.rows_without_video += out.records[-1].video is None
        except PredictionRowError as exc:
            if strict:
                raise
            out.problems.append(RowProblem(path_s, line_no, exc.reason, str(exc).split(": ", 1)[1]))
            out.skipped[exc.reason] += 1
    if out.rows_read == 0:
        raise PredictionFileError(f"{path_s}: empty predictions file (no rows)")
    if not out.records:
        first = f"; first problem: {out.problems[0]}" if out.problems else ""
        raise PredictionFileError(
            f"{path_s}: no usable row with stage1.logits and a gold answer among {out.rows_read} rows "
            f"(skipped: {dict(out.skipped)}){first}"
        )
    return out


def read_predictions(paths: Sequence[str | Path], strict: bool = False) -> LoadedPredictions:
    """Read several files; a sample present in more than one (same benchmark and sample_id) is kept once,
    its Stage-2 outcome taken from whichever file has it (a no_stage2 file plus a uniform_stage2 file)."""
    if not paths:
        raise PredictionFileError("no predictions files given")
    merged = LoadedPredictions(records=[])
    by_key: dict[tuple[str, str], Stage1Record] = {}
    for path in paths:
        loaded = read_prediction_file(path, strict=strict)
        merged.problems += loaded.problems
        merged.skipped.update(loaded.skipped)
        merged.rows_read += loaded.rows_read
        for rec in loaded.records:
            seen = by_key.get(rec.key)
            if seen is None:
                by_key[rec.key] = rec
                merged.records.append(rec)
                continue
            merged.skipped["duplicate"] += 1
            if seen.stage2_correct is None and rec.stage2_correct is not None:
                seen.stage2_correct = rec.stage2_correct
    # counted on the merged samples: a sample in two files (a Stage-1 and a uniform_stage2 run) is one row
    merged.rows_without_video = sum(rec.video is None for rec in merged.records)
    return merged
