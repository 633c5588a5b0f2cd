"""AgentVidBench (benchmark name ``agentvidbench``; 26 options, letters A-Z).

Expected layout under ``<data_root>/agentvidbench/``:

    questions.jsonl   {"question_id": 1, "video_id": "v001", "question", "options": [26 strings], "answer": "C",
                       "milestones": [{"id", "type", "description"}], "ecom_required": bool (may be absent =
                       unknown), "difficulty": "easy|medium|hard|very_hard", "category", "skills": [...]}
    videos.jsonl      {"video_id": "v001", "path": "videos/v001.mp4", "duration": 600.0, "genre": ...}
    videos/

``sample_id`` = ``str(question_id)``; ``meta`` keeps question_id, milestones, difficulty, category (also as
``task_type``), skills, genre and ecom_required (only when present). A question whose video_id is not in
videos.jsonl is a row error.
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
    iter_jsonl,
    letters_for,
    require,
)

NAME = "agentvidbench"
FOLDER = "agentvidbench"


def _videos(root: Path, out: Collector) -> dict[str, dict]:
    file, videos = root / "videos.jsonl", {}
    if not file.exists():
        out.error(file, None, "videos.jsonl is missing: no question can be mapped to a video")
        return videos
    for line, row in iter_jsonl(file):
        try:
            if isinstance(row, RowError):
                raise row
            require(row, "video_id", "path")
            as_float(row.get("duration"), "duration")
            videos[str(row["video_id"])] = row
        except RowError as exc:
            out.error(file, line, str(exc))
    return videos


def load(data_root: str | Path) -> tuple[list[Sample], list[BenchmarkError]]:
    root = find_root(data_root, FOLDER, "questions.jsonl")
    out = Collector(NAME, data_root)
    videos = _videos(root, out)
    file = root / "questions.jsonl"
    for line, row in iter_jsonl(file):
        try:
            if isinstance(row, RowError):
                raise row
            require(row, "question_id", "video_id", "question", "options", "answer")
            video = videos.get(str(row["video_id"]))
            if video is None:
                raise RowError(f"video_id {row['video_id']!r} is not in videos.jsonl")
            options = as_options(row["options"])
            letters = letters_for(options)
            meta = {
                "question_id": row["question_id"],
                "milestones": row.get("milestones") or [],
                "difficulty": row.get("difficulty"),
                "category": row.get("category"),
                "task_type": row.get("category"),
                "skills": row.get("skills") or [],
                "genre": video.get("genre"),
                "video_id": str(row["video_id"]),
            }
            if "ecom_required" in row:
                meta["ecom_required"] = row["ecom_required"]
            window = evidence_window(row)
            if window:
                meta["evidence_window"] = window
            out.add(
                Sample(
                    NAME,
                    str(row["question_id"]),
                    out.rel(root / str(video["path"])),
                    str(row["question"]),
                    options,
                    letters,
                    answer_letter(row["answer"], options, letters),
                    as_float(video.get("duration"), "duration"),
                    meta,
                ),
                file,
                line,
            )
        except RowError as exc:
            out.error(file, line, str(exc))
    return out.result()
