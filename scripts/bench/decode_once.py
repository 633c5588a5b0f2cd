"""B14: decode CPU-seconds of one Stage-2 sample with two reflections: (a) the default, (b) the speed option, each over
the exact per-context path; and the average decode per sample of a run at the paper's exit rate.

    python scripts/bench/decode_once.py [--minutes 30] [--media_dir /tmp/cader_bench_media]

The video is H.264 High 1280x720 30 fps with a keyframe every 2 s and B-frames (`input_pipeline.CLIP`, web video as
B6 encodes it), `minutes` long, written once into `media_dir` under a name holding its parameters and reused (30
minutes take long to encode on 2 cores: `--minutes 5` for a quick run). The sample runs through the runner's own
`process_sample` at the paper's settings (`CaderConfig()` = configs/eval/cader.yaml: r1 1 fps, 768 frames, 65,536
px, K = 2) with scripted models: Stage 1 unsure, three proposals (20, 45 and 90 s windows on 30 minutes, crops at
r2 = 8, 8 and 5.7 fps; narrower on a short video, within the 20 % breadth rule), each rejected (P_yes 0.1), so both
reflections resample. Three paths run in this process with a fresh reader each, alternately:
  default  (a) one decode of F1 and the r1 lattice (`cader.evaluate.method.whole_video`), the contexts taken from
           it with Algorithm 2's counts, + three crops;
  speed    (b) `trade_rgr_frames_for_speed`: F1's decode alone, the contexts taken from F1's frames, + three crops;
  exact    each RGR context decoded on its own (`grid_max_bytes=1`, the fallback; the same frames as (a)): F1 + two
           whole-video decodes + three crops.
CPU seconds are `time.process_time()` (every thread of the process), the least of `repeats`. Goals: (a) / exact <=
0.6 with its contexts holding every frame of the exact path's (frames kept 1.0), (b) / exact <= 0.42. A sample that
exits after Stage 1 pays only the whole-video decode (the grid for (a), F1 for (b) and exact), so the average per
sample at the paper's exit rate (38.6 % of samples exit, `EXIT_RATE`) is reported for each path too. Alongside: F1's
decode CPU-seconds over the GPU seconds of the Stage-1 forward of Qwen3-VL-8B on those frames (`cader.vlm.flops`
at its real widths and depth, language model + ViT, `mfu` of an H100's 989 TFLOP/s).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from jsonargparse import CLI

GOAL_DEFAULT = 0.6   # (a) / exact, its contexts holding every frame of the exact path's
GOAL_SPEED = 0.42    # (b) / exact
EXIT_RATE = 0.386    # samples that skip Stage 2 in the paper (Table 3: 2,788 of 7,227); they decode the grid too
WINDOWS = ((300.0, 320.0), (600.0, 645.0), (900.0, 990.0))  # seconds, scaled to shorter videos
TEXT_TOKENS = 200  # the Stage-1 prompt around the video


def bench_video(media_dir: Path, minutes: float) -> Path:
    """The bench's video (written once, reused): B6's 720p30 H.264 High clip of `minutes` minutes."""
    from cader.scripts.bench.input_pipeline import clip

    media_dir.mkdir(parents=True, exist_ok=True)
    return clip(media_dir, round(minutes * 60))


def reference_pictures_cpu_s(video: Path, windows: list[tuple[float, float]]) -> tuple[float, int]:
    """(CPU seconds, pictures) of decoding only the reference pictures of each window, on one thread from the
    keyframe before it (skip_frame=NONREF for every picture). An exact crop decodes at least these (every later
    picture of its window depends on them) plus its wanted unreferenced ones, and converts what it keeps: a floor
    under any exact decode of the crops."""
    import av

    start, pictures = time.process_time(), 0
    with av.open(str(video)) as container:
        stream = container.streams.video[0]
        stream.codec_context.thread_count = 1
        stream.codec_context.skip_frame = "NONREF"
        for first, last in windows:
            container.seek(int(first / float(stream.time_base)), stream=stream, backward=True)
            for frame in container.decode(stream):
                pictures += 1
                if frame.time is not None and frame.time >= last:
                    break
    return time.process_time() - start, pictures


def stage1_gpu_seconds(n_frames: int, height: int, width: int, mfu: float, peak_tflops: float) -> tuple[float, int]:
    """(GPU seconds of Qwen3-VL-8B's Stage-1 forward on `n_frames` frames of height x width, its prompt length)."""
    from cader.vlm.flops import QWEN3_VL_8B_TEXT, QWEN3_VL_8B_VISION, text_forward_flops, vision_forward_flops

    vision = QWEN3_VL_8B_VISION
    t = -(-n_frames // vision.temporal_patch)
    h, w = height // vision.patch, width // vision.patch
    tokens = t * h * w // vision.merge**2
    seq = tokens + 8 * t + TEXT_TOKENS  # a "<t seconds>" stamp and the start/end tokens per temporal pair
    flops = text_forward_flops(QWEN3_VL_8B_TEXT, seq) + vision_forward_flops(vision, [(t, h, w)])
    return flops / (mfu * peak_tflops * 1e12), seq


def timed_reader_class():
    """A VideoReader that notes each decode: (first index, last index, CPU seconds)."""
    from cader.vlm.video import VideoReader

    class Timed(VideoReader):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.decodes = []

        def decode_indices(self, indices, max_pixels=None):
            start = time.process_time()
            frames = super().decode_indices(indices, max_pixels)
            if len(indices):
                self.decodes.append((int(indices[0]), int(indices[-1]), time.process_time() - start))
            return frames

    return Timed


def rejecting_backend(windows):
    """Scripted models: Stage 1 unsure, every proposal one of `windows` in turn, every crop rejected."""
    from cader.dev.scripted import ScriptedBackend
    from cader.evaluate.backends.base import Generation

    class Rejecting(ScriptedBackend):
        def __init__(self):
            super().__init__({"q": [0.0, 0.1, 0.0, 0.0]}, p_yes=0.1)
            self.turn = 0

        def generate(self, prompts, max_new_tokens):
            s, e = windows[self.turn % len(windows)]
            self.turn += 1
            return [Generation(f'"relevant_windows": [[{s:.1f}, {e:.1f}]]', 5, 3) for _ in prompts]

    return Rejecting()


def decode_parts(decodes, num_frames: int) -> dict:
    """CPU seconds by part: the first whole-video decode (F1 or the grid), later whole-video ones (RGR contexts on
    their own), and the crops."""
    whole = [cpu for first, last, cpu in decodes if last - first > 0.5 * num_frames]
    crops = sum(cpu for first, last, cpu in decodes if last - first <= 0.5 * num_frames)
    return {"whole": round(whole[0], 2), "rgr_contexts": [round(c, 2) for c in whole[1:]], "crops": round(crops, 2)}


def run_paths(video: Path, windows, repeats: int) -> tuple[dict, dict, dict, object]:
    """The three paths on one sample: (least CPU-s, record, decode parts) per path, and the last reader."""
    from cader.evaluate.benchmarks.base import Sample
    from cader.evaluate.method.config import CaderConfig
    from cader.evaluate.runner import process_sample

    timed = timed_reader_class()
    sample = Sample("bench", "s0", video.name, "q", ["a", "b", "c", "d"], list("ABCD"), "B", None, {})
    paths = {"default": CaderConfig(), "speed": CaderConfig(trade_rgr_frames_for_speed=True),
             "exact": CaderConfig(grid_max_bytes=1)}
    best = {name: float("inf") for name in paths}
    records, parts, reader = {}, {}, None
    for _ in range(repeats):
        for name, cfg in paths.items():
            backend = rejecting_backend(windows)
            start = time.process_time()
            reader = timed(video, decode_workers=cfg.decode_workers)
            record = process_sample(sample, video, backend, backend, cfg, reader=reader)
            spent = time.process_time() - start
            if spent < best[name]:
                best[name], records[name], parts[name] = spent, record, decode_parts(reader.decodes, reader.num_frames)
    for name, record in records.items():
        steps = record["stage2"]["steps"] if record.get("stage2") else []
        if record["error"] or sum(s["phase"] == "resample" for s in steps) != 2:
            raise RuntimeError(f"{name}: not a sample with two reflections: {record['error'] or steps}")
    return best, records, parts, reader


def context_frames(record) -> list[int]:
    return [s["n_frames"] for s in record["stage2"]["steps"] if s["phase"] == "resample"]


def per_sample_average(parts: dict, exit_rate: float = EXIT_RATE) -> float:
    """Decode CPU-s per sample of a run where `exit_rate` of the samples exit after Stage 1 (they pay the whole-video
    decode only) and the rest are like this one."""
    stage2 = parts["whole"] + sum(parts["rgr_contexts"]) + parts["crops"]
    return exit_rate * parts["whole"] + (1 - exit_rate) * stage2


def main(minutes: float = 30.0, media_dir: str = "/tmp/cader_bench_media", repeats: int = 1, mfu: float = 0.4,
         peak_tflops: float = 989.0) -> dict:
    """One Stage-2 sample with two reflections on each path; returns the ratios and the parts.

    Args:
        minutes: Video length (30: the paper's long videos; shorter for a quick run).
        media_dir: Where the video is written once and reused.
        repeats: Runs of each path (the least CPU time is kept).
        mfu: Model FLOPs utilisation assumed for the GPU.
        peak_tflops: The GPU's dense bf16 peak (H100 SXM: 989).
    """
    from cader.evaluate.method.config import CaderConfig
    from cader.vlm.sampling import fit_pixels

    video = bench_video(Path(media_dir), minutes)
    scale = minutes / 30.0  # the windows' places scale with the video; their widths only below 15 % of it
    width_scale = min(1.0, 0.15 * minutes * 60 / max(e - s for s, e in WINDOWS))
    windows = [(s * scale, s * scale + (e - s) * width_scale) for s, e in WINDOWS]
    best, records, parts, reader = run_paths(video, windows, repeats)
    kept = {name: sum(context_frames(records[name])) / sum(context_frames(records["exact"])) for name in records}
    ratio = {name: best[name] / best["exact"] for name in ("default", "speed")}
    average = {name: per_sample_average(parts[name]) for name in parts}
    f1_frames = records["default"]["stage1"]["n_frames"]
    gpu_s, seq = stage1_gpu_seconds(f1_frames, *fit_pixels(reader.height, reader.width, CaderConfig().max_pixels),
                                    mfu, peak_tflops)
    f1_cpu = parts["exact"]["whole"]
    floor_cpu, floor_pictures = reference_pictures_cpu_s(video, windows)
    result = {
        "video": video.name, "minutes": minutes, "cpu_s": {k: round(v, 2) for k, v in best.items()},
        "frames_decoded": {k: r["cost"]["frames_decoded"] for k, r in records.items()},
        "crops": [s["n_frames"] for s in records["default"]["stage2"]["steps"] if s["phase"] == "verify"],
        "rgr_frames": {k: context_frames(r) for k, r in records.items()},
        "frames_kept": {k: round(v, 4) for k, v in kept.items()},
        "decode_cpu_s": parts,
        "per_sample_at_exit_rate": {"exit_rate": EXIT_RATE, **{k: round(v, 2) for k, v in average.items()},
                                    "default_over_exact": round(average["default"] / average["exact"], 3),
                                    "speed_over_exact": round(average["speed"] / average["exact"], 3)},
        "f1": {"frames": f1_frames, "decode_cpu_s": round(f1_cpu, 2), "stage1_prompt_tokens": seq,
               "stage1_gpu_s": round(gpu_s, 3), "decode_cpu_s_per_gpu_s": round(f1_cpu / gpu_s, 1)},
        "crops_floor": {"cpu_s": round(floor_cpu, 2), "reference_pictures": floor_pictures},
        "ratio_default": round(ratio["default"], 3), "ratio_speed": round(ratio["speed"], 3),
        "goal": f"default <= {GOAL_DEFAULT} with frames kept 1.0, speed <= {GOAL_SPEED}",
        "meets_goal": ratio["default"] <= GOAL_DEFAULT and kept["default"] == 1.0 and ratio["speed"] <= GOAL_SPEED,
    }
    print(f"B14 decode CPU-s of one Stage-2 sample, two reflections, {minutes:g} min 720p: default "
          f"{best['default']:.1f}, speed {best['speed']:.1f}, exact {best['exact']:.1f}: (a) {ratio['default']:.3f} "
          f"(goal <= {GOAL_DEFAULT}, frames kept {kept['default']:.3f}), (b) {ratio['speed']:.3f} (goal <= "
          f"{GOAL_SPEED}, frames kept {kept['speed']:.3f}); per sample at {EXIT_RATE:.1%} exits: "
          f"{average['default']:.1f} / {average['speed']:.1f} / {average['exact']:.1f}")
    print(json.dumps(result, indent=1))
    return result


if __name__ == "__main__":
    CLI(main, as_positional=False)
