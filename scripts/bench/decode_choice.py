"""B19: decode choice per video. The planned decode, a sequential threaded decode and torchcodec on 720p H.264.

    python scripts/bench/decode_choice.py [--minutes 3] [--profiles constrained_baseline,...] [--repeats 2]

For each encoding profile (`PROFILES`: Constrained Baseline and High with B-frames, each with a 2-s and a 10-s
keyframe interval; 1280x720, 30 fps, 3 Mbit/s, a panning textured scene) a video of `--minutes` is written once into
`--media_dir` (default /tmp/cader_bench_media/) and reused. On it, three ways decode the same frame indices, each
frame converted to RGB and fitted to 65,536 px as the evaluation does:

  planned     `VideoReader(decode_path="planned")`: one job per keyframe interval on parallel one-thread decoders
              (`cader.vlm.decode_plan`), unreferenced pictures dropped undecoded (H.264/HEVC);
  sequential  `VideoReader(decode_path="sequential")`: one decoder with FFmpeg's frame and slice threads from the
              start of the stream to the last wanted frame, every picture decoded;
  torchcodec  `torchcodec.decoders.VideoDecoder(seek_mode="exact")`, `get_frames_at` (one FFmpeg thread), then the
              same resize (when torchcodec loads here; otherwise the error is reported and the row left out);

and `chosen` is `VideoReader()` as shipped: the path `cader.vlm.decode_plan.choose_decode` picks from the video's index
(keyframe density, B-frames) and the wanted frames (timed too, as a check that it runs the path it names). Two samplings per video: Stage 1's on a 30-minute video (768 frames
over 1,800 s: 0.427 frames per second, spread the same way here) and the 1-fps grid. The cost is CPU seconds of this
process (every thread counted; the machine is shared, so wall time would count waiting for a core), the least of
`--repeats` runs, the paths alternating. Every path's frames are compared with the planned path's (byte-identical, or
the row says how far off they are).

Headline: the worst over profiles and samplings of the chosen path's CPU seconds / the best product path's (planned or
sequential), both from the same timed runs; goal <= 1.05. The ratio with torchcodec among the best is reported too
(torchcodec is no product path: it needs a system FFmpeg, see DESIGN.md). One torch thread and one swscale thread
throughout: see `main`.
How it extrapolates: each path's cost is per decoded frame (a fixed share of the video at a given sampling density and
keyframe interval) plus a per-keyframe-interval seek for the plan, so a 3-minute video sampled at the 30-minute
density gives the same ratios as the 30-minute one (`--minutes 30` writes and measures that one: ~11 CPU-minutes of
encoding per profile).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import numpy as np
from cader.scripts.bench.harness import MEDIA_DIR, emit, encode_video
from cader.scripts.bench.input_pipeline import panning, timed
from jsonargparse import CLI

WIDTH, HEIGHT, FPS, MBIT_S = 1280, 720, 30, 3.0
MAX_PIXELS = 65_536  # the paper's per-frame budget for long videos
STAGE1_FRAMES_PER_S = 768 / 1800  # Stage 1 on a 30-minute video: 768 frames spread over 1,800 s
PROFILES = {  # x264 settings: no B-frames (phones, conferencing, screen capture) vs B-frames (web video)
    "constrained_baseline": {"profile": "baseline", "g": "60", "bf": "0"},
    "constrained_baseline_long_gop": {"profile": "baseline", "g": "300", "bf": "0"},
    "b_frames": {"profile": "high", "g": "60", "bf": "3"},
    "b_frames_long_gop": {"profile": "high", "g": "300", "bf": "3"},
}
GOAL = 1.05


def write_video(path: Path, minutes: float, settings: dict) -> Path:
    """A 1280x720 30-fps H.264 video with these x264 settings, written under a temporary name and renamed."""
    pictures = panning(HEIGHT, WIDTH, 256, 2, range(int(minutes * 60 * FPS)))  # B6's scene: both encode alike
    # sc_threshold 0: keyframes exactly every g frames (no scene-cut keyframes), so the profile is what it says.
    return encode_video(path, pictures, FPS, options={"preset": "veryfast", "sc_threshold": "0", "threads": "2",
                                                      **settings}, bit_rate=int(MBIT_S * 1e6))


def media(folder: Path, profile: str, minutes: float) -> Path:
    """The profile's video of `minutes` in `folder`, written on first use."""
    path = folder / f"h264_{profile}_{HEIGHT}p{FPS}_{MBIT_S:g}mbps_{minutes:g}min.mp4"
    if not path.is_file():
        start = time.process_time()
        write_video(path, minutes, PROFILES[profile])
        print(f"wrote {path} in {time.process_time() - start:.0f} CPU-s", file=sys.stderr)
    return path


def torchcodec_decoder(path: Path):
    """(a function decoding frame indices with torchcodec, None) or (None, why torchcodec cannot run here)."""
    try:
        from torchcodec.decoders import VideoDecoder

        VideoDecoder(str(path), seek_mode="exact", num_ffmpeg_threads=1)
    except Exception as err:  # noqa: BLE001 - any failure to load is reported, and the row left out
        return None, f"{type(err).__name__}: {str(err).splitlines()[0][:300]}"

    def decode(indices: np.ndarray) -> np.ndarray:
        from cader.vlm.sampling import fit_pixels
        from cader.vlm.video import resize_to

        decoder = VideoDecoder(str(path), seek_mode="exact", num_ffmpeg_threads=1)
        size = fit_pixels(HEIGHT, WIDTH, MAX_PIXELS)
        out = np.empty((len(indices), *size, 3), np.uint8)
        for start in range(0, len(indices), 32):  # 32 at a time: native 720p frames are 2.8 MB each
            batch = decoder.get_frames_at([int(i) for i in indices[start:start + 32]]).data
            out[start:start + 32] = resize_to(batch.permute(0, 2, 3, 1).numpy(), size)
        return out

    return decode, None


def measure(path: Path, frames_per_s: float, workers: int, repeats: int) -> dict:
    """Every path on one video and sampling: least CPU seconds, what the chooser picks, and whether frames agree."""
    from cader.vlm.decode_plan import decode_costs
    from cader.vlm.sampling import uniform_times
    from cader.vlm.video import VideoReader

    probe = VideoReader(path, decode_workers=workers)
    indices = probe.frame_table.showing(uniform_times(0.0, probe.duration, frames_per_s))
    ways = {name: (lambda name=name: VideoReader(path, decode_workers=workers, decode_path=name)
                   .decode_indices(indices, MAX_PIXELS).frames)
            for name in ("planned", "sequential")}
    chooser = VideoReader(path, decode_workers=workers)
    ways["chosen"] = lambda: chooser.decode_indices(indices, MAX_PIXELS).frames
    torchcodec, why_not = torchcodec_decoder(path)
    if torchcodec is not None:
        ways["torchcodec"] = lambda: torchcodec(indices)
    best, frames = {name: float("inf") for name in ways}, {}
    for _ in range(repeats):  # alternating, so a change in the machine's load hits every path alike
        for name, work in ways.items():
            frames[name], seconds, _ = timed(work, 1)  # CPU seconds of this process, all threads
            best[name] = min(best[name], seconds)
    reference = frames["planned"]
    agreement = {name: "identical" if np.array_equal(f, reference) else
                 f"differs: max |diff| {int(np.abs(f.astype(np.int16) - reference).max())}, "
                 f"{float(np.mean(f != reference)):.1%} of bytes" for name, f in frames.items() if name != "planned"}
    costs = decode_costs(indices, chooser.stream_facts, workers)
    (picked,) = chooser.paths_taken  # one path per video and sampling: the choice is a function of both
    product = min(best["planned"], best["sequential"])
    return {"frames": len(indices), "frames_per_s": round(frames_per_s, 4), "reorders": chooser.reorders,
            "keyframe_interval": round(probe.num_frames / max(1, len(probe.stream_facts.key_indices)), 1),
            "cpu_s": {name: round(value, 3) for name, value in best.items()},
            "chosen_path": picked, "estimated_pictures": {"planned": round(costs.planned),
                                                                             "sequential": round(costs.sequential)},
            "chosen_over_best": round(best[picked] / product, 3),
            "chosen_over_best_with_torchcodec": round(best[picked] / min(v for k, v in best.items() if k != "chosen"), 3),
            "torchcodec": "measured" if torchcodec is not None else f"not measured: {why_not}",
            "frames_vs_planned": agreement}


def main(minutes: float = 3.0, profiles: str = ",".join(PROFILES), repeats: int = 2, workers: int = 2,
         media_dir: str = str(MEDIA_DIR)) -> dict:
    """Measure the three decodes and the chooser on each profile's video; print and return the table.

    Args:
        minutes: Length of each video (written once per length into media_dir; 30 for the paper's length).
        profiles: Comma-separated names from PROFILES.
        repeats: Timed runs per path (the least CPU time is kept).
        workers: Parallel decoders of the plan, FFmpeg threads of the sequential decode.
        media_dir: Where the videos are written and reused.
    """
    import torch

    folder = Path(media_dir)
    folder.mkdir(parents=True, exist_ok=True)
    threads = torch.get_num_threads()
    # One torch thread for the resize, as in a DataLoader worker: with more, OpenMP's spin-waiting after each small
    # resize costs more CPU than the resize itself on a loaded machine, and hits the paths unevenly.
    torch.set_num_threads(1)
    rows = {}
    try:
        for profile in profiles.split(","):
            path = media(folder, profile, minutes)
            for sampling, rate in (("stage1_30min_density", STAGE1_FRAMES_PER_S), ("grid_1fps", 1.0)):
                rows[f"{profile}/{sampling}"] = row = measure(path, rate, workers, repeats)
                print(f"{profile}/{sampling}: {json.dumps(row)}", file=sys.stderr, flush=True)
    finally:
        torch.set_num_threads(threads)
    ratio = max(row["chosen_over_best"] for row in rows.values())
    result = {"minutes": minutes, "workers": workers, "repeats": repeats, "rows": rows, "ratio": ratio,
              "goal": f"<= {GOAL:g}", "meets_goal": ratio <= GOAL}
    return emit(result)


if __name__ == "__main__":
    CLI(main, as_positional=False)
