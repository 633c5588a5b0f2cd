"""Can the video input pipeline keep a GPU fed? CPU cores per GPU for Qwen3-VL-8B SFT at the paper's settings.

    python scripts/bench/input_pipeline.py [--durations 30,60] [--mfu 0.4] [--peak_tflops 989]

For realistic clips (H.264, 1280x720, 30 fps, written here) it times what one DataLoader worker does per sample —
the exact 1 fps decode at 65,536 px per frame (`VideoReader`, one decoder thread, as inside a worker) plus the
Qwen3-VL processor call — and sets it against the GPU time of the same sample: the training-step FLOPs of
Qwen3-VL-8B for its token count (`cader.vlm.flops`, language model + ViT) at the given MFU on an H100-class GPU
(989 dense bf16 TFLOP/s). cores per GPU = CPU seconds per sample / GPU seconds per sample; goal <= 8.
"""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path

import numpy as np
from jsonargparse import CLI

TEXT_TOKENS = 1_000  # prompt + CoT target around the video, typical of the LongVT SFT rows


def write_clip(path: Path, seconds: int, fps: int = 30, width: int = 1280, height: int = 720) -> Path:
    """Moving gradients and a drifting block: content the encoder cannot skip, like real footage."""
    import av

    yy, xx = np.mgrid[0:height, 0:width]
    with av.open(str(path), "w") as container:
        stream = container.add_stream("libx264", rate=fps)
        stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
        stream.codec_context.options = {"preset": "ultrafast", "g": str(2 * fps), "threads": "2"}
        for k in range(seconds * fps):
            img = np.empty((height, width, 3), np.uint8)
            img[..., 0] = (xx + 4 * k) % 256
            img[..., 1] = (yy + 2 * k) % 256
            img[..., 2] = ((xx + yy) // 4 + k) % 256
            x0 = (8 * k) % (width - 200)
            img[200:400, x0:x0 + 200] = 255 - img[200:400, x0:x0 + 200]
            for packet in stream.encode(av.VideoFrame.from_ndarray(img, format="rgb24")):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    return path


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


def main(durations: str = "30,60", mfu: float = 0.4, peak_tflops: float = 989.0, repeats: int = 2,
         processor: str | None = None) -> dict:
    """Time the per-sample CPU work and compare it with the GPU step.

    Args:
        durations: Clip lengths in seconds (comma-separated).
        mfu: Model FLOPs utilisation assumed for the GPU.
        peak_tflops: The GPU's dense bf16 peak (H100 SXM: 989).
        repeats: Timed repeats per clip (the best is kept: the machine's noise only adds time).
        processor: A Qwen3-VL processor folder (default: the tiny model's, built here; same video processor class).
    """
    from cader.dev.tiny import make_tiny_model
    from cader.vlm.loading import load_processor
    from cader.vlm.messages import build_messages, encode
    from cader.vlm.video import VideoReader

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        proc = load_processor(processor or str(make_tiny_model(folder / "tiny")))
        for seconds in (int(x) for x in durations.split(",")):
            clip = write_clip(folder / f"clip_{seconds}s.mp4", seconds)
            best_decode = best_total = float("inf")
            for _ in range(repeats):
                start = time.perf_counter()
                frames = VideoReader(clip, decode_workers=1).sample_uniform(1.0, max_pixels=65_536)
                decoded = time.perf_counter()
                feats = encode(proc, build_messages("Describe the clip.", video=frames), video=frames)
                done = time.perf_counter()
                best_decode, best_total = min(best_decode, decoded - start), min(best_total, done - start)
            grid = tuple(int(x) for x in feats["video_grid_thw"][0])
            gpu, seq = gpu_seconds(grid, mfu, peak_tflops)
            rows.append({"clip_seconds": seconds, "frames": len(frames), "frame_size": list(frames.frames.shape[1:3]),
                         "tokens": seq, "cpu_decode_s": round(best_decode, 3), "cpu_total_s": round(best_total, 3),
                         "samples_per_s_per_worker": round(1.0 / best_total, 3), "gpu_step_s": round(gpu, 4),
                         "cores_per_gpu": round(best_total / gpu, 2)})
    result = {"mfu": mfu, "peak_tflops": peak_tflops, "rows": rows,
              "cores_per_gpu": max(r["cores_per_gpu"] for r in rows), "goal": "<= 8"}
    print(json.dumps(result, indent=2))
    return result


if __name__ == "__main__":
    CLI(main, as_positional=False)
