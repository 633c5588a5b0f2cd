"""B12: per video, not per question. An LVBench-like set (a few long videos, many questions each) run per question
and grouped by video in one run: frames decoded per question and wall time, grouped / per question.

    python scripts/bench/per_video.py [--videos 3] [--questions 8] [--minutes 10] [--model PATH]

The tiny Qwen3-VL (random weights unless --model names an export, e.g. the quickstart's) with the settings of
configs/eval/cader_tiny.yaml (1 fps, 32 frames, 2,048 px, full CADER), on synthetic H.264 videos of `minutes`
minutes. Both runs are on the same samples after one warm-up sample. Frames decoded are counted at the reader
(`VideoReader.decode_indices`), not taken from the records; the records must agree with that count
(sum(frames_decoded - frames_shared)) and with each other (timings and the shared part of the cost aside),
or the ratio is reported as NaN by run_all. Goal: frames per question grouped / per question <= 0.25.
"""

from __future__ import annotations

import dataclasses
import math
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

from cader.scripts.bench.harness import REPO, emit
from jsonargparse import CLI

SHARED_KEYS = ("frames_shared", "forwards_shared")


def tiny_config(**overrides):
    """The CaderConfig of configs/eval/cader_tiny.yaml (its CADER fields only), with `overrides`."""
    import yaml
    from cader.evaluate.method.config import CaderConfig

    values = yaml.safe_load((REPO / "configs" / "eval" / "cader_tiny.yaml").read_text())
    names = {f.name for f in dataclasses.fields(CaderConfig)}
    return CaderConfig(**{**{k: v for k, v in values.items() if k in names}, **overrides})


def lvbench_like(root: Path, videos: int, questions: int, minutes: float, size: tuple[int, int] = (320, 180)) -> list:
    """`videos` synthetic videos of `minutes` minutes, `questions` questions on each (in benchmark order, a video's
    questions together, as LVBench lists them), with the question text differing per question."""
    import numpy as np
    from cader.dev.synthetic.media import COLOUR_QUESTION, EVENT_COLOURS, VideoSpec, write_video
    from cader.evaluate.benchmarks.base import Sample

    colours = list(EVENT_COLOURS)
    rng = np.random.default_rng(0)
    samples = []
    for v in range(videos):
        duration = float(round(minutes * 60))
        t_s = float(rng.integers(10, duration - 20))
        colour = colours[v % len(colours)]
        spec = VideoSpec(f"long{v}", duration, 2, t_s, t_s + 4.0, colour, width=size[0], height=size[1],
                         scene_s=t_s - 6.0, scene_e=t_s + 10.0)
        write_video(spec, root / f"long{v}.mp4")
        options = colours[:4] if colour in colours[:4] else [colour, *colours[:3]]
        for q in range(questions):
            samples.append(Sample("lvbench_like", f"v{v}q{q}", f"long{v}.mp4", f"{COLOUR_QUESTION} (question {q + 1})",
                                  options, list("ABCD"), "ABCD"[options.index(colour)], duration, {}))
    return samples


@contextmanager
def counting_decodes():
    """{"frames": frames decoded, "opens": readers opened} while inside, counted at VideoReader itself."""
    from cader.vlm.video import VideoReader

    counts = {"frames": 0, "opens": 0}
    init, decode = VideoReader.__init__, VideoReader.decode_indices

    def counting_init(self, *args, **kwargs):
        counts["opens"] += 1
        init(self, *args, **kwargs)

    def counting_decode(self, indices, max_pixels=None):
        counts["frames"] += len(indices)
        return decode(self, indices, max_pixels)

    VideoReader.__init__, VideoReader.decode_indices = counting_init, counting_decode
    try:
        yield counts
    finally:
        VideoReader.__init__, VideoReader.decode_indices = init, decode


def comparable(record: dict) -> dict:
    cost = {k: v for k, v in record["cost"].items() if k != "seconds" and k not in SHARED_KEYS}
    return {**record, "cost": cost}


def main(videos: int = 3, questions: int = 8, minutes: float = 10.0, width: int = 320, height: int = 180,
         model: str | None = None, calibration: str | None = None, repeats: int = 2, goal: float = 0.25) -> dict:
    """Run the set per question and grouped by video, `repeats` times each, alternating, and compare.

    Args:
        videos: Videos in the set.
        questions: Questions per video.
        minutes: Length of each video.
        width: Frame width of the videos (decode cost grows with it).
        height: Frame height of the videos.
        model: An HF export to run (default: the tiny random-weight Qwen3-VL, built here).
        calibration: A calibration.json whose temperature and tau replace cader_tiny.yaml's (e.g. the
            quickstart's, with its export as --model).
        repeats: Runs of each way; the wall time is the fastest (other load on the machine only slows a run).
        goal: Largest acceptable ratio of frames decoded per question, grouped / per question.
    """
    from cader.contracts.jsonl import read_jsonl
    from cader.dev.tiny import make_tiny_model
    from cader.evaluate.backends.hf import HFBackend
    from cader.evaluate.runner import run_samples

    overrides = {}
    if calibration:
        from cader.calibrate.calibration_file import load_calibration

        overrides["temperature"], overrides["tau"] = load_calibration(calibration)
    cfg = tiny_config(**overrides)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        samples = lvbench_like(root, videos, questions, minutes, (width, height))
        backend = HFBackend(model or str(make_tiny_model(root / "model")), dtype="float32")

        def run(out: Path, grouped: bool, chosen=samples):
            return run_samples(chosen, root, out, backend, backend, cfg, video_path=lambda s, r: r / s.video,
                               progress=False, group_by_video=grouped)

        run(root / "warmup.jsonl", False, samples[:1])  # first forward and first decode outside the timings
        result: dict = {"videos": videos, "questions_per_video": questions, "video_seconds": minutes * 60,
                        "n": len(samples), "config": "configs/eval/cader_tiny.yaml", "model": model or "tiny random"}
        result["tau"], result["temperature"] = cfg.tau, cfg.temperature
        records, seconds = {}, {"per_question": [], "grouped": []}
        for attempt in range(repeats):
            for label, grouped in (("per_question", False), ("grouped", True)):
                out = root / f"{label}{attempt}.jsonl"
                with counting_decodes() as counted:
                    start = time.perf_counter()
                    run(out, grouped)
                    seconds[label].append(time.perf_counter() - start)
                rows = records[label] = read_jsonl(out)
                recorded = sum(r["cost"]["frames_decoded"] - r["cost"].get("frames_shared", 0) for r in rows)
                result[label] = {
                    "seconds": round(min(seconds[label]), 2),
                    "seconds_each": [round(x, 2) for x in seconds[label]],
                    "readers_opened": counted["opens"],
                    "frames_decoded": counted["frames"],
                    "frames_per_question": round(counted["frames"] / len(rows), 2),
                    "records_agree": recorded == counted["frames"],
                    "stage2_rate": round(sum(r["route"] == "stage2" for r in rows) / len(rows), 3),
                    "failures": sum(r["error"] is not None for r in rows),
                }
    by_id = {r["sample_id"]: comparable(r) for r in records["per_question"]}
    result["same_records"] = (len(records["grouped"]) == len(by_id) and
                              all(comparable(r) == by_id.get(r["sample_id"]) for r in records["grouped"]))
    alone, grouped = result["per_question"], result["grouped"]
    result["ratio_frames"] = round(grouped["frames_per_question"] / alone["frames_per_question"], 3) \
        if alone["frames_per_question"] else math.nan
    result["ratio_seconds"] = round(grouped["seconds"] / alone["seconds"], 3)
    result["honest"] = alone["records_agree"] and grouped["records_agree"]
    result["goal"] = f"<= {goal}"
    result["ratio"] = result["ratio_frames"]
    return emit(result)


if __name__ == "__main__":
    CLI(main, as_positional=False)
