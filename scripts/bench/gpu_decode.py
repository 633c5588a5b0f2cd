"""The decode half of B14 on the device: CPU seconds of F1, Stage 1's 768 frames at 65,536 px, of B14's 30-minute
720p30 video, on the device's own cores, so F1's decode CPU-seconds per GPU-second of the Stage-1 forward
(`gpu_scoring.py`) come from one machine instead of B14's 2-core CPU and an assumed 40 % MFU.

The video is B14's (`input_pipeline.write_clip`: H.264 High, veryfast, 3 Mbit/s, a keyframe every 2 s, B-frames,
1280x720 at 30 fps, the same panning scene). Written in one piece it takes minutes of one encoder; here it is
written as segments at once, one encoder each, every segment a whole number of keyframe intervals long (so its first
picture is a keyframe where the whole clip has one too), and the segments' packets are joined into one file without
re-encoding. Only x264's rate control restarts at each segment.

F1 is decoded as the evaluation decodes it (`cader.evaluate.method.stage1.sample_stage1_frames` with `CaderConfig()`:
r1 = 1 fps, at most 768 frames, 65,536 px, through `VideoReader`), with the reader's default decoders (at most 8)
and with one per core; CPU seconds are `time.process_time()` of this process (every thread), wall seconds beside them.
"""

from __future__ import annotations

import math
import os
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path


def segment_plan(seconds: int, workers: int, keyframe_s: int) -> list[tuple[int, int]]:
    """(start second, length) of each segment: at most `workers` of them, every length a multiple of `keyframe_s`
    (the last one may be shorter), covering `seconds` exactly."""
    if seconds <= 0 or workers <= 0 or keyframe_s <= 0:
        raise ValueError(f"seconds, workers and keyframe_s must be positive, got {seconds}, {workers}, {keyframe_s}")
    length = keyframe_s * math.ceil(seconds / workers / keyframe_s)
    return [(start, min(length, seconds - start)) for start in range(0, seconds, length)]


def join_segments(parts: list[Path], path: Path) -> None:
    """The segments' packets, one after another in time, in one MP4 (no re-encoding); written to a temporary name
    and renamed."""
    import av

    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp.mp4")
    offset = 0.0  # seconds before the current segment
    with av.open(str(parts[0])) as first, av.open(str(tmp), "w") as out:
        stream = out.add_stream_from_template(first.streams.video[0])
        for part in parts:
            with av.open(str(part)) as source:
                video = source.streams.video[0]
                shift = round(offset / video.time_base)
                for packet in source.demux(video):
                    if packet.dts is None:  # the demuxer's empty packet at the end
                        continue
                    packet.pts += shift
                    packet.dts += shift
                    packet.stream = stream
                    out.mux(packet)
                offset += float(video.duration * video.time_base)
    tmp.replace(path)


def write_segmented_clip(folder: str, seconds: int, workers: int, nice: int = 10) -> dict:
    """B14's clip of `seconds`, written by `workers` encoders at once, joined into `folder`/<name>; returns its path
    and the wall seconds it took. `nice`: lower this process and its encoders' priority (the GPU's feeders come first).
    """
    from cader.scripts.bench.input_pipeline import CLIP, write_clip

    os.nice(nice)
    start = time.perf_counter()
    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    plan = segment_plan(seconds, workers, CLIP["keyframe_s"])
    parts = [out / f"segment_{k:03d}.mp4" for k in range(len(plan))]
    with ProcessPoolExecutor(max_workers=len(plan)) as pool:
        list(pool.map(write_clip, parts, [n for _, n in plan], [s for s, _ in plan]))
    path = out / f"h264_high_{CLIP['height']}p{CLIP['fps']}_{CLIP['mbit_s']:g}mbps_{seconds}s_segmented.mp4"
    join_segments(parts, path)
    for part in parts:
        part.unlink()
    return {"path": str(path), "seconds": seconds, "segments": len(plan), "write_s": time.perf_counter() - start}


def measure_f1(video: str, decoders: list[int | None] = (None, 0)) -> dict:
    """CPU and wall seconds of F1's decode of `video` with each decoder count (None: the reader's default, 0: one
    per usable core), a fresh reader each."""
    from cader.evaluate.method.config import CaderConfig
    from cader.evaluate.method.stage1 import Cost, sample_stage1_frames
    from cader.vlm.video import VideoReader

    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    cfg, runs = CaderConfig(), []
    for count in decoders:
        reader = VideoReader(video, decode_workers=cores if count == 0 else count)
        cpu, wall = time.process_time(), time.perf_counter()
        frames = sample_stage1_frames(reader, cfg, Cost())
        runs.append({"decoders": reader.decode_workers, "cpu_s": time.process_time() - cpu,
                     "wall_s": time.perf_counter() - wall, "frames": len(frames),
                     "frame_hw": list(frames.frames.shape[1:3])})
    return {"video": Path(video).name, "cores": cores, "max_frames": cfg.max_frames, "max_pixels": cfg.max_pixels,
            "r1": cfg.r1, "runs": runs}
