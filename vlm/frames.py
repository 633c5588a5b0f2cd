"""What a video read returns and how it fails: `Frames` (the decoded pictures with their real timestamps and the
metadata the Qwen3-VL processor needs), the resize and rotation helpers applied to them, and the read errors and
per-process flags (`cader.vlm.video.VideoReader` raises and counts them; re-exported there)."""

from __future__ import annotations

import os
import threading
from collections import Counter
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from cader.vlm.sampling import fit_pixels


class VideoReadError(RuntimeError):
    """A video could not be opened or decoded. The message always names the path."""

    def __init__(self, path: str | os.PathLike, reason: str):
        self.path = str(path)
        self.reason = reason
        super().__init__(f"video_unreadable: {self.path}: {reason}")


FRAME_COUNT_OVER_REPORTED = "frame_count_over_reported"
_FLAG_COUNTS: Counter = Counter()  # videos flagged in this process, by flag
_FLAG_LOCK = threading.Lock()


def flag_counts() -> dict[str, int]:
    """How many videos this process has flagged, by flag (`FRAME_COUNT_OVER_REPORTED`)."""
    with _FLAG_LOCK:
        return dict(_FLAG_COUNTS)


def count_flag(flag: str) -> None:
    """Count one more video flagged `flag` in this process (a reader calls it once per video)."""
    with _FLAG_LOCK:
        _FLAG_COUNTS[flag] += 1


class FrameCountMismatch(VideoReadError):
    """The stream decodes fewer frames than the video's index lists. The reader that raised it has trimmed its frame
    table to `decoded` frames: sampling again gives frames that exist."""

    def __init__(self, path: str | os.PathLike, listed: int, decoded: int, wanted: int):
        self.listed, self.decoded = listed, decoded
        super().__init__(path, f"{FRAME_COUNT_OVER_REPORTED}: the index lists {listed} frames, the stream ends "
                               f"after {decoded}; frame {wanted} was asked for")


@dataclass
class Frames:
    frames: np.ndarray  # (N, H, W, 3) uint8
    timestamps: np.ndarray  # (N,) float64 seconds of each decoded frame
    indices: np.ndarray  # (N,) int64, sorted ascending
    native_fps: float

    def __len__(self) -> int:
        return int(self.frames.shape[0])

    @property
    def sampled_fps(self) -> float:
        """Average rate of this sample: frames per second of covered time (for logs and predictions.jsonl)."""
        if len(self) < 2:
            return 0.0
        span = float(self.timestamps[-1] - self.timestamps[0]) + 1.0 / self.native_fps
        return len(self) / span

    def metadata(self) -> dict:
        """What the Qwen3-VL processor needs to compute real timestamps (`do_sample_frames=False`).

        The processor writes `frames_indices[k] / fps` as frame k's time. On a constant-rate video those are the
        frame indices; on a variable-rate one, each frame's position on the average-rate grid (timestamp * fps, not
        an integer), so that the times it writes are still the frames' real ones.
        """
        positions = self.timestamps * self.native_fps
        on_grid = np.allclose(positions, self.indices, rtol=0.0, atol=1e-6)
        return {
            "fps": float(self.native_fps),
            "frames_indices": [int(i) for i in self.indices] if on_grid else [round(float(p), 6) for p in positions],
            "total_num_frames": int(self.indices[-1]) + 1 if len(self) else 0,
        }

    def select(self, keep: np.ndarray) -> Frames:
        """A subset of these frames (boolean mask or index array), e.g. a time window of an earlier decode."""
        return Frames(self.frames[keep], self.timestamps[keep], self.indices[keep], self.native_fps)


def resize_frames(frames: np.ndarray, max_pixels: int | None) -> np.ndarray:
    """Resize a (N, H, W, 3) uint8 batch so H*W <= max_pixels with sides multiple of 32 (aspect kept)."""
    if max_pixels is None or len(frames) == 0:
        return frames
    return resize_to(frames, fit_pixels(frames.shape[1], frames.shape[2], max_pixels))


def resize_to(frames: np.ndarray, size: tuple[int, int], chunk: int = 16) -> np.ndarray:
    """Resize a (N, H, W, 3) uint8 batch to `size` (H, W): bilinear with antialiasing, `chunk` frames at a time.

    Frames are interpolated independently, so resizing one at a time gives the same bytes as a whole batch; the
    chunks bound the float copy interpolation needs (12 bytes per pixel: 19 GB for 768 frames of 1080p at once).
    """
    if tuple(frames.shape[1:3]) == tuple(size):
        return frames
    out = np.empty((len(frames), *size, 3), np.uint8)
    for start in range(0, len(frames), chunk):
        x = _as_float(np.ascontiguousarray(frames[start:start + chunk]))
        # antialias avoids aliasing when shrinking a lot (long videos go down to 65,536 px per frame or less).
        x = F.interpolate(x, size=tuple(size), mode="bilinear", antialias=True, align_corners=False)
        out[start:start + chunk] = x.round().clamp_(0, 255).to(torch.uint8).permute(0, 2, 3, 1).numpy()
    return out


_SCRATCH = threading.local()


def _as_float(frames: np.ndarray) -> torch.Tensor:
    """A (N, H, W, 3) uint8 batch as float32 (N, 3, H, W), a channels-last view. A single frame (the decoders resize
    each as it comes) is converted into a buffer its thread keeps for the next frame of that size: a fresh float
    tensor of a 720p frame costs about ten times the conversion into mapped memory (page faults and a strided copy;
    B14, scripts/bench/decode_once.py, measures what it saves). Same values, same strides, so the same bytes."""
    if len(frames) != 1:
        return torch.from_numpy(frames).permute(0, 3, 1, 2).float()
    buffer = getattr(_SCRATCH, "buffer", None)
    if buffer is None or buffer.shape != frames.shape:
        buffer = _SCRATCH.buffer = torch.empty(frames.shape, dtype=torch.float32)
    return buffer.copy_(torch.from_numpy(frames)).permute(0, 3, 1, 2)


def upright(picture: np.ndarray, rotation: int) -> np.ndarray:
    """A decoded (H, W, 3) picture as a player shows it: turned `rotation` degrees counter-clockwise (a multiple
    of 90, as the container's display matrix says). A view, no copy."""
    return np.rot90(picture, k=(rotation // 90) % 4)
