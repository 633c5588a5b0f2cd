"""Reading AgentVidBench questions.jsonl / videos.jsonl and predictions.jsonl; bad rows become errors naming file+line."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path


class InputRowError(ValueError):
    """A malformed input row; the message names the file and 1-based line."""


@dataclass
class Question:
    question_id: int | str
    question: str
    options: list[str]
    answer: str | None
    milestones: list[dict]
    ecom_required: bool | None = None
    video_id: str | None = None
    difficulty: str | None = None
    category: str | None = None
    skills: list[str] = field(default_factory=list)

    @property
    def key(self) -> str:
        return str(self.question_id)


def _read_jsonl(path: Path) -> tuple[list[tuple[int, dict]], list[InputRowError]]:
    rows, errors = [], []
    with open(path, encoding="utf-8") as handle:
        for line_no, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                value = json.loads(line)
            except json.JSONDecodeError as error:
                errors.append(InputRowError(f"{path}:{line_no}: invalid JSON ({error.msg})"))
                continue
            if not isinstance(value, dict):
                errors.append(InputRowError(f"{path}:{line_no}: expected a JSON object, got {type(value).__name__}"))
                continue
            rows.append((line_no, value))
    return rows, errors


def _question_from_row(row: dict) -> Question:
    for name in ("question_id", "question", "options", "milestones"):
        if name not in row:
            raise ValueError(f"missing field '{name}'")
    options = row["options"]
    if not isinstance(options, list) or not options or not all(isinstance(o, str) for o in options):
        raise ValueError("'options' must be a non-empty list of strings")
    milestones = row["milestones"]
    if not isinstance(milestones, list) or not milestones:
        raise ValueError("'milestones' must be a non-empty list")
    seen = set()
    for index, milestone in enumerate(milestones):
        if not isinstance(milestone, dict) or not isinstance(milestone.get("id"), str):
            raise ValueError(f"milestone {index} needs a string 'id'")
        if milestone["id"] in seen:
            raise ValueError(f"duplicate milestone id {milestone['id']!r}")
        seen.add(milestone["id"])
    ecom = row.get("ecom_required")
    if ecom is not None and not isinstance(ecom, bool):
        raise ValueError("'ecom_required' must be true, false or absent")
    skills = row.get("skills") or []
    if isinstance(skills, str):
        skills = [skills]
    answer = row.get("answer")
    return Question(question_id=row["question_id"], question=str(row["question"]), options=options,
                    answer=str(answer).strip().upper() if answer is not None else None, milestones=milestones,
                    ecom_required=ecom, video_id=row.get("video_id"), difficulty=row.get("difficulty"),
                    category=row.get("category"), skills=list(skills))


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


def load_videos(path: str | Path) -> tuple[dict[str, dict], list[InputRowError]]:
    """videos.jsonl rows keyed by video_id."""
    path = Path(path)
    rows, errors = _read_jsonl(path)
    videos: dict[str, dict] = {}
    for line_no, row in rows:
        if not isinstance(row.get("video_id"), str) or not isinstance(row.get("path"), str):
            errors.append(InputRowError(f"{path}:{line_no}: needs string 'video_id' and 'path'"))
            continue
        videos[row["video_id"]] = row
    return videos, errors


def prediction_key(row: dict) -> str | None:
    """The AgentVidBench question a predictions.jsonl row answers (question_id, else meta.question_id)."""
    for value in (row.get("question_id"), (row.get("meta") or {}).get("question_id")):
        if value is not None:
            return str(value)
    return None


def load_predictions(path: str | Path) -> tuple[dict[str, dict], list[InputRowError]]:
    """Prediction rows keyed by question id; for a repeated id the last row wins (reruns append)."""
    path = Path(path)
    rows, errors = _read_jsonl(path)
    predictions: dict[str, dict] = {}
    for line_no, row in rows:
        key = prediction_key(row)
        if key is None:
            errors.append(InputRowError(f"{path}:{line_no}: no 'question_id' in prediction row"))
            continue
        predictions[key] = row
    return predictions, errors
