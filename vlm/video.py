"""Video reading with decord: open once, sample many times, return frames with their exact timestamps.

A `VideoReader` holds one decoder for one file. CADER samples the same video several times per question (Stage 1 at
1 fps, then crops and RGR maps in Stage 2), so re-opening per sampling would re-parse the container every time.
Every sampling method reduces to a list of times (see `cader.vlm.sampling`), then to sorted unique frame indices,
then to one decode pass. Two decode paths serve the two access patterns (measured in scripts/bench/video_decode.py):
sparse indices (a few frames of a long video) use decord's batched seek-and-decode; dense indices (1 fps over a
24 fps video, a crop at 8 fps, an RGR map) use one forward scan with PyAV, because decord re-seeks to the previous
keyframe for every index and ends up decoding the same GOP several times (about 3x slower than one scan at 1 fps). Timestamps returned are those of the decoded frames (index / native fps), never the
requested times, so the `<t seconds>` tokens the processor writes are the real times.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from cader.vlm.sampling import cap_times, count_times, fit_pixels, fps_map_times, times_to_indices, uniform_times


class VideoReadError(RuntimeError):
    """A video could not be opened or decoded. The message always names the path."""

    def __init__(self, path: str | os.PathLike, reason: str):
        self.path = str(path)
        self.reason = reason
        super().__init__(f"video_unreadable: {self.path}: {reason}")


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
        """What the Qwen3-VL processor needs to compute real timestamps (`do_sample_frames=False`)."""
        return {
            "fps": float(self.native_fps),
            "frames_indices": [int(i) for i in self.indices],
            "total_num_frames": int(self.indices[-1]) + 1 if len(self) else 0,
        }

    def select(self, keep: np.ndarray) -> Frames:
        """A subset of these frames (boolean mask or index array), e.g. a time window of an earlier decode."""
        return Frames(self.frames[keep], self.timestamps[keep], self.indices[keep], self.native_fps)


def resize_frames(frames: np.ndarray, max_pixels: int | None) -> np.ndarray:
    """Resize a (N, H, W, 3) uint8 batch so H*W <= max_pixels with sides multiple of 32 (aspect kept)."""
    if max_pixels is None or len(frames) == 0:
        return frames
    _, h, w, _ = frames.shape
    new_h, new_w = fit_pixels(h, w, max_pixels)
    if (new_h, new_w) == (h, w):
        return frames
    x = torch.from_numpy(np.ascontiguousarray(frames)).permute(0, 3, 1, 2).float()
    # antialias avoids aliasing when shrinking a lot (long videos go down to 65,536 px per frame or less).
    x = F.interpolate(x, size=(new_h, new_w), mode="bilinear", antialias=True, align_corners=False)
    return x.round().clamp_(0, 255).to(torch.uint8).permute(0, 2, 3, 1).contiguous().numpy()


class VideoReader:
    """One decord decoder for one video file; thread-safe sampling (decord readers are not)."""

    # Scan forward instead of seeking when indices are on average at most this many frames apart (about two
    # seconds of 24-30 fps video: the keyframe interval of typical streamed video).
    SCAN_MAX_MEAN_GAP = 64

    def __init__(self, path: str | os.PathLike, num_threads: int = 0):
        self.path = Path(path)
        if not self.path.is_file():
            raise VideoReadError(self.path, "file does not exist")
        if self.path.stat().st_size == 0:
            raise VideoReadError(self.path, "file is empty (0 bytes)")
        try:
            import decord
        except ImportError as err:  # pragma: no cover - decord is a hard dependency
            raise VideoReadError(self.path, f"decord is not installed ({err})") from err
        try:
            self._reader = decord.VideoReader(str(self.path), ctx=decord.cpu(0), num_threads=num_threads)
            self.num_frames = len(self._reader)
            self.native_fps = float(self._reader.get_avg_fps())
            first_shape = self._reader[0].shape if self.num_frames else None
        except Exception as err:  # decord raises its own DECORDError and sometimes RuntimeError
            raise VideoReadError(self.path, f"cannot decode: {str(err).splitlines()[0][:200]}") from err
        if self.num_frames <= 0 or first_shape is None:
            raise VideoReadError(self.path, "video has no frames")
        if not np.isfinite(self.native_fps) or self.native_fps <= 0:
            raise VideoReadError(self.path, f"invalid frame rate {self.native_fps}")
        self.height, self.width = int(first_shape[0]), int(first_shape[1])
        self.duration = self.num_frames / self.native_fps
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"VideoReader({str(self.path)!r}, frames={self.num_frames}, fps={self.native_fps:.3f})"

    def _window(self, start: float | None, end: float | None) -> tuple[float, float]:
        s = 0.0 if start is None else max(0.0, float(start))
        e = self.duration if end is None else min(self.duration, float(end))
        return s, e

    def decode_indices(self, indices: np.ndarray, max_pixels: int | None = None) -> Frames:
        """Decode exactly these (sorted, unique, in-range) frame indices in one batch."""
        indices = np.asarray(indices, dtype=np.int64)
        if len(indices) > 1 and np.diff(indices).mean() <= self.SCAN_MAX_MEAN_GAP:
            try:
                with self._lock:
                    batch = self._scan(indices)
                return Frames(resize_frames(batch, max_pixels), indices / self.native_fps, indices, self.native_fps)
            except Exception:  # odd timestamps or containers PyAV reads differently: decord's seek path decides
                pass
        if len(indices) == 0:
            empty = np.zeros((0, *fit_pixels(self.height, self.width, max_pixels or self.height * self.width), 3))
            return Frames(empty.astype(np.uint8), np.zeros(0), indices, self.native_fps)
        try:
            with self._lock:
                batch = self._reader.get_batch(indices.tolist()).asnumpy()
        except Exception as err:
            raise VideoReadError(self.path, f"decode failed: {str(err).splitlines()[0][:200]}") from err
        return Frames(resize_frames(batch, max_pixels), indices / self.native_fps, indices, self.native_fps)

    def _scan(self, indices: np.ndarray) -> np.ndarray:
        """Decode forward once from the keyframe before indices[0] to indices[-1], keeping only the wanted frames.

        Frame numbers come from presentation timestamps on the same grid decord uses (index = pts * fps), so both
        paths return the same frames for the same indices (checked in tests on H.264 with B-frames).
        """
        import av

        wanted = {int(i): k for k, i in enumerate(indices)}
        out: list[np.ndarray | None] = [None] * len(indices)
        with av.open(str(self.path)) as container:
            stream = container.streams.video[0]
            stream.thread_type = "AUTO"  # frame threads: the scan is the bottleneck, conversion is per kept frame
            base = stream.start_time or 0
            rate = float(stream.time_base) * self.native_fps
            first_pts = base + int(indices[0] / rate)
            container.seek(first_pts, stream=stream, backward=True, any_frame=False)
            remaining = len(indices)
            for frame in container.decode(stream):
                if frame.pts is None:
                    continue
                index = int(round((frame.pts - base) * rate))
                slot = wanted.get(index)
                if slot is not None and out[slot] is None:
                    out[slot] = frame.to_ndarray(format="rgb24")
                    remaining -= 1
                if remaining == 0 or index > indices[-1] + 2 * self.SCAN_MAX_MEAN_GAP:
                    break
        missing = [int(indices[k]) for k, f in enumerate(out) if f is None]
        if missing:
            raise VideoReadError(self.path, f"frames {missing[:5]} not found while scanning (of {len(indices)})")
        return np.stack(out)

    def sample_times(self, times: Sequence[float], max_pixels: int | None = None) -> Frames:
        """The frames showing the given times (deduplicated, sorted)."""
        return self.decode_indices(times_to_indices(np.asarray(times), self.native_fps, self.num_frames), max_pixels)

    def sample_uniform(
        self,
        fps: float,
        start: float | None = None,
        end: float | None = None,
        max_frames: int | None = None,
        max_pixels: int | None = None,
    ) -> Frames:
        """Constant-rate sampling over the whole video or [start, end]; capped uniformly at `max_frames`.

        A window shorter than one frame interval still yields one frame (its centre), so a crop is never empty.
        """
        s, e = self._window(start, end)
        times = uniform_times(s, e, fps)
        if len(times) == 0 and e > s:
            times = np.array([(s + e) / 2])
        return self.sample_times(cap_times(times, max_frames), max_pixels)

    def sample_count(self, n: int, start: float | None = None, end: float | None = None, max_pixels=None) -> Frames:
        """`n` frames spread evenly over [start, end] (fewer if the window holds fewer distinct frames)."""
        s, e = self._window(start, end)
        return self.sample_times(count_times(s, e, n), max_pixels)

    def sample_fps_map(
        self,
        segments: Sequence[tuple[float, float, float]],
        max_frames: int | None = None,
        max_pixels: int | None = None,
    ) -> Frames:
        """Piecewise-rate sampling: floor((e - s) * f) frames in each (s, e, f) segment, sorted by time."""
        clipped = [(max(0.0, s), min(self.duration, e), f) for s, e, f in segments]
        return self.sample_times(cap_times(fps_map_times(clipped), max_frames), max_pixels)
