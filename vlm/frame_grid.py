"""A video's r1 grid: the one decode from which every whole-video sampling of CADER is taken.

CADER samples a whole video more than once per question: Stage 1's F1 at r1 capped uniformly at the frame budget,
then each RGR context (Algorithm 2: unexplored regions at r1, explored ones at f <= r1), capped the same way. At 720p
each of those decodes goes through most of the stream (a wanted frame needs every referenced frame since its
keyframe), so three of them cost three times one. None of them is denser than F1, so all of them are taken from F1's
decode: the grid is the times Stage 1 samples, `uniform_times(0, D, r1)` (N = floor(D * r1) bin centres, spacing
D / N >= 1 / r1) capped at `max_frames`. A video that fits the frame budget (D * r1 <= max_frames) gets its whole r1
grid; a longer one the same times F1 has, because an RGR context capped at `max_frames` is no denser than F1 (the
full 1-fps grid of a 30-minute 720p video would cost 1.5x F1's decode, its pixels 2.3x: scripts/bench/decode_once.py).

- F1 is the grid itself: the very frames a direct decode returns.
- An RGR context keeps Algorithm 2's counts, capped as before (`capped_counts`: what `cap_times` would keep of each
  segment), and moves them onto the grid (`snap_segments`): each of a segment's n times goes to the nearest grid time
  inside the segment (ties to the earlier one), and where two would meet (a boundary tie, or grid spacing a little
  over the times') the later one moves to the next free grid time, so every frame stays inside its own segment, no
  two segments share one, and n is kept whenever the segment holds n grid times. A segment holding fewer gets all it
  holds: at most one fewer at r1 when the video fits the budget (spacing D / N > 1 / r1 when D * r1 is not whole);
  on a longer video the unexplored regions of a context are a little denser than F1 after the cap (by D * r1 /
  N_reflect: 1-2 % with two rejected windows), and lose that share. Removing duplicates instead would thin the
  densest segments more.
- The frames keep their true timestamps (the decoded frames' own), so the `<t seconds>` tokens stay exact.

Pure functions on numbers, plus `FrameGrid`, which selects rows of a decode made elsewhere (`cader.vlm.video`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import pairwise

import numpy as np
from cader.vlm.sampling import cap_times, count_times, fit_pixels, uniform_times
from cader.vlm.video import Frames

# A time computed as exactly a frame's start picks that frame (as `FrameTable.showing` does).
_SLACK = 1e-9


def grid_times(duration: float, rate: float, max_frames: int | None = None) -> np.ndarray:
    """The grid of a video of `duration` seconds at `rate` fps capped at `max_frames`: the times Stage 1 samples
    (`VideoReader.sample_uniform`: floor(D * rate) bin centres, or the middle when that is none, then `cap_times`)."""
    times = uniform_times(0.0, float(duration), float(rate))
    if len(times) == 0 and duration > 0:
        times = np.array([duration / 2.0])
    return cap_times(times, max_frames)


def capped_counts(counts: Sequence[int], max_frames: int | None) -> list[int]:
    """How many of each block of `counts` consecutive times `cap_times` keeps of their concatenation (it picks by
    position, so this is arithmetic on the counts)."""
    total = int(sum(counts))
    if max_frames is None or total <= max_frames:
        return [int(n) for n in counts]
    picks = cap_times(np.arange(total, dtype=np.float64), max_frames).astype(np.int64)
    bounds = np.concatenate([[0], np.cumsum(counts)])
    return [int(np.count_nonzero((picks >= lo) & (picks < hi))) for lo, hi in pairwise(bounds)]


def snap_segments(segments: Sequence[tuple[float, float, int]], grid: np.ndarray) -> np.ndarray:
    """Grid positions (sorted, unique) for segments `(start, end, n)`: n frames over [start, end) each, the
    segments disjoint (RGR's fused map and its unexplored gaps). See the module docstring for the rule."""
    grid = np.asarray(grid, dtype=np.float64)
    parts = []
    for start, end, n in segments:
        if n <= 0 or end <= start:
            continue
        lo, hi = (int(i) for i in np.searchsorted(grid, [start, end], side="left"))   # grid times in [start, end)
        if hi - lo <= n:  # not more grid times than frames asked for: take them all
            parts.append(np.arange(lo, hi, dtype=np.int64))
            continue
        nearest = nearest_positions(grid, count_times(start, end, n))
        k = np.arange(n, dtype=np.int64)
        # distinct and inside: position_k - k may not decrease, and k-th must leave room for the n - k after it
        shifted = np.maximum.accumulate(nearest - k)
        parts.append(k + np.clip(shifted, lo, hi - n))
    if not parts:
        return np.zeros(0, dtype=np.int64)
    return np.unique(np.concatenate(parts))


def nearest_positions(grid: np.ndarray, times: np.ndarray) -> np.ndarray:
    """The position of the grid time nearest each time (ties to the earlier one); `grid` sorted, non-empty."""
    right = np.clip(np.searchsorted(grid, times, side="left"), 1, len(grid) - 1) if len(grid) > 1 else None
    if right is None:
        return np.zeros(len(times), dtype=np.int64)
    left = right - 1
    closer_right = (grid[right] - times) < (times - grid[left])
    return np.where(closer_right, right, left).astype(np.int64)


def grid_bytes(n_times: int, height: int, width: int, max_pixels: int | None) -> int:
    """Pixel bytes of a grid of `n_times` frames of a `height` x `width` video at `max_pixels` (uint8 RGB): an upper
    bound, since two grid times showing one frame (a video slower than the grid) decode it once."""
    h, w = fit_pixels(height, width, max_pixels) if max_pixels else (height, width)
    return int(n_times) * h * w * 3


@dataclass(frozen=True)
class FrameGrid:
    """The decode of a video's grid: `frames` (each distinct frame showing a grid time, sorted) and `rows`, the row
    of `frames` showing each grid time (the frame on screen at t is the last decoded one starting at or before t,
    because that frame is itself among those decoded)."""

    times: np.ndarray
    frames: Frames
    rows: np.ndarray

    @classmethod
    def of(cls, times: np.ndarray, frames: Frames) -> FrameGrid:
        times = np.asarray(times, dtype=np.float64)
        rows = np.searchsorted(np.asarray(frames.timestamps, np.float64), times + _SLACK, side="right") - 1
        return cls(times, frames, np.clip(rows, 0, max(0, len(frames) - 1)).astype(np.int64))

    def __len__(self) -> int:
        return len(self.times)

    def select(self, positions) -> Frames:
        """The frames showing the grid times at `positions`, deduplicated and sorted, as a direct decode of those
        times returns them (the whole decode itself when that is all of it: no copy)."""
        rows = np.unique(self.rows[np.asarray(positions, dtype=np.int64)])
        if len(rows) == len(self.frames):
            return self.frames
        return self.frames.select(rows)
