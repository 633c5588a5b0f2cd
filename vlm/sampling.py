"""Where to sample frames and how big to make them: pure functions on numbers.

Every sampler in the project (Stage 1 at a constant rate, Stage 2 on a crop, RGR's piecewise fps map, the training
loader at 1 fps) reduces to "n frames spread evenly over [start, end]". One convention is used everywhere: the window
is cut into n equal bins and a frame is taken at the centre of each bin, so a window never double-counts its edges
and two adjacent windows tile the timeline without overlap.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

# Qwen3-VL merges 2x2 patches of 16 px, so every frame side must be a multiple of 32.
MERGE_UNIT_PX = 32


def count_times(start: float, end: float, n: int) -> np.ndarray:
    """`n` times centred in `n` equal bins of [start, end] (empty when n <= 0 or the window is empty)."""
    if n <= 0 or end <= start:
        return np.zeros(0, dtype=np.float64)
    step = (end - start) / n
    return start + (np.arange(n, dtype=np.float64) + 0.5) * step


def frames_at_rate(start: float, end: float, fps: float) -> int:
    """N = floor((end - start) * fps), the frame count of CADER Eq. 1 and Algorithm 2 line 16.

    A tiny epsilon absorbs float error so that e.g. 0.3 s * 10 fps gives 3, not 2.
    """
    if end <= start or fps <= 0:
        return 0
    return int(math.floor((end - start) * fps + 1e-9))


def uniform_times(start: float, end: float, fps: float) -> np.ndarray:
    """Constant-rate sampling: floor((end - start) * fps) frames centred in equal bins."""
    return count_times(start, end, frames_at_rate(start, end, fps))


def fps_map_counts(segments: Sequence[tuple[float, float, float]]) -> list[int]:
    """Frames per (start, end, fps) segment: n_i = floor(delta_i * f_i)."""
    return [frames_at_rate(s, e, f) for s, e, f in segments]


def fps_map_times(segments: Sequence[tuple[float, float, float]]) -> np.ndarray:
    """Times for a piecewise fps map [(start, end, fps), ...], sorted by time.

    Segments are expected not to overlap (RGR fuses them first); the result is sorted regardless.
    """
    parts = [count_times(s, e, n) for (s, e, _), n in zip(segments, fps_map_counts(segments))]
    if not parts:
        return np.zeros(0, dtype=np.float64)
    return np.sort(np.concatenate(parts))


def cap_times(times: np.ndarray, max_frames: int | None) -> np.ndarray:
    """Keep at most `max_frames` of `times`, chosen uniformly over the sequence (first and last kept).

    Used when a constant-rate sample exceeds the model's frame or token budget: the paper subsamples uniformly over the
    full timeline rather than truncating (CADER, Stage 1 frame sampling).
    """
    times = np.asarray(times, dtype=np.float64)
    if max_frames is None or len(times) <= max_frames:
        return times
    if max_frames <= 0:
        return times[:0]
    if max_frames == 1:
        return times[len(times) // 2 : len(times) // 2 + 1]
    picks = np.round(np.linspace(0, len(times) - 1, max_frames)).astype(np.int64)
    return times[picks]


def fit_pixels(
    height: int, width: int, max_pixels: int, factor: int = MERGE_UNIT_PX, min_pixels: int = MERGE_UNIT_PX**2
) -> tuple[int, int]:
    """Resize (height, width) so that h*w <= max_pixels, keeping the aspect ratio, both multiples of `factor`.

    Rounds each side to the nearest multiple first; if that overshoots the budget, scales down and floors instead.
    Never returns a side smaller than `factor`, and grows tiny images up to `min_pixels`.
    """
    if height <= 0 or width <= 0:
        raise ValueError(f"frame size must be positive, got {height}x{width}")
    if max_pixels < factor * factor:
        raise ValueError(f"max_pixels={max_pixels} is below one {factor}x{factor} merge unit")
    h = max(factor, round(height / factor) * factor)
    w = max(factor, round(width / factor) * factor)
    if h * w > max_pixels:
        scale = math.sqrt(height * width / max_pixels)
        h = max(factor, math.floor(height / scale / factor) * factor)
        w = max(factor, math.floor(width / scale / factor) * factor)
    elif h * w < min_pixels:
        scale = math.sqrt(min_pixels / (height * width))
        h = math.ceil(height * scale / factor) * factor
        w = math.ceil(width * scale / factor) * factor
    return int(h), int(w)
