"""LVBench (benchmark name ``lvbench``).

Expected layout under ``<data_root>/lvbench/`` (the THUDM/LVBench release; ``data/`` and ``scripts/`` as in a
clone of its repository):

    video_info.meta.jsonl   (or data/video_info.meta.jsonl) one video per line: key (the YouTube id), type,
                            video_info {duration_minutes, fps, resolution, ...}, qa [ {uid, question,
                            answer (letter), question_type [..], time_reference "MM:SS-MM:SS"} ]; each question's
                            text ends with its options as lines "(A) ...", "(B) ...".
    videos/<key>.mp4        videos saved by key, or the layout the official ``scripts/download.sh`` leaves:
    scripts/videos/<shard>/<n>.mp4 + <n>.json   (video2dataset ``--output_format files``; also accepted under
                            ``videos/<shard>/``). video2dataset numbers the files itself, so each file is mapped
                            back to its LVBench key through the sidecar ``<n>.json``: its ``url`` is the
                            ``https://www.youtube.com/watch?v=<key>`` line the download script wrote, and its
                            ``status`` must be ``success`` (failed downloads leave a sidecar without a video).

One Sample per qa item: ``sample_id`` = ``uid``, ``question`` = the text before the options,
``meta["task_type"]`` = the first question_type, ``meta["evidence_window"]`` = time_reference in seconds.
Row errors name the line number and the qa index (``"<line>/qa[<i>]"``). A ``key`` that would leave the data
root, an empty question or option, and option letters beyond Z are row errors.
"""

from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import parse_qs, urlparse

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
    as_float,
    as_text,
    find_root,
    iter_jsonl,
    require,
)

NAME = "lvbench"
FOLDER = "lvbench"
SHARD_FOLDERS = ("scripts/videos", "videos")
_OPTION = re.compile(r"\n[ \t]*\(([A-Z])\)[ \t]*")  # an empty option stays empty
_BEYOND_Z = re.compile(r"\n\s*\([A-Z]{2,}\)\s")
log = logging.getLogger(__name__)


def split_options(text: str) -> tuple[str, list[str]]:
    """Question stem and options from "stem\\n(A) x\\n(B) y"; the letters must run A, B, C, ... in order."""
    if _BEYOND_Z.search(text):
        raise RowError(f"more than {len(LETTERS)} options (an option lettered beyond Z)")
    parts = _OPTION.split(text)
    stem, rest = parts[0].strip(), parts[1:]
    letters, options = rest[0::2], [o.strip() for o in rest[1::2]]
    if not options:
        raise RowError("no '(A) ...' options found in the question text")
    if letters != list(LETTERS[: len(letters)]):
        raise RowError(f"option letters {letters} are not A, B, C, ... in order")
    if not stem:
        raise RowError("question is empty")
    for letter, option in zip(letters, options):
        if not option:
            raise RowError(f"option {letter} is empty")
    return stem, options


def parse_time_reference(value) -> list[float] | None:
    """'MM:SS-MM:SS' or 'H:MM:SS-H:MM:SS' -> [start, end] seconds; None when absent or unparseable."""
    if not isinstance(value, str):
        return None
    match = re.fullmatch(r"\s*([\d:.]+)\s*-\s*([\d:.]+)\s*", value)
    if not match:
        return None
    try:
        times = [sum(float(p) * 60**k for k, p in enumerate(reversed(t.split(":")))) for t in match.groups()]
    except ValueError:
        return None
    return times if times[0] <= times[1] else None


def youtube_id(url) -> str | None:
    """The ``v`` parameter of a YouTube watch URL (what the download script wrote for each key)."""
    if not isinstance(url, str):
        return None
    values = parse_qs(urlparse(url).query).get("v")
    return values[0] if values else None


def shard_videos(root: Path) -> dict[str, Path]:
    """LVBench key -> video file, from video2dataset sidecars under ``SHARD_FOLDERS`` (first folder wins)."""
    found: dict[str, Path] = {}
    for folder in SHARD_FOLDERS:
        for sidecar in sorted((root / folder).glob("*/*.json")):
            try:
                meta = json.loads(sidecar.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                log.warning("lvbench: unreadable video2dataset sidecar %s", sidecar)
                continue
            key = youtube_id(meta.get("url")) if isinstance(meta, dict) else None
            video = sidecar.with_suffix(".mp4")
            if key and meta.get("status") == "success" and video.is_file():
                found.setdefault(key, video)
    return found


def _video(out: Collector, root: Path, key, shards: dict[str, Path]) -> Path:
    flat = out.inside(root / "videos", f"{as_text(key, 'key')}.mp4", "key")
    if flat.is_file() or key not in shards:
        return flat
    return shards[key]


@dataclass(frozen=True)
class VideoLine:
    """What a qa item takes from its video's line."""

    row: dict
    video: Path
    minutes: float | None


def _meta(qa: dict, place: RowPlace, options: list[str]) -> dict:
    types = qa.get("question_type") or []
    meta = {
        "task_type": types[0] if isinstance(types, list) and types else types or None,
        "question_type": types,
        "time_reference": qa.get("time_reference"),
        "key": place.context.row["key"],
        "video_type": place.context.row.get("type"),
    }
    window = parse_time_reference(qa.get("time_reference"))
    if window:
        meta["evidence_window"] = window
    return meta


# one qa item; ``place.context`` is its VideoLine
ROW = RowMapping(
    required=("uid", "question", "answer"),
    sample_id=lambda qa, place: str(qa["uid"]),
    question=lambda qa, place: split_options(as_text(qa["question"], "question"))[0],
    options=lambda qa, place: split_options(qa["question"])[1],
    answer=lambda qa, options, letters: answer_letter(qa["answer"], options, letters),
    video=lambda qa, place: place.context.video,
    meta=_meta,
    duration=lambda qa, place: None if place.context.minutes is None else place.context.minutes * 60.0,
    order=("answer", "meta", "video"),
)


def load(data_root: str | Path) -> tuple[list[Sample], list[BenchmarkError]]:
    root = find_root(data_root, FOLDER, "video_info.meta.jsonl", "data/video_info.meta.jsonl")
    file = root / "video_info.meta.jsonl"
    if not file.exists():
        file = root / "data" / "video_info.meta.jsonl"
    out = Collector(NAME, data_root)
    shards = shard_videos(root)
    for line, row in iter_jsonl(file):
        if isinstance(row, RowError):
            out.error(file, line, str(row))
            continue
        try:
            require(row, "key", "qa")
            if not isinstance(row["qa"], list):
                raise RowError("qa is not a list")
            info = row.get("video_info") or {}
            minutes = as_float(info.get("duration_minutes"), "video_info.duration_minutes")
            video = _video(out, root, row["key"], shards)
        except RowError as exc:
            out.error(file, line, str(exc))
            continue
        qa_items = ((f"{line}/qa[{index}]", qa) for index, qa in enumerate(row["qa"]))
        add_rows(out, ROW, file, qa_items, root, context=VideoLine(row, video, minutes))
    return out.result()


BENCHMARK = Benchmark(
    name=NAME,
    folder=FOLDER,
    load=load,
    synthetic_writer="cader.dev.synthetic.eval_sets:write_lvbench",
    write_order=3,
)
