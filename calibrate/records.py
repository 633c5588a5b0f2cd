"""Reading Stage-1 outcomes from predictions.jsonl files (`cader.contracts.records.PredictionRecord`) and
splitting them.

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
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

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

    @property
    def cluster(self) -> tuple[str, str]:
        """(benchmark, video); a row without a video is a cluster of its own (it cannot be matched to others)."""
        return (self.benchmark, self.video) if self.video else (self.benchmark, "\0sample:" + self.sample_id)


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


SPLIT_UNITS = ("video", "question")


def _split_by(records: list[Stage1Record], seed: int, fit_fraction: float, by: str) -> tuple[list, list]:
    rng = np.random.default_rng(seed)
    units: dict[str, dict[tuple, list[int]]] = {}  # benchmark -> unit key -> record indices
    for i in sorted(range(len(records)), key=lambda i: records[i].key):
        rec = records[i]
        unit = rec.cluster if by == "video" else rec.key
        units.setdefault(rec.benchmark, {}).setdefault(unit, []).append(i)
    fit, select = [], []
    for bench in sorted(units):
        keys = list(units[bench])  # in order of each unit's first record key, so one question per video splits
        order = rng.permutation(len(keys))  # alike by either unit
        n_fit = int(np.floor(len(keys) * fit_fraction))
        for rank, k in enumerate(order):
            (fit if rank < n_fit else select).extend(units[bench][keys[k]])
    return fit, select


def split_fit_select(
    records: Iterable[Stage1Record],
    seed: int = 0,
    fit_fraction: float = 0.5,
    *,
    by: Literal["video", "question"] = "video",
) -> tuple[np.ndarray, np.ndarray]:
    """Disjoint index arrays (fit, select) into ``records`` (`split_fit_select_unit` without the unit used)."""
    fit, select, _ = split_fit_select_unit(records, seed, fit_fraction, by=by)
    return fit, select


def split_fit_select_unit(
    records: Iterable[Stage1Record],
    seed: int = 0,
    fit_fraction: float = 0.5,
    *,
    by: Literal["video", "question"] = "video",
) -> tuple[np.ndarray, np.ndarray, str]:
    """Disjoint index arrays (fit, select) into ``records``, stratified by benchmark, reproducible for a seed, and
    the unit the split actually kept together ("video" or "question": calibration.json records this one).

    Args:
        records: the usable Stage-1 records
        seed: seed of the shuffle
        fit_fraction: share of each benchmark's videos (or questions) that fits T; the rest selects tau
        by: "video" (default) keeps every video's questions on one side, so the selection split is a sample of
            videos the temperature fit never saw (questions on one video share its difficulty); "question" splits
            questions independently (kept for comparison)

    Units (videos or questions) are ordered by their first record's key before shuffling, so the split does not
    depend on file order, and with one question per video both units give the same split. Each benchmark sends
    floor(units * fit_fraction) of its units to the fit part, so a benchmark with a single unit goes to the
    selection split. When no benchmark has two videos (a calibration set cut from one video), a video split would
    leave nothing to fit T on: the split falls back to questions, logs a warning saying so and returns "question".
    """
    if not 0.0 < fit_fraction < 1.0:
        raise ValueError(f"fit_fraction must be in (0, 1), got {fit_fraction}")
    if by not in SPLIT_UNITS:
        raise ValueError(f"split unit must be one of {SPLIT_UNITS}, got {by!r}")
    records = list(records)
    fit, select = _split_by(records, seed, fit_fraction, by)
    used = by
    if by == "video" and records and not fit:
        log.warning(
            "split by video leaves nothing to fit the temperature on (no benchmark has two or more videos among "
            "%d records); splitting questions instead, so fit and selection share videos", len(records)
        )
        fit, select = _split_by(records, seed, fit_fraction, "question")
        used = "question"
    return np.asarray(sorted(fit), dtype=np.int64), np.asarray(sorted(select), dtype=np.int64), used
