"""Reading AgentVidBench questions.jsonl / videos.jsonl (through the benchmark's release parser,
``cader.evaluate.benchmarks.agentvidbench``) and predictions.jsonl; bad rows become errors naming file+line."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from cader.contracts.records import PredictionRecord, describe_errors, present_field_errors
from cader.evaluate.benchmarks.agentvidbench import parse_question
from cader.evaluate.benchmarks.base import RowError


class InputRowError(ValueError):
    """A malformed input row; the message names the file and 1-based line."""


class InputFileError(OSError):
    """An input file that is missing or unreadable as a whole; the one-line message names the path."""

    def __init__(self, path: str | Path, error: OSError | None = None):
        why = "no such file" if error is None or isinstance(error, FileNotFoundError) else \
            (error.strerror or type(error).__name__).lower()
        super().__init__(f"{path}: {why}")
        self.path = Path(path)


@dataclass
class Question:
    """What the judge needs of one AgentVidBench question; ``question`` is the release's ``question_text``."""

    question_id: int | str
    question: str
    options: list[str]
    answer: str | None
    milestones: list[dict]
    ecom_required: bool | None = None
    video_id: str | None = None
    difficulty: str | None = None
    category: str | None = None  # the first of ``categories``
    skills: list[str] = field(default_factory=list)
    categories: list[str] = field(default_factory=list)
    video_path: str | None = None
    transcript_path: str | None = None
    title: str | None = None
    answer_explanation: str | None = None

    @property
    def key(self) -> str:
        return str(self.question_id)


def _decode_line(raw: bytes) -> str:
    """One line as UTF-8 text; a byte that is not UTF-8 is a ValueError naming its column (1-based)."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as error:
        bad = raw[error.start:error.start + 1].hex()
        raise ValueError(f"not UTF-8 (byte 0x{bad} at column {error.start + 1})") from None


def _read_jsonl(path: Path) -> tuple[list[tuple[int, dict]], list[InputRowError]]:
    """(line number, object) per JSON line. The file is read as bytes and each line decoded on its own, so one
    line that is not UTF-8 (or not JSON, or not an object) is an error naming file and line, never the end of
    the run. A file that cannot be opened at all raises InputFileError."""
    rows, errors = [], []
    try:
        data = path.read_bytes()
    except OSError as error:
        raise InputFileError(path, error) from None
    # b"\n" only: the JSON Lines separator (a U+2028 inside a string is part of that line)
    for line_no, raw in enumerate(data.split(b"\n"), start=1):
        try:
            text = _decode_line(raw.rstrip(b"\r"))
        except ValueError as error:
            errors.append(InputRowError(f"{path}:{line_no}: {error}"))
            continue
        if line_no == 1:
            text = text.removeprefix("\ufeff")  # a byte-order mark some editors write
        if not text.strip():
            continue
        try:
            value = json.loads(text)
        except json.JSONDecodeError as error:
            errors.append(InputRowError(f"{path}:{line_no}: invalid JSON ({error.msg} at column {error.colno})"))
            continue
        if not isinstance(value, dict):
            errors.append(InputRowError(f"{path}:{line_no}: expected a JSON object, got {type(value).__name__}"))
        else:
            rows.append((line_no, value))
    return rows, errors


def _question_from_row(row: dict) -> Question:
    """The release row through the benchmark's own parser (one reading of the file for loader and judge); the
    judge additionally needs milestones to judge against."""
    try:
        parsed = parse_question(row)
    except RowError as error:
        raise ValueError(str(error)) from None
    if not parsed.milestones:
        raise ValueError("'milestones' must be a non-empty list")
    return Question(question_id=parsed.question_id, question=parsed.question_text, options=parsed.options,
                    answer=parsed.answer, milestones=parsed.milestones, ecom_required=parsed.ecom_required,
                    video_id=parsed.video_id, difficulty=parsed.difficulty,
                    category=parsed.categories[0] if parsed.categories else None, skills=parsed.skills,
                    categories=parsed.categories, video_path=parsed.video_path,
                    transcript_path=parsed.transcript_path, title=parsed.title,
                    answer_explanation=parsed.answer_explanation)


def load_questions(path: str | Path) -> tuple[dict[str, Question], list[InputRowError]]:
    """Questions keyed by str(question_id); malformed or duplicate rows are returned as errors."""
    path = Path(path)
    rows, errors = _read_jsonl(path)
    questions: dict[str, Question] = {}
    for line_no, row in rows:
        try:
            question = _question_from_row(row)
        except ValueError as error:
            errors.append(InputRowError(f"{path}:{line_no}: {error}"))
            continue
        if question.key in questions:
            errors.append(InputRowError(f"{path}:{line_no}: duplicate question_id {question.question_id!r}"))
            continue
        questions[question.key] = question
    return questions, errors


def prediction_key(row: dict) -> str | None:
    """The AgentVidBench question a predictions.jsonl row answers (question_id, else meta.question_id)."""
    for value in (row.get("question_id"), (row.get("meta") or {}).get("question_id")):
        if value is not None:
            return str(value)
    return None


def load_predictions(path: str | Path) -> tuple[dict[str, dict], list[InputRowError]]:
    """Prediction rows keyed by question id; for a repeated id the last row wins (reruns append).

    The judge also reads other frameworks' records (a single `response`, a `trajectory`), so a row need not have
    every field of the predictions contract; the fields it has must have the contract's types, or the row is an
    error naming file, line and field."""
    path = Path(path)
    rows, errors = _read_jsonl(path)
    predictions: dict[str, dict] = {}
    for line_no, row in rows:
        key = prediction_key(row)
        if key is None:
            errors.append(InputRowError(f"{path}:{line_no}: no 'question_id' in prediction row"))
            continue
        wrong = present_field_errors(PredictionRecord, row)
        if wrong:
            errors.append(InputRowError(f"{path}:{line_no}: breaks the predictions contract: {describe_errors(wrong)}"))
            continue
        predictions[key] = row
    return predictions, errors
