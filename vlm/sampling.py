"""Where to sample frames and how big to make them: pure functions on numbers.

Every sampler in the project (Stage 1 at a constant rate, Stage 2 on a crop, RGR's piecewise fps map, the training
loader at 1 fps) reduces to "n frames spread evenly over [start, end]". Two rules say where (`FRAME_RULES`):

- "backbone" (evaluation's default for Stage 1 and every crop): the rule of Qwen's own pipeline, which the paper's
  "uniformly sampled at 1 fps" leaves to the backbone (`qwen-vl-utils` `fetch_video` feeding transformers' Qwen3-VL
  processor): an even frame count, floor_even(min(max(D * fps, 4), floor_even(max_frames))), at endpoint-inclusive
  uniform times from the window's first frame to its last (`round(linspace(first, last, n))` on frame indices).
  `backbone_frames` computes it on the real timeline (the frames' own start times), so a constant-rate video gets
  exactly qwen-vl-utils' frame indices and a variable-rate one the real times qwen-vl-utils gets wrong (it places
  frame i at i / average fps).
- "bin_centre": the window cut into n = floor(D * fps) equal bins and a frame at the centre of each, so a window
  never double-counts its edges and adjacent windows tile the timeline without overlap. RGR's segments always use it
  (they tile the video: endpoint-inclusive segments would show every boundary twice), and so does training.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

# Qwen3-VL merges 2x2 patches of 16 px, so every frame side must be a multiple of 32.
MERGE_UNIT_PX = 32
FRAME_RULES = ("backbone", "bin_centre")
# qwen-vl-utils' FRAME_FACTOR and FPS_MIN_FRAMES: Qwen3-VL groups frames in temporal pairs, so its pipeline sends an
# even count (an odd one would make the processor repeat the last frame), and at least 4 frames at a rate.
FRAME_FACTOR = 2
BACKBONE_MIN_FRAMES = 4
# A frame starting within this many seconds of a window's edge counts as at the edge (float noise of seconds * fps).
_EDGE_SLACK = 1e-9


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


def backbone_count(span: float, fps: float, available: int, max_frames: int | None,
                   min_frames: int = BACKBONE_MIN_FRAMES) -> int:
    """The backbone pipeline's frame count for `available` frames covering `span` seconds at `fps` (qwen-vl-utils
    `smart_nframes`): floor_even(min(max(span * fps, ceil_even(min_frames)), floor_even(min(max_frames, available)))).

    A window of a single frame, where qwen-vl-utils raises, gets that frame (a crop is never empty)."""
    if available <= 0:
        return 0
    cap = available if max_frames is None else min(int(max_frames), available)
    cap = cap // FRAME_FACTOR * FRAME_FACTOR
    floor = -(-int(min_frames) // FRAME_FACTOR) * FRAME_FACTOR
    wanted = min(max(span * fps, floor), cap)
    n = FRAME_FACTOR * math.floor(wanted / FRAME_FACTOR + _EDGE_SLACK)   # as frames_at_rate: 0.3 s * 10 fps is 3
    return n if n >= FRAME_FACTOR else min(available, 1)


def backbone_frames(starts: np.ndarray, duration: float, fps: float, start: float | None = None,
                    end: float | None = None, max_frames: int | None = None,
                    min_frames: int = BACKBONE_MIN_FRAMES) -> np.ndarray:
    """Frame indices (sorted, unique) the backbone's pipeline samples from [start, end] of a video whose frame i
    starts at `starts[i]` seconds and whose last frame ends at `duration`: the "backbone" rule of the module
    docstring.

    The window's frames are those starting inside it (qwen-vl-utils: ceil(start * fps) to floor(end * fps)); they
    cover `span` seconds, from the first one's start to the last one's end (the whole `duration` for the whole video);
    `backbone_count` of them are taken at times spread evenly from the first one's start to the last one's start, each
    the frame starting nearest its time. On a constant-rate video that is round(linspace(first, last, n)), exactly;
    a window holding fewer than two frame starts gets the frame showing its middle.
    """
    starts = np.asarray(starts, dtype=np.float64)
    s = 0.0 if start is None else max(0.0, float(start))
    e = float(duration) if end is None else min(float(duration), float(end))
    if len(starts) == 0 or e < s:
        return np.zeros(0, dtype=np.int64)
    lo = int(np.searchsorted(starts, s - _EDGE_SLACK, side="left"))
    hi = int(np.searchsorted(starts, e + _EDGE_SLACK, side="right")) - 1
    if hi - lo < 1:   # no two frames start inside: the frame on screen at the middle
        middle = int(np.searchsorted(starts, (s + e) / 2 + _EDGE_SLACK, side="right")) - 1
        return np.array([min(max(middle, 0), len(starts) - 1)], dtype=np.int64)
    span = (starts[hi + 1] if hi + 1 < len(starts) else float(duration)) - starts[lo]
    n = backbone_count(span, fps, hi - lo + 1, max_frames, min_frames)
    if n == 1:
        return np.array([(lo + hi) // 2], dtype=np.int64)
    times = np.linspace(starts[lo], starts[hi], n)
    # each time's fractional position between the frames starting around it; rounding it picks the nearer start
    positions = np.interp(times, starts[lo:hi + 1], np.arange(lo, hi + 1, dtype=np.float64))
    return np.unique(np.rint(positions).astype(np.int64))
