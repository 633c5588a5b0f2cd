"""AgentVidBench (benchmark name ``agentvidbench``; 26 options, letters A-Z), and the one parser of its release
files that both this loader and the trajectory judge (``cader.evaluate.judge.questions``) use.

Expected layout under ``<data_root>/agentvidbench/`` (the agentvidbench/agentvidbench dataset as downloaded):

    questions.jsonl       one question per line: question_id (int), question_text, options (26 strings),
                          answer (letter), video_path ("videos/video1.mp4", relative to this folder),
                          transcript_path ("transcripts/video1.srt"), categories [..], difficulty, skills [..],
                          milestones [{id, type, description}], ecom_required (bool; absent = unknown), title,
                          answer_explanation, ...
    videos.jsonl          the video table, one row per video keyed by file_name (equal to a question's
                          video_path): duration as text ("2:26", "~17:00", "1:02:03" or "unknown"), title, genre,
                          length_category, license, source, author, url
    videos/video<N>.mp4
    transcripts/video<N>.srt   (may be empty when a video has no speech)

The official harness reads it this way (orchestration ``load_items``, evaluation ``judge``/``aggregate``, the
viewer): the table is optional metadata looked up by ``video_path``; a question without ``transcript_path`` uses
``transcripts/<video stem>.srt``; options may also come as ``{"letter", "text"}`` objects (the judge and viewer
read them so), which must run A, B, C, ... in order.

``sample_id`` = ``str(question_id)``. ``Sample.duration`` comes from the table ("unknown", a missing table row or a
missing table give None, counted in ``VideoTable.unknown`` and logged; ``meta["duration_source"]`` says which).
``meta`` keeps question_id, milestones, difficulty, categories (the first also as ``category`` and ``task_type``),
skills, title, genre, ecom_required (only when present), transcript_path (relative to the data root) and
transcript_available (the file exists and is not empty). A video or transcript path that would leave the data
root, an empty question or option and more than 26 options are row errors.
"""

from __future__ import annotations

import logging
import math
import re
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

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
    answer_letter,
    as_options,
    as_text,
    evidence_window,
    find_root,
    iter_jsonl,
    letters_for,
    relative_path,
)

NAME = "agentvidbench"
FOLDER = "agentvidbench"
QUESTIONS_FILE = "questions.jsonl"
VIDEOS_FILE = "videos.jsonl"
UNKNOWN_DURATIONS = ("unknown", "n/a", "na", "none", "")
log = logging.getLogger(__name__)


# ----------------------------------------------------------------------------------------------------------------
# Video table
# ----------------------------------------------------------------------------------------------------------------


def parse_duration(value: Any) -> float | None:
    """Seconds from the table's duration text: "2:26" -> 146, "~17:00" -> 1020 (the "~" marks an estimate),
    "1:02:03" -> 3723, a bare number of seconds; "unknown" (or empty, or null) -> None.

    Anything else raises ValueError, so a malformed table row is reported rather than read as zero seconds.
    """
    if value is None:
        return None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if not math.isfinite(value) or value < 0:
            raise ValueError(f"duration {value!r} is not a non-negative number")
        return float(value)
    if not isinstance(value, str):
        raise ValueError(f"duration {value!r} is neither text nor a number")  # noqa: TRY004 (one error type)
    text = value.strip().lstrip("~").strip()
    if text.lower() in UNKNOWN_DURATIONS:
        return None
    if not re.fullmatch(r"\d+(?::[0-5]?\d){0,2}(?:\.\d+)?", text):
        raise ValueError(f"duration {value!r} is not H:MM:SS, M:SS or seconds")
    parts = [float(p) for p in text.split(":")]
    return sum(p * 60**k for k, p in enumerate(reversed(parts)))


def is_estimate(value: Any) -> bool:
    return isinstance(value, str) and value.strip().startswith("~")


@dataclass
class VideoTable:
    """videos.jsonl keyed by ``file_name``; ``seconds`` holds each parsed duration (None when unknown)."""

    rows: dict[str, dict] = field(default_factory=dict)
    seconds: dict[str, float | None] = field(default_factory=dict)
    unknown: list[str] = field(default_factory=list)  # file names whose duration is unknown
    errors: list[tuple[int, str]] = field(default_factory=list)  # (line, reason)


def read_video_table(path: str | Path) -> VideoTable:
    table = VideoTable()
    for line, row in iter_jsonl(Path(path)):
        try:
            if isinstance(row, RowError):
                raise row
            if not isinstance(row, dict):
                raise RowError(f"expected an object, got {type(row).__name__}")
            name = relative_path(row.get("file_name"), "file_name")
            if name in table.rows:
                raise RowError(f"duplicate file_name {name!r}")
            try:
                seconds = parse_duration(row.get("duration"))
            except ValueError as exc:
                raise RowError(str(exc)) from None
        except RowError as exc:
            table.errors.append((line, str(exc)))
            continue
        table.rows[name] = row
        table.seconds[name] = seconds
        if seconds is None:
            table.unknown.append(name)
    return table


# ----------------------------------------------------------------------------------------------------------------
# Question file
# ----------------------------------------------------------------------------------------------------------------


@dataclass
class ReleaseQuestion:
    """One questions.jsonl row in the release's terms (options normalised to plain strings, answer upper-cased)."""

    question_id: int | str
    question_text: str
    options: list[str]
    answer: str | None
    video_path: str | None
    transcript_path: str | None
    categories: list[str]
    difficulty: str | None
    skills: list[str]
    milestones: list[dict]
    ecom_required: bool | None
    title: str | None = None
    answer_explanation: str | None = None
    video_id: str | None = None  # only in the project's earlier question files
    evidence_window: list[float] | None = None  # only in the synthetic set (not a release field)

    @property
    def key(self) -> str:
        return str(self.question_id)


def _options(value: Any) -> list[str]:
    if hasattr(value, "tolist"):
        value = value.tolist()
    if isinstance(value, list) and value and all(isinstance(o, dict) for o in value):
        letters = [o.get("letter") for o in value]
        if letters != list(LETTERS[: len(letters)]):
            raise RowError(f"option letters {letters} are not A, B, C, ... in order")
        value = [o.get("text") for o in value]
    options = as_options(value)
    letters_for(options)  # 1..26 options
    return options


def _string_list(value: Any, what: str) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise RowError(f"{what} must be a list of strings, got {value!r}")
    return list(value)


def _milestones(value: Any) -> list[dict]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise RowError("milestones must be a list")
    seen = set()
    for index, milestone in enumerate(value):
        if not isinstance(milestone, dict) or not isinstance(milestone.get("id"), str):
            raise RowError(f"milestone {index} needs a string 'id'")
        if milestone["id"] in seen:
            raise RowError(f"duplicate milestone id {milestone['id']!r}")
        seen.add(milestone["id"])
    return value


def parse_question(row: Any) -> ReleaseQuestion:
    """One questions.jsonl row; RowError names the first problem. ``question`` and ``category`` (the project's
    earlier field names) are read when the release names are absent, so old files still load."""
    if not isinstance(row, dict):
        raise RowError(f"expected an object, got {type(row).__name__}")
    qid = row.get("question_id")
    if isinstance(qid, bool) or not isinstance(qid, (int, str)) or (isinstance(qid, str) and not qid.strip()):
        raise RowError(f"missing or invalid field 'question_id': {qid!r}")
    if "question_text" not in row and "question" not in row:
        raise RowError("missing field 'question_text'")
    text = as_text(row["question_text"] if "question_text" in row else row["question"], "question_text")
    if "options" not in row:
        raise RowError("missing field 'options'")
    options = _options(row["options"])
    answer = row.get("answer")
    if answer is not None and not isinstance(answer, str):
        raise RowError(f"answer must be a letter, got {answer!r}")
    ecom = row.get("ecom_required")
    if ecom is not None and not isinstance(ecom, bool):
        raise RowError("'ecom_required' must be true, false or absent")
    video = relative_path(row["video_path"], "video_path") if row.get("video_path") is not None else None
    transcript = row.get("transcript_path")
    if transcript is not None:
        transcript = relative_path(transcript, "transcript_path")
    elif video is not None:
        transcript = f"transcripts/{PurePosixPath(video).stem}.srt"
    categories = _string_list(row["categories"] if "categories" in row else row.get("category"), "categories")
    return ReleaseQuestion(
        question_id=qid,
        question_text=text,
        options=options,
        answer=answer.strip().upper() if isinstance(answer, str) and answer.strip() else None,
        video_path=video,
        transcript_path=transcript,
        categories=categories,
        difficulty=row.get("difficulty"),
        skills=_string_list(row.get("skills"), "skills"),
        milestones=_milestones(row.get("milestones")),
        ecom_required=ecom,
        title=row.get("title"),
        answer_explanation=row.get("answer_explanation"),
        video_id=row.get("video_id"),
        evidence_window=evidence_window(row),
    )


def read_questions(path: str | Path) -> list[tuple[int, ReleaseQuestion | RowError]]:
    """(line, parsed question or the RowError for that line) for every non-blank line of a questions file."""
    parsed: list[tuple[int, ReleaseQuestion | RowError]] = []
    for line, row in iter_jsonl(Path(path)):
        if isinstance(row, RowError):
            parsed.append((line, row))
            continue
        try:
            parsed.append((line, parse_question(row)))
        except RowError as exc:
            parsed.append((line, exc))
    return parsed


# ----------------------------------------------------------------------------------------------------------------
# Loader
# ----------------------------------------------------------------------------------------------------------------


def _table(root: Path, out: Collector) -> VideoTable:
    file = root / VIDEOS_FILE
    if not file.exists():
        log.warning("agentvidbench: %s is missing; durations are unknown", file)
        return VideoTable()
    table = read_video_table(file)
    for line, reason in table.errors:
        out.error(file, line, reason)
    return table


def _video(question: ReleaseQuestion, place: RowPlace) -> Path:
    if question.video_path is None:
        raise RowError("missing field 'video_path'")
    return place.out.inside(place.root, question.video_path, "video_path")


def _meta(question: ReleaseQuestion, place: RowPlace, options: list[str]) -> dict:
    table: VideoTable = place.context
    transcript = place.out.inside(place.root, question.transcript_path, "transcript_path")
    video_row = table.rows.get(question.video_path)
    duration = table.seconds.get(question.video_path)
    meta = {
        "question_id": question.question_id,
        "milestones": question.milestones,
        "difficulty": question.difficulty,
        "categories": question.categories,
        "category": question.categories[0] if question.categories else None,
        "task_type": question.categories[0] if question.categories else None,
        "skills": question.skills,
        "title": question.title,
        "genre": (video_row or {}).get("genre"),
        "transcript_path": place.out.rel(transcript),
        "transcript_available": transcript.is_file() and transcript.stat().st_size > 0,
        "duration_source": "video table"
        if duration is not None
        else ("unknown" if video_row is not None else "not in video table"),
    }
    if video_row is not None and is_estimate(video_row.get("duration")):
        meta["duration_estimated"] = True
    if question.ecom_required is not None:
        meta["ecom_required"] = question.ecom_required
    if question.evidence_window:
        meta["evidence_window"] = question.evidence_window
    return meta


# one parsed question (read_questions checked its fields); ``place.context`` is the video table
ROW = RowMapping(
    required=(),
    sample_id=lambda question, place: question.key,
    question=lambda question, place: question.question_text,
    options=lambda question, place: question.options,
    answer=lambda question, options, letters: answer_letter(question.answer, options, letters),
    video=_video,
    meta=_meta,
    duration=lambda question, place: place.context.seconds.get(question.video_path),
)


def load(data_root: str | Path) -> tuple[list[Sample], list[BenchmarkError]]:
    root = find_root(data_root, FOLDER, QUESTIONS_FILE)
    out = Collector(NAME, data_root)
    table = _table(root, out)
    add_rows(out, ROW, root / QUESTIONS_FILE, read_questions(root / QUESTIONS_FILE), root, context=table)
    unknown = sum(s.duration is None for s in out.samples)
    if unknown:
        log.warning(
            "agentvidbench: %d question(s) have no known video duration (see meta.duration_source)", unknown
        )
    return out.result()


BENCHMARK = Benchmark(
    name=NAME,
    folder=FOLDER,
    load=load,
    synthetic_writer="cader.dev.synthetic.eval_sets:write_agentvidbench",
    write_order=5,
)
