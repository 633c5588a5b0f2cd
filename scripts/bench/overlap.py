"""P9: decode overlaps the model. Stage 1 on decode-heavy videos, the tiny model behind a fixed per-call latency
(a GPU forward's stand-in), one sample at a time and `--concurrency` at a time.

    python scripts/bench/overlap.py [--n 12] [--latency 0.5] [--concurrency 4]

Measures, in the same run: the decode alone (every sample's Stage-1 frames, `concurrency` decodes at a time as in the
overlapped run), the model alone
(n calls of `latency` seconds, batched calls counting once), and the concurrent run's wall time. Goal: wall time
<= 1.15 x max(decode, model) — the model never waits on decode when decode is the faster of the two.
"""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path

from jsonargparse import CLI


def _video(path: Path, seconds: int = 240, fps: int = 30) -> Path:
    import av
    import numpy as np

    yy, xx = np.mgrid[0:240, 0:320]
    with av.open(str(path), "w") as container:
        stream = container.add_stream("libx264", rate=fps)
        stream.width, stream.height, stream.pix_fmt = 320, 240, "yuv420p"
        stream.codec_context.options = {"preset": "ultrafast", "g": str(2 * fps)}
        for k in range(seconds * fps):
            img = np.stack([(xx + 3 * k) % 256, (yy + k) % 256, (xx + yy + k) % 256], axis=-1).astype(np.uint8)
            for packet in stream.encode(av.VideoFrame.from_ndarray(img, format="rgb24")):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    return path


def main(n: int = 12, latency: float = 0.5, concurrency: int = 4) -> dict:
    """Time decode alone, model alone and the overlapped run.

    Args:
        n: Samples (each its own copy of a 4-minute 30 fps video, so no decode is shared).
        latency: Seconds per model call.
        concurrency: Samples in flight in the overlapped run.
    """
    import shutil

    from cader.dev.scripted import FixedLatencyBackend
    from cader.dev.tiny import make_tiny_model
    from cader.evaluate.backends.hf import HFBackend
    from cader.evaluate.benchmarks.base import Sample
    from cader.evaluate.method.config import CaderConfig
    from cader.evaluate.runner import run_samples
    from cader.vlm.video import VideoReader

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        first = _video(root / "v0.mp4")
        for i in range(1, n):
            shutil.copy(first, root / f"v{i}.mp4")
        cfg = CaderConfig(variant="no_stage2", max_frames=64, max_pixels=2048)
        def decode_one(i):
            VideoReader(root / f"v{i}.mp4", decode_workers=1).sample_uniform(cfg.r1, max_frames=cfg.max_frames,
                                                                          max_pixels=cfg.max_pixels)

        from concurrent.futures import ThreadPoolExecutor

        decode_one(0)  # warm the page cache and the codec once, outside both timings
        start = time.perf_counter()
        with ThreadPoolExecutor(concurrency) as pool:  # decode alone, at the run's parallelism
            list(pool.map(decode_one, range(n)))
        decode = time.perf_counter() - start
        samples = [Sample("bench", f"s{i}", f"v{i}.mp4", "Which shade?", ["a", "b", "c", "d"], list("ABCD"), "A",
                          240.0, {}) for i in range(n)]
        backend = FixedLatencyBackend(HFBackend(str(make_tiny_model(root / "model")), dtype="float32",
                                                batch_size=concurrency), latency)
        cfg = CaderConfig(variant="no_stage2", max_frames=64, max_pixels=2048, decode_workers=1)
        start = time.perf_counter()
        run_samples(samples, root, root / "p.jsonl", backend, backend, cfg, video_path=lambda s, r: r / s.video,
                    progress=False, concurrency=concurrency)
        wall = time.perf_counter() - start
    model = backend.calls * latency
    result = {"decode_s": round(decode, 2), "model_s": round(model, 2), "model_calls": backend.calls,
              "wall_s": round(wall, 2), "ratio_to_max": round(wall / max(decode, model), 3), "goal": "<= 1.15"}
    print(json.dumps(result, indent=2))
    return result


if __name__ == "__main__":
    CLI(main, as_positional=False)
