"""P1: 1-fps sampling of a 10-minute 24 fps 320x240 video, project loader vs transformers' PyAV loader.

Both sides return the same 600 frames as uint8 arrays at native size. The baseline is
`transformers.video_utils.load_video(path, backend="pyav", fps=1)`, which decodes the stream sequentially; the project
loader (`cader.vlm.video.VideoReader`) decodes the sorted indices in one decord batch, seeking between keyframes.
Each side runs `--repeats` times after one warm-up; the median is reported with the ratio. Goal: >= 3x.
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
    import av

    with av.open(str(path), "w") as container:
        stream = container.add_stream("libx264", rate=fps)
        stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
        stream.options = {"preset": "veryfast", "g": str(gop), "crf": "28"}
        ramp = np.linspace(0, 255, width, dtype=np.float32)[None, :, None]
        for k in range(seconds * fps):
            img = np.empty((height, width, 3), np.uint8)
            img[:] = ((ramp + 3 * k) % 256).astype(np.uint8)
            img[:, :, 2] = (37 * (k // fps)) % 256
            for packet in stream.encode(av.VideoFrame.from_ndarray(img, format="rgb24")):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)


def time_it(fn, repeats: int) -> tuple[float, object]:
    result = fn()  # warm-up (page cache, lazy imports)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times), result


def main(seconds: int = 600, fps: int = 24, width: int = 320, height: int = 240, gop: int = 48, repeats: int = 3,
         video: str | None = None) -> float:
    """Run the benchmark and print both times and the ratio.

    Args:
        seconds: Video length.
        fps: Native frame rate.
        width: Frame width.
        height: Frame height.
        gop: Keyframe interval in frames (48 = 2 s, typical of streamed video).
        repeats: Timed runs per loader (median reported).
        video: Use this file instead of generating one.
    """
    from cader.vlm.video import VideoReader
    from transformers.video_utils import load_video

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(video) if video else Path(tmp) / "bench.mp4"
        if not video:
            t0 = time.perf_counter()
            write_test_video(path, seconds, fps, width, height, gop)
            print(f"wrote {path.name}: {seconds}s @ {fps} fps {width}x{height} gop={gop} in {time.perf_counter()-t0:.1f}s")

        def ours():
            return VideoReader(path).sample_uniform(1.0).frames

        def baseline():
            frames, _ = load_video(str(path), backend="pyav", fps=1)
            return frames

        t_ours, a = time_it(ours, repeats)
        t_base, b = time_it(baseline, repeats)
    ratio = t_base / t_ours
    print(f"frames: project {len(a)} vs pyav {len(b)}")
    print(f"project loader (decord batch): {t_ours:.3f} s")
    print(f"transformers load_video pyav:  {t_base:.3f} s")
    print(f"P1 ratio: {ratio:.2f}x (goal >= 3x)")
    return ratio


if __name__ == "__main__":
    CLI(main, as_positional=False)
