"""Writes small synthetic evaluation sets in each benchmark's released on-disk layout (``write_eval_sets``).

Every question asks about the colour (or, for some LVBench questions, the time) of the one event in its video;
rows carry the released field names plus one extra field, ``evidence_window`` ([t_s, t_e] seconds), which the
loaders copy into ``Sample.meta["evidence_window"]`` (LVBench also states it natively as ``time_reference``).
``<out>/eval/manifest.json`` records, per benchmark, the ground truth the loaders must reproduce:
``expected_samples`` and, per sample id, ``answer``, ``video``, ``evidence_window``, ``colour``, ``duration``.
The layouts themselves are documented in each loader's module docstring; they are the official releases' layouts
(file and folder names, field names, value types), checked against ``tests/fixtures/<benchmark>/`` by
``tests/test_benchmark_fixtures_schema.py``.
"""

from __future__ import annotations

import importlib
import json
from collections.abc import Callable
from functools import partial
from pathlib import Path

import numpy as np
from cader.dev.synthetic.media import (
    COLOUR_QUESTION,
    LETTERS,
    VideoSpec,
    canonical_colour_options,
    colour_options,
    random_cued_spec,
    timestamp,
    write_video,
)
from cader.dev.synthetic.train_mix import write_json, write_jsonl, write_parquet
from cader.evaluate.benchmarks import Benchmark
from cader.evaluate.benchmarks import benchmarks as registered_benchmarks
from cader.vlm.files import write_atomic

TIME_QUESTION = "When does the coloured shape appear in the video?"
MLVU_TASKS = (("1_plotQA", "plotQA"), ("2_needle", "findNeedle"), ("3_ego", "ego"), ("4_count", "count"),
              ("5_order", "order"), ("6_anomaly_reco", "anomaly_reco"), ("7_topic_reasoning", "topic_reasoning"))
MLVU_GENERATION_TASKS = (("8_sub_scene", "subPlot"), ("9_summary", "summary"))
GENRES = ("Vlog", "Tutorial", "Sports", "Gaming", "News", "E-commerce live stream")
SKILLS = ("temporal/event localization", "attribute recognition", "visual search")
DIFFICULTIES = ("easy", "medium", "hard", "very_hard")


class Truth:
    """Collects the manifest entry of one benchmark."""

    def __init__(self, folder: str):
        self.folder = folder
        self.samples: dict[str, dict] = {}

    def add(self, sample_id: str, letter: str, video: str, spec: VideoSpec) -> None:
        self.samples[sample_id] = {
            "answer": letter, "video": video, "evidence_window": [spec.t_s, spec.t_e], "colour": spec.colour,
            "duration": spec.duration, "fps": spec.fps, "scene_window": [spec.scene_s, spec.scene_e],
            "decoy_window": None if spec.decoy_s is None else [spec.decoy_s, spec.decoy_e]}

    def entry(self) -> dict:
        return {"folder": self.folder, "expected_samples": len(self.samples), "samples": self.samples}


def time_options(rng: np.random.Generator, spec: VideoSpec, n: int) -> tuple[list[str], str]:
    """``n`` "MM:SS-MM:SS" windows of the event's length, one of them the true one; returns (options, letter)."""
    length = spec.t_e - spec.t_s
    starts = [s for s in range(int(spec.duration - length) + 1) if s != int(spec.t_s)]
    chosen = [starts[i] for i in rng.permutation(len(starts))[: n - 1]] + [int(spec.t_s)]
    chosen = [chosen[i] for i in rng.permutation(len(chosen))]
    options = [f"{timestamp(s)}-{timestamp(s + length)}" for s in chosen]
    return options, LETTERS[chosen.index(int(spec.t_s))]


def _youtube_like_id(rng: np.random.Generator) -> str:
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-"
    return "".join(alphabet[i] for i in rng.integers(len(alphabet), size=11))


def lettered(options: list[str]) -> list[str]:
    return [f"{LETTERS[k]}. {o}" for k, o in enumerate(options)]


def write_videomme(root: Path, rng, n: int, new_spec: Callable) -> dict:
    truth, rows = Truth(root.name), []
    durations = ["long"] * n + ["short", "medium"]  # the two non-long rows must be filtered out by the loader
    for i, category in enumerate(durations):
        spec = new_spec(f"vmme_{i:03d}")
        video_id, video_key = f"{i + 1:03d}", _youtube_like_id(rng)
        write_video(spec, root / "data" / f"{video_key}.mp4")
        options, letter = colour_options(rng, spec.colour, 4)
        question_id = f"{video_id}-1"
        rows.append({"video_id": video_id, "duration": category, "domain": "Life Record",
                     "sub_category": "Daily Life", "url": f"https://www.youtube.com/watch?v={video_key}",
                     "videoID": video_key, "question_id": question_id, "task_type": "Attribute Perception",
                     "question": COLOUR_QUESTION, "options": lettered(options), "answer": letter,
                     "evidence_window": [spec.t_s, spec.t_e]})
        if category == "long":
            truth.add(question_id, letter, f"videomme/data/{video_key}.mp4", spec)
    write_parquet(root / "videomme" / "test-00000-of-00001.parquet", rows)
    return truth.entry()


def write_mlvu(root: Path, rng, n: int, new_spec: Callable) -> dict:
    truth = Truth(root.name)
    per_task: dict[str, list] = {stem: [] for stem, _ in MLVU_TASKS}
    for i in range(n):
        stem, qtype = MLVU_TASKS[i % len(MLVU_TASKS)]
        spec = new_spec(f"mlvu_{i:03d}")
        name = f"{qtype}_{i:03d}.mp4"
        write_video(spec, root / "MLVU" / "video" / stem / name)
        options, letter = colour_options(rng, spec.colour, 4)
        truth.add(f"{stem}-{len(per_task[stem])}", letter, f"mlvu/MLVU/video/{stem}/{name}", spec)
        per_task[stem].append({"video": name, "duration": spec.duration, "question": COLOUR_QUESTION,
                               "candidates": options, "answer": options[LETTERS.index(letter)],
                               "question_type": qtype, "evidence_window": [spec.t_s, spec.t_e]})
    for stem, rows in per_task.items():
        write_json(root / "MLVU" / "json" / f"{stem}.json", rows)
    for stem, qtype in MLVU_GENERATION_TASKS:  # open-ended tasks: not multiple choice, the loader skips them
        row = {"video": f"{qtype}_000.mp4", "duration": 30.0, "question": "Describe the video.",
               "answer": "A grey background with a coloured shape.", "question_type": qtype}
        if stem == "8_sub_scene":  # the sub-scene task is graded against scoring points
            row["scoring_points"] = ["a grey background", "a coloured shape"]
        write_json(root / "MLVU" / "json" / f"{stem}.json", [row])
    return truth.entry()


def write_longvideobench(root: Path, rng, n: int, new_spec: Callable) -> dict:
    truth, rows = Truth(root.name), []
    for i in range(n):
        spec = new_spec(f"lvb_{i:03d}")
        video_id = _youtube_like_id(rng)
        write_video(spec, root / "videos" / f"{video_id}.mp4")
        options, letter = colour_options(rng, spec.colour, 4 + i % 2)  # LongVideoBench has 4 or 5 candidates
        sample_id = f"{video_id}_0"
        rows.append({"video_id": video_id, "question": COLOUR_QUESTION, "question_wo_referring_query": COLOUR_QUESTION,
                     "candidates": options, "correct_choice": LETTERS.index(letter),
                     "position": [int(spec.t_s), int(spec.t_e)], "topic_category": "NP-News-Programs",
                     "question_category": ("S2A", "T2A", "E2O")[i % 3], "level": "L1-Perception", "id": sample_id,
                     "video_path": f"{video_id}.mp4", "subtitle_path": f"{video_id}_en.json", "duration_group": 600,
                     "starting_timestamp_for_subtitles": 0, "duration": spec.duration,
                     "evidence_window": [spec.t_s, spec.t_e]})
        truth.add(sample_id, letter, f"longvideobench/videos/{video_id}.mp4", spec)
        subtitle = {"start": hms(spec.t_s), "end": hms(spec.t_e), "line": "A shape appears."}  # one cue
        write_json(root / "subtitles" / f"{video_id}_en.json", [subtitle])
    write_json(root / "lvb_val.json", rows)
    return truth.entry()


def write_lvbench(root: Path, rng, n: int, new_spec: Callable) -> dict:
    """``n`` videos with two questions each (colour and time): LVBench has many questions per video.

    Laid out as a clone of the LVBench repository after its ``scripts/download.sh``: the annotation file in
    ``data/``, the videos where video2dataset (``--output_format files``) puts them, numbered ``<shard><index>``
    with a sidecar JSON (the input columns + key/status/error) whose ``url`` carries the YouTube key.
    """
    truth, rows, uid = Truth(root.name), [], 0
    for i in range(n):
        spec = new_spec(f"lvbench_{i:03d}")
        key, number = _youtube_like_id(rng), f"{i:09d}"
        shard = root / "scripts" / "videos" / "00000"
        write_video(spec, shard / f"{number}.mp4")
        write_json(shard / f"{number}.json", {"url": f"https://www.youtube.com/watch?v={key}", "key": number,
                                              "status": "success", "error_message": None, "yt_meta_dict": None})
        video = f"lvbench/scripts/videos/00000/{number}.mp4"
        qa = []
        for question, (options, letter), qtype in (
            (COLOUR_QUESTION, colour_options(rng, spec.colour, 4), "key information retrieval"),
            (TIME_QUESTION, time_options(rng, spec, 4), "temporal grounding"),
        ):
            uid += 1
            text = question + "".join(f"\n({LETTERS[k]}) {o}" for k, o in enumerate(options))
            qa.append({"uid": uid, "question": text, "answer": letter, "question_type": [qtype],
                       "time_reference": f"{timestamp(spec.t_s)}-{timestamp(spec.t_e)}"})
            truth.add(str(uid), letter, video, spec)
        rows.append({"key": key, "type": "synthetic", "qa": qa, "video_info": {
            "start": 0, "end": spec.duration, "duration_minutes": spec.duration / 60, "fps": float(spec.fps),
            "resolution": {"width": spec.width, "height": spec.height}}})
    write_jsonl(root / "data" / "video_info.meta.jsonl", rows)
    return truth.entry()


def write_videoevalpro(root: Path, rng, n: int, new_spec: Callable) -> dict:
    truth, rows = Truth(root.name), []
    for i in range(n):
        spec = new_spec(f"vep_{i:03d}")
        name = f"vep_{i:03d}.mp4"
        write_video(spec, root / "videos" / name)
        options, letter = colour_options(rng, spec.colour, 4)
        rows.append({"video": name, "question": COLOUR_QUESTION, "options": lettered(options), "answer": letter,
                     "answer_text": options[LETTERS.index(letter)],
                     "meta": json.dumps({"duration": spec.duration}),  # the release stores meta as a string
                     "source": ("Video-MME", "MLVU", "LVBench", "LongVideoBench")[i % 4], "qa_subtype": "attribute",
                     "qa_type": "Local Perception", "evidence_window": [spec.t_s, spec.t_e]})
        truth.add(f"{i:05d}", letter, f"videoevalpro/videos/{name}", spec)
    write_parquet(root / "data" / "test-00000-of-00001.parquet", rows)
    return truth.entry()


def write_agentvidbench(root: Path, rng, n: int, new_spec: Callable) -> dict:
    """The agentvidbench dataset layout: questions.jsonl, the videos.jsonl table keyed by ``file_name`` with
    durations as text ("M:SS", every fourth an estimate "~M:SS"), ``videos/video<N>.mp4`` and
    ``transcripts/video<N>.srt`` (empty for every third video, as for a video without speech)."""
    truth, questions, videos = Truth(root.name), [], []
    for i in range(n):
        spec = new_spec(f"avb_{i:03d}")
        video_path, transcript_path = f"videos/video{i + 1}.mp4", f"transcripts/video{i + 1}.srt"
        write_video(spec, root / video_path)
        # a Whisper-style SRT with one cue during the event, or an empty file (no speech)
        cue = f"1\n{hms(spec.t_s, ',')} --> {hms(spec.t_e, ',')}\nA shape appears.\n\n" if i % 3 != 2 else ""
        write_atomic(root / transcript_path, cue, durable=False)
        genre = GENRES[i % len(GENRES)]
        clock = timestamp(spec.duration)
        duration = ("~" if i % 4 == 3 else "") + clock.removeprefix("0")  # "2:26", "0:35"
        videos.append({"file_name": video_path, "title": f"Synthetic clip {i + 1}", "duration": duration,
                       "genre": genre, "length_category": "short", "license": "CC0", "source": "synthetic",
                       "author": "cader", "url": ""})
        options, letter = colour_options(rng, spec.colour, 26)
        window = f"{timestamp(spec.t_s)}-{timestamp(spec.t_e)}"
        row = {"question_id": i + 1, "title": f"Shape colour {i + 1}", "question_text": COLOUR_QUESTION,
               "options": options, "answer": letter, "answer_explanation": f"The shape that appears is {spec.colour}.",
               "video_path": video_path, "transcript_path": transcript_path, "categories": [genre],
               "difficulty": DIFFICULTIES[i % len(DIFFICULTIES)], "skills": list(SKILLS[: 1 + i % len(SKILLS)]),
               "milestones": [
                   {"id": "M1", "type": "temporal_localization",
                    "description": f"Finds the moment the shape appears ({window})."},
                   {"id": "M2", "type": "visual_recognition",
                    "description": f"Identifies the shape's colour as {spec.colour}."}],
               "trajectory": {"steps": [{"tool": "analyze_video",
                                         "args": {"start": timestamp(spec.t_s), "end": timestamp(spec.t_e)},
                                         "thought": "Look where the shape appears.",
                                         "observation": f"A {spec.colour} shape fills the centre."}],
                              "final_answer": letter},
               "evidence_window": [spec.t_s, spec.t_e]}
        if i % 3 != 2:  # every third question leaves ecom_required out (= unknown)
            row["ecom_required"] = genre == "E-commerce live stream"
        questions.append(row)
        truth.add(str(i + 1), letter, f"agentvidbench/{video_path}", spec)
    write_jsonl(root / "questions.jsonl", questions)
    write_jsonl(root / "videos.jsonl", videos)
    return truth.entry()


def hms(seconds: float, decimal: str = ".") -> str:
    """"HH:MM:SS.mmm": LongVideoBench's subtitle time, or with `decimal` "," an SRT one."""
    millis = round(seconds * 1000)
    return f"{millis // 3600000:02d}:{millis // 60000 % 60:02d}:{millis // 1000 % 60:02d}{decimal}{millis % 1000:03d}"


def write_synthetic_split(root: Path, rng, n: int, new_spec: Callable, split: str) -> dict:
    """The ``synthetic`` benchmark's split: ``test`` (the test split) or ``heldout`` (the one calibration is fitted
    on)."""
    truth, rows = Truth(root.name), []
    for i in range(n):
        spec = new_spec(f"{split}_{i:04d}")
        rel = f"videos/{split}_{i:04d}.mp4"
        write_video(spec, root / rel)
        # fixed option order, as in the training mix (media.canonical_colour_options)
        options, letter = canonical_colour_options(spec.colour)
        sample_id = f"{split}-{i:04d}"
        rows.append({"id": sample_id, "video": rel, "duration": spec.duration, "question": COLOUR_QUESTION,
                     "options": options, "answer": letter, "evidence_window": [spec.t_s, spec.t_e],
                     "scene_window": [spec.scene_s, spec.scene_e],
                     "decoy_window": None if spec.decoy_s is None else [spec.decoy_s, spec.decoy_e],
                     "colour": spec.colour})
        truth.add(sample_id, letter, f"synthetic/{rel}", spec)
    write_jsonl(root / f"{split}.jsonl", rows)
    return truth.entry()


write_synthetic_test = partial(write_synthetic_split, split="test")
write_synthetic_heldout = partial(write_synthetic_split, split="heldout")


def writer_of(benchmark: Benchmark) -> Callable:
    """The function a registration's ``synthetic_writer`` (``"module:function"``) names; a clear error naming
    the benchmark when it names nothing."""
    module_name, _, function = benchmark.synthetic_writer.partition(":")
    try:
        return getattr(importlib.import_module(module_name), function)
    except (ImportError, AttributeError, ValueError) as exc:
        raise LookupError(f"benchmark {benchmark.name!r}: synthetic_writer {benchmark.synthetic_writer!r} names no "
                          f"function ({exc})") from None


def write_eval_sets(eval_dir: Path, rng: np.random.Generator, n_eval: int, n_heldout: int, video: dict | None = None,
                    n_test: int | None = None) -> dict:
    """Write every registered benchmark (``cader.evaluate.benchmarks``, each with its ``synthetic_writer``) under
    ``eval_dir/<folder>``; return (and write) the manifest; ``synthetic`` gets ``n_test`` questions (default
    ``n_eval``), enough for the ablation table, ``synthetic_heldout`` ``n_heldout``, the others ``n_eval``.
    Videos are the training mix's design: ``random_cued_spec`` with the keyword arguments `video` (default: its
    defaults), a brief event inside a light scene of a long video."""

    def new_spec(name: str) -> VideoSpec:
        return random_cued_spec(rng, name, **(video or {}))

    sizes = {"eval": n_eval, "test": n_eval if n_test is None else n_test, "heldout": n_heldout}
    benchmarks = {  # in write order: the writers share rng
        benchmark.name: writer_of(benchmark)(eval_dir / benchmark.folder, rng, sizes[benchmark.synthetic_size],
                                             new_spec) for benchmark in registered_benchmarks()}
    manifest = {"data_root": ".", "evidence_key": "evidence_window", "benchmarks": benchmarks}
    write_json(eval_dir / "manifest.json", manifest)
    return manifest
