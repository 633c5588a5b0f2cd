"""B6: can the video input pipeline keep a GPU fed? CPU cores per GPU for Qwen3-VL-8B SFT at the paper's settings.

    python scripts/bench/input_pipeline.py [--durations 30,60,120] [--minutes 10,30] [--mfu 0.4] [--clip_dir D]

Sources: short clips (`--durations`, seconds) and long ones (`--minutes`): a 30-minute 720p source is what
LongVideo-Reason trains on, and the one whose decode outweighs its GPU step (measured: ~17 CPU-s of decode per
GPU-second without a cache). Each sample takes the frames the token budget plans for it at cot_mix's settings
(`cader.train.budget.plan_budget`, 10,240 tokens: 264 frames for 10 or 30 minutes), not one a second of the source.
The headline is the warm frame cache (the paper recipe for long-video sources fills it ahead,
scripts/fill_frame_cache.py), worst source; the cold and no-cache figures are reported beside it. The worker's
processor leaves the pixels as uint8 (`cader.train.pixels`: the normalisation runs on the GPU), as training's
DataLoader workers now do. A 30-minute source takes minutes to write once on two cores (cached in `clip_dir`,
default /tmp/cader_bench_media/); `every_picture` is measured on the short clips only (on a long source it is
minutes of decode that only restate the old baseline).

Clips are encoded as web video is: H.264 High profile (CABAC, B-frames), 1280x720, 30 fps, a keyframe every 2 s,
3 Mbit/s, a panning textured scene with a moving block. They are written once into `clip_dir` and reused.

Each sample is timed as one DataLoader worker runs it (one torch thread, one decoder) in CPU seconds of this process
(every thread counted; wall time on a shared machine also counts the time spent waiting for a core), along three
paths of the training input (`cader.vlm.frame_cache.training_frames`: 1 fps, 65,536 px per frame, then the
Qwen3-VL processor call):
  no_cache  decode the sampling, as training does without `data.frame_cache_dir` (the shipped paper config);
  cold      through an empty frame cache: decode and write, the first epoch of a cache filled by training;
  warm      through a filled cache: read, every later epoch, or every epoch after scripts/fill_frame_cache.py.
`every_picture` is no_cache with the decoder made to decode every picture (`skip_unwanted=False`), the decode before
unreferenced pictures were dropped. The GPU side is the training-step FLOPs of Qwen3-VL-8B for the sample's token
count (`cader.vlm.flops`, language model + ViT) at the given MFU on an H100-class GPU (989 dense bf16 TFLOP/s).
cores per GPU = CPU seconds per sample / GPU seconds per sample, the worst clip per path; goal <= 8.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import numpy as np
from cader.scripts.bench.harness import MEDIA_DIR, emit, encode_video
from jsonargparse import CLI

TEXT_TOKENS = 1_000  # prompt + CoT target around the video, typical of the LongVT SFT rows
PROMPT_TOKENS, TARGET_TOKENS = 200, 800  # its split around the video, for the token budget
FPS, MAX_FRAMES, MAX_PIXELS = 1.0, 4_096, 65_536  # the paper's sampling (supplementary A)
MAX_LENGTH = 10_240  # Table 6
GOAL = 8.0
CLIP = {"codec": "libx264", "preset": "veryfast", "profile": "High (CABAC, B-frames)", "width": 1280, "height": 720,
        "fps": 30, "keyframe_s": 2, "mbit_s": 3.0}


def scene(height: int, width: int, margin: int) -> np.ndarray:
    """A textured picture `margin` px larger than the frame each way: gradients plus blotches plus grain."""
    rng = np.random.default_rng(0)
    h, w = height + margin, width + margin
    yy, xx = np.mgrid[0:h, 0:w]
    img = np.stack([(xx // 3) % 256, (yy // 2) % 256, ((xx + yy) // 5) % 256], -1).astype(np.int16)
    blotches = rng.integers(-40, 40, (h // 8 + 1, w // 8 + 1, 3), dtype=np.int16)
    img += np.repeat(np.repeat(blotches, 8, 0), 8, 1)[:h, :w]
    img += rng.integers(-6, 7, (h, w, 3), dtype=np.int16)
    return np.clip(img, 0, 255).astype(np.uint8)


def ping_pong(step: int, span: int) -> int:
    """0, 1, ..., span, span - 1, ..., 0, ...: a camera that pans back and forth without jumping."""
    phase = step % (2 * span)
    return phase if phase <= span else 2 * span - phase


def panning(height: int, width: int, margin: int, pan: int, frames: range):
    """The pictures `frames` of a camera panning over `scene` (`pan` px right, 1 px down per frame, back and forth)
    with an inverted block moving across."""
    world = scene(height, width, margin)
    for k in frames:
        x, y = ping_pong(pan * k, margin), ping_pong(k, margin)
        img = world[y:y + height, x:x + width].copy()
        x0 = (8 * k) % (width - 200)
        img[200:400, x0:x0 + 200] = 255 - img[200:400, x0:x0 + 200]
        yield img


def write_clip(path: Path, seconds: int, start_s: int = 0) -> Path:
    """A clip as `CLIP` describes, written to a temporary name and renamed (a reused clip is always whole).
    `start_s`: the second of the scene it starts at (a segment of a longer clip, written beside the others by
    gpu_decode.py)."""
    fps = CLIP["fps"]
    pictures = panning(CLIP["height"], CLIP["width"], 512, 4, range(start_s * fps, (start_s + seconds) * fps))
    options = {"preset": CLIP["preset"], "g": str(CLIP["keyframe_s"] * fps), "threads": "2"}
    return encode_video(path, pictures, fps, CLIP["codec"], options, bit_rate=int(CLIP["mbit_s"] * 1e6))


def clip(folder: Path, seconds: int) -> Path:
    """The clip of `seconds` in `folder`, written on first use."""
    name = f"h264_high_{CLIP['height']}p{CLIP['fps']}_{CLIP['mbit_s']:g}mbps_{seconds}s.mp4"
    path = folder / name
    return path if path.is_file() else write_clip(path, seconds)


def planned_frames(seconds: float) -> int:
    """Frames the token budget gives a 720p source of `seconds` at cot_mix's settings (the short clips keep one a
    second; a long one loses frames until the sample fits 10,240 tokens)."""
    from cader.train.budget import BudgetConfig, VideoSpec, plan_budget

    cfg = BudgetConfig(max_length=MAX_LENGTH, fps=FPS, max_frames=MAX_FRAMES, video_max_pixels=MAX_PIXELS)
    plan = plan_budget(PROMPT_TOKENS, TARGET_TOKENS, [VideoSpec(float(seconds), CLIP["height"], CLIP["width"])], [],
                       cfg)
    if not plan.keep:
        raise ValueError(f"a {seconds} s source does not fit the budget: {plan.reason}")
    return plan.video_frames[0]


def gpu_seconds(grid_thw: tuple[int, int, int], mfu: float, peak_tflops: float) -> tuple[float, int]:
    """(seconds of one training step of this sample on one GPU at `mfu`, its sequence length)."""
    from cader.vlm.flops import (
        QWEN3_VL_8B_TEXT,
        QWEN3_VL_8B_VISION,
        text_forward_flops,
        training_step_flops,
        vision_forward_flops,
    )

    t, h, w = grid_thw
    vision_tokens = t * h * w // (QWEN3_VL_8B_VISION.merge ** 2)
    seq = vision_tokens + 8 * t + TEXT_TOKENS  # 8: a "<t seconds>" stamp and the start/end tokens per group
    flops = training_step_flops(text_forward_flops(QWEN3_VL_8B_TEXT, seq)
                                + vision_forward_flops(QWEN3_VL_8B_VISION, [grid_thw]))
    return flops / (mfu * peak_tflops * 1e12), seq


def timed(work, repeats: int, before=None) -> tuple[object, float, float]:
    """(result, least CPU seconds, least wall seconds) of `repeats` runs of `work()`; `before()` runs untimed
    ahead of each (to empty a cache, say). The least: the machine's noise only adds time."""
    best_cpu = best_wall = float("inf")
    for _ in range(repeats):
        if before is not None:
            before()
        cpu, wall = time.process_time(), time.perf_counter()
        result = work()
        best_cpu, best_wall = min(best_cpu, time.process_time() - cpu), min(best_wall, time.perf_counter() - wall)
    return result, best_cpu, best_wall


def measure_clip(path: Path, frames_wanted: int, processor, cache_root: Path, repeats: int,
                 every_picture_path: bool = True) -> dict:
    """CPU and wall seconds of one sample of `path` along every path, and what the GPU makes of it."""
    import shutil

    from cader.vlm.frame_cache import FrameCache, TrainingSampling, sample_for_training, training_frames
    from cader.vlm.messages import build_messages, encode
    from cader.vlm.video import VideoReader

    sampling = TrainingSampling(FPS, frames_wanted, MAX_PIXELS)

    def model_inputs(frames):
        return encode(processor, build_messages("Describe the clip.", video=frames), video=frames)

    def through(cache):
        return lambda: model_inputs(training_frames(path, sampling, cache))

    def every_picture():
        return model_inputs(sample_for_training(VideoReader(path, decode_workers=1, skip_unwanted=False), sampling))

    def empty_cache():
        shutil.rmtree(cache_root, ignore_errors=True)

    cold_cache = FrameCache(cache_root, decode_workers=1)
    paths = {"every_picture": timed(every_picture, repeats)[1:]} if every_picture_path else {}
    paths.update({"no_cache": timed(through(None), repeats)[1:],
                  "cold": timed(through(cold_cache), repeats, before=empty_cache)[1:]})
    warm_cache = FrameCache(cache_root, decode_workers=1)
    feats, *paths["warm"] = timed(through(warm_cache), repeats)
    assert warm_cache.stats.hits == repeats, "the warm path must not decode"
    frames = warm_cache.get(warm_cache.key(path, sampling))
    _, processor_cpu, _ = timed(lambda: model_inputs(frames), repeats)
    return {"frames": len(frames), "frame_size": list(frames.frames.shape[1:3]),
            "grid": tuple(int(x) for x in feats["video_grid_thw"][0]), "processor_cpu_s": round(processor_cpu, 3),
            "cpu_s": {k: round(v[0], 3) for k, v in paths.items()},
            "wall_s": {k: round(v[1], 3) for k, v in paths.items()},
            "cache_bytes": sum(p.stat().st_size for p in cache_root.rglob("*") if p.is_file())}


def summary_line(by_path: dict[str, float]) -> str:
    parts = [f"{name} {value:.2f} ({'meets' if value <= GOAL else 'misses'} the goal)"
             for name, value in by_path.items()]
    return f"cores per GPU (goal <= {GOAL:g}): " + ", ".join(parts)


def main(durations: str = "30,60,120", minutes: str = "", mfu: float = 0.4, peak_tflops: float = 989.0,
         repeats: int = 2, processor: str | None = None, clip_dir: str | None = None) -> dict:
    """Time the per-sample CPU work along each path and compare it with the GPU step.

    Args:
        durations: Short clip lengths in seconds (comma-separated; empty: none).
        minutes: Long source lengths in minutes (comma-separated, e.g. "10,30"; empty: none).
        mfu: Model FLOPs utilisation assumed for the GPU.
        peak_tflops: The GPU's dense bf16 peak (H100 SXM: 989).
        repeats: Timed repeats per clip and path (the least is kept).
        processor: A Qwen3-VL processor folder (default: the tiny model's, built here; same video processor class).
        clip_dir: Where the clips are written once and reused (default: /tmp/cader_bench_media).
    """
    import torch
    from cader.dev.tiny import make_tiny_model
    from cader.train.pixels import raw_pixel_processor
    from cader.vlm.loading import load_processor

    folder = Path(clip_dir or MEDIA_DIR)
    folder.mkdir(parents=True, exist_ok=True)
    sources = [(int(x), True) for x in durations.split(",") if x.strip()]
    sources += [(int(float(x) * 60), False) for x in minutes.split(",") if x.strip()]
    if not sources:
        raise ValueError("no source: give --durations and/or --minutes")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # what torch runs with inside a DataLoader worker
    rows = []
    try:
        with tempfile.TemporaryDirectory() as tmp:
            # the worker's processor: uint8 patches, normalised on the GPU (cader.train.pixels)
            proc = raw_pixel_processor(load_processor(processor or str(make_tiny_model(Path(tmp) / "tiny"))))
            for seconds, short in sources:
                frames = planned_frames(seconds)
                row = measure_clip(clip(folder, seconds), frames, proc, Path(tmp) / f"frames_{seconds}", repeats,
                                   every_picture_path=short)
                gpu, seq = gpu_seconds(row.pop("grid"), mfu, peak_tflops)
                rows.append({"clip_seconds": seconds, **row, "tokens": seq, "gpu_step_s": round(gpu, 4),
                             "samples_per_s_per_worker": {k: round(1.0 / v, 2) for k, v in row["cpu_s"].items()},
                             "cores_per_gpu": {k: round(v / gpu, 2) for k, v in row["cpu_s"].items()}})
    finally:
        torch.set_num_threads(threads)
    names = dict.fromkeys(name for r in rows for name in r["cores_per_gpu"])
    by_path = {name: max(r["cores_per_gpu"][name] for r in rows if name in r["cores_per_gpu"]) for name in names}
    longest = max(rows, key=lambda r: r["clip_seconds"])
    # The headline is the paper recipe's path: the frame cache filled ahead (warm), worst source; cold and no cache
    # say what the cache saves and what a run without one needs.
    result = {"mfu": mfu, "peak_tflops": peak_tflops, "clip": CLIP, "sampling": {"fps": FPS, "max_pixels": MAX_PIXELS},
              "rows": rows, "cores_per_gpu_by_path": by_path,
              "meets_goal": {name: value <= GOAL for name, value in by_path.items()},
              "cache_bytes_per_frame": round(max(r["cache_bytes"] / r["frames"] for r in rows)),
              "longest_source_s": longest["clip_seconds"], "longest_cores_per_gpu": longest["cores_per_gpu"],
              "cores_per_gpu": by_path["warm"], "cold_cores_per_gpu": by_path["cold"], "headline_path": "warm",
              "goal": f"<= {GOAL:g}"}
    emit(result)
    print(summary_line(by_path))
    return result


if __name__ == "__main__":
    CLI(main, as_positional=False)
