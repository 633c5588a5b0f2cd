"""B1: 1-fps sampling of a 10-minute 24 fps 320x240 video, project loader vs transformers' PyAV loader.

Both sides return 600 frames as uint8 arrays at native size. The baseline is
`transformers.video_utils.load_video(path, backend="pyav", fps=1)`, which decodes the stream sequentially up to its
last index. The project loader (`cader.vlm.video.VideoReader.sample_uniform(1.0)`) plans one job per keyframe
interval (seek to the keyframe, decode to the last wanted frame) and runs the jobs on parallel decoders; the bench
prints the share of frames that plan must decode, and checks that on the baseline's own indices both loaders return
byte-identical frames. After one warm-up each, the two sides run alternately `--repeats` times, so a change in the
machine's load hits both alike; the medians are reported, and the ratio is the median of the paired ratios (with
their range). Goal: >= 3x.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
from jsonargparse import CLI


def write_test_video(path: Path, seconds: int, fps: int, width: int, height: int, gop: int) -> None:
    """Moving gradient + a per-second colour change, H.264 with a keyframe every `gop` frames."""
    from cader.scripts.bench.harness import encode_video

    ramp = np.linspace(0, 255, width, dtype=np.float32)[None, :, None]

    def pictures():
        for k in range(seconds * fps):
            img = np.empty((height, width, 3), np.uint8)
            img[:] = ((ramp + 3 * k) % 256).astype(np.uint8)
            img[:, :, 2] = (37 * (k // fps)) % 256
            yield img

    encode_video(path, pictures(), fps, options={"preset": "veryfast", "g": str(gop), "crf": "28"})


def time_it(fn, repeats: int) -> tuple[float, object]:
    result = fn()  # warm-up (page cache, lazy imports)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times), result


def time_paired(ours, baseline, repeats: int) -> tuple[float, float, list[float], object, object]:
    """Run the two sides alternately: (median ours, median baseline, paired ratios baseline/ours, their results)."""
    a, b = ours(), baseline()  # warm-up (page cache, lazy imports)
    t_ours, t_base = [], []
    for _ in range(repeats):
        start = time.perf_counter()
        a = ours()
        middle = time.perf_counter()
        b = baseline()
        t_ours.append(middle - start)
        t_base.append(time.perf_counter() - middle)
    ratios = [tb / to for to, tb in zip(t_ours, t_base)]
    return statistics.median(t_ours), statistics.median(t_base), ratios, a, b


def exact_ceiling(path: Path, decoded_share: float, workers: int, repeats: int) -> float:
    """What an exact decoder could reach here: the share of frames it must decode, on `workers` perfectly scaling
    cores, plus the 600 RGB conversions both loaders make. Printed next to the measured ratio (--breakdown)."""
    import av

    def sequential_decode():
        with av.open(str(path)) as container:
            stream = container.streams.video[0]
            stream.codec_context.thread_count = 1
            return [frame for k, frame in enumerate(container.decode(stream)) if k % 24 == 12]

    t_decode, frames = time_it(sequential_decode, repeats)
    t_convert, _ = time_it(lambda: [f.to_ndarray(format="rgb24") for f in frames], repeats)
    ideal = (decoded_share * t_decode + t_convert) / workers
    print(f"one-thread decode of every frame: {t_decode:.3f} s; {len(frames)} RGB conversions: {t_convert:.3f} s")
    print(f"exact decode on {workers} perfectly scaling cores: {ideal:.3f} s")
    return ideal


def main(seconds: int = 600, fps: int = 24, width: int = 320, height: int = 240, gop: int = 48, repeats: int = 3,
         video: str | None = None, workers: int | None = None, breakdown: bool = False) -> float:
    """Run the benchmark and print both times and the ratio.

    Args:
        seconds: Video length.
        fps: Native frame rate.
        width: Frame width.
        height: Frame height.
        gop: Keyframe interval in frames (48 = 2 s, typical of streamed video).
        repeats: Timed runs per loader (median reported).
        video: Use this file instead of generating one.
        workers: Parallel decoders for the project loader (default: the usable cores, at most 8).
        breakdown: Also time a one-thread sequential decode and the RGB conversions, and print the ratio an exact
            decoder would reach on perfectly scaling cores (the ceiling the measured ratio is below).
    """
    from cader.vlm.decode_plan import group_by_keyframe
    from cader.vlm.sampling import uniform_times
    from cader.vlm.video import VideoReader
    from transformers.video_utils import load_video

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(video) if video else Path(tmp) / "bench.mp4"
        if not video:
            t0 = time.perf_counter()
            write_test_video(path, seconds, fps, width, height, gop)
            print(f"wrote {path.name}: {seconds}s @ {fps} fps {width}x{height} gop={gop} in {time.perf_counter()-t0:.1f}s")

        def ours():
            return VideoReader(path, decode_workers=workers).sample_uniform(1.0).frames

        def baseline():
            frames, _ = load_video(str(path), backend="pyav", fps=1)
            return frames

        t_ours, t_base, ratios, a, b = time_paired(ours, baseline, repeats)
        reader = VideoReader(path, decode_workers=workers)
        wanted = reader.frame_table.showing(uniform_times(0.0, reader.duration, 1.0))
        plan = group_by_keyframe(wanted, reader._key_indices)
        decoded_share = sum(job.frames_to_decode for job in plan) / reader.num_frames
        _, meta = load_video(str(path), backend="pyav", fps=1)
        same = np.array_equal(reader.decode_indices(np.asarray(meta.frames_indices)).frames, b)
        ideal = exact_ceiling(path, decoded_share, reader.decode_workers, repeats) if breakdown else None
    ratio = statistics.median(ratios)
    print(f"frames: project {len(a)} vs pyav {len(b)}; byte-identical on the baseline's indices: {same}")
    print(f"frames the project's exact plan decodes: {decoded_share:.1%} of the video ({len(plan)} keyframe intervals, "
          f"{reader.decode_workers} decoders)")
    print(f"project loader (planned parallel decode): {t_ours:.3f} s")
    print(f"transformers load_video pyav:  {t_base:.3f} s")
    print(f"B1 ratio: {ratio:.2f}x (goal >= 3x; median of {len(ratios)} paired runs, "
          f"range {min(ratios):.2f}-{max(ratios):.2f}x)")
    if ideal is not None:
        print(f"exact-decode ceiling on {reader.decode_workers} cores: {t_base / ideal:.2f}x "
              f"(measured {ratio:.2f}x: the loader is {ratio * ideal / t_base * reader.decode_workers:.2f}x as fast as "
              f"one exact decoder would be, where perfect scaling is {reader.decode_workers}x)")
    return ratio


if __name__ == "__main__":
    CLI(main, as_positional=False)
