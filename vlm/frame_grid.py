"""A video's r1 grid: the one decode from which every whole-video sampling of CADER is taken.

CADER samples a whole video more than once per question: Stage 1's F1, then each RGR context (Algorithm 2:
unexplored regions at r1, explored ones at f <= r1, the sequence capped at the frame budget). At 720p each of those
decodes goes through most of the stream (a wanted frame needs every referenced frame since its keyframe), so they
are all taken from one decode per video, shared by every question on it (`plan_grid`, `GridFrames`):

- **The lattice**: times (j + phase) / r1 over the whole video, uncapped (`lattice_times`): exactly 1 / r1 apart, so
  any part [s, e) of the video holds at least floor((e - s) * r1) of them, which is at least Algorithm 2's count for
  a segment of it at any rate f <= r1. (The bin centres of F1's bin-centre rule are D / floor(D * r1) apart, a little
  over 1 / r1 when D * r1 is not whole, and could hold one fewer.) Any phase would do; each rule takes the one its F1
  shares (`LATTICE_PHASE`): whole seconds for the backbone rule, whose F1 starts at frame 0 (and which puts the
  lattice on the keyframes of fixed-interval encodes, a keyframe every 2 s from 0, where a decode stops earliest in
  each keyframe interval: 15 % fewer pictures than half seconds on B14's video, `decode_plan.decode_costs`), half
  seconds for the bin-centre rule, whose F1 is then part of the lattice whenever D * r1 is whole.
- **F1** is the frames of the Stage-1 rule (`uniform_frames`: the backbone's even, endpoint-inclusive count capped at
  `max_frames` and spread over the whole video, or the bin-centre rule). Those are generally not on the lattice (768
  frames evenly over a 30-minute video are 2.34 s apart), so the decode is the union of the two: F1 is exactly what
  a decode of F1 alone returns, and the lattice serves the RGR contexts.
- **An RGR context** keeps Algorithm 2's counts, capped as before (`capped_counts`: what `cap_times` would keep of each
  segment), and takes them from the lattice (`snap_segments`): each of a segment's n bin-centre times goes to the
  nearest lattice time inside the segment (ties to the earlier one), the later of two that meet moving to the next
  free one, so every frame stays inside its own segment, no two segments share one, and each segment holds exactly
  its capped count (it holds at least that many lattice times). The frames keep their own timestamps, so the
  `<t seconds>` tokens are the times of the frames shown.
- The speed option (`trade_rgr_frames_for_speed`) decodes F1 alone and snaps the same counts onto F1's times instead:
  a segment holding fewer F1 times than its count gets all it holds (`rgr_positions` reports what was lost).

Pure functions on numbers, plus `FrameGrid` and `GridFrames`, which select rows of a decode made elsewhere
(`cader.vlm.video`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import pairwise

import numpy as np
from cader.vlm.frames import Frames
from cader.vlm.sampling import (
    FRAME_RULES,
    backbone_frames,
    cap_times,
    count_times,
    fit_pixels,
    uniform_times,
)

# A time computed as exactly a frame's start picks that frame (as `FrameTable.showing` does).
_SLACK = 1e-9


def frames_at(starts: np.ndarray, times) -> np.ndarray:
    """The frame on screen at each time (the last one starting at or before it; clipped to the video), one per time."""
    starts = np.asarray(starts, dtype=np.float64)
    if len(starts) == 0:
        return np.zeros(0, dtype=np.int64)
    index = np.searchsorted(starts, np.asarray(times, dtype=np.float64) + _SLACK, side="right") - 1
    return np.clip(index, 0, len(starts) - 1).astype(np.int64)


def uniform_frames(starts: np.ndarray, duration: float, fps: float, start: float | None = None,
                   end: float | None = None, max_frames: int | None = None, rule: str = "bin_centre") -> np.ndarray:
    """Frame indices (sorted, unique) of constant-rate sampling of [start, end] (the whole video by default) at
    `fps`, capped uniformly at `max_frames`, by `rule` (`cader.vlm.sampling`): "backbone", or "bin_centre" (floor(D *
    fps) bin centres, the window's middle when that is none, then `cap_times`). What `VideoReader.sample_uniform`
    decodes."""
    if rule not in FRAME_RULES:
        raise ValueError(f"frame rule must be one of {FRAME_RULES}, got {rule!r}")
    if rule == "backbone":
        return backbone_frames(starts, duration, fps, start, end, max_frames)
    s = 0.0 if start is None else max(0.0, float(start))
    e = float(duration) if end is None else min(float(duration), float(end))
    times = uniform_times(s, e, fps)
    if len(times) == 0 and e > s:
        times = np.array([(s + e) / 2])
    return np.unique(frames_at(starts, cap_times(times, max_frames)))


# The lattice's phase (in steps of 1 / r1) by frame rule: the one F1 shares (module docstring).
LATTICE_PHASE = {"backbone": 0.0, "bin_centre": 0.5}


def lattice_times(duration: float, rate: float, phase: float = 0.0) -> np.ndarray:
    """(j + phase) / rate for every j >= 0 with that time inside the video [0, duration) (its middle when none is)."""
    if duration <= 0 or rate <= 0:
        return np.zeros(0, dtype=np.float64)
    count = int(np.ceil(duration * rate - phase - _SLACK))
    if count <= 0:
        return np.array([duration / 2.0])
    return (np.arange(count, dtype=np.float64) + phase) / rate


def grid_times(duration: float, rate: float, max_frames: int | None = None) -> np.ndarray:
    """F1's times under the bin-centre rule: floor(D * rate) bin centres (the middle when none), then `cap_times`.
    The grid of the speed option on that rule."""
    times = uniform_times(0.0, float(duration), float(rate))
    if len(times) == 0 and duration > 0:
        times = np.array([duration / 2.0])
    return cap_times(times, max_frames)


@dataclass(frozen=True)
class GridPlan:
    """What the one whole-video decode holds, as frame indices of the video."""

    indices: np.ndarray  # every frame to decode, sorted and unique: F1's and the lattice's
    f1: np.ndarray  # F1's frames (sorted, unique)
    lattice: np.ndarray  # the lattice's times (empty when the plan has none)
    lattice_frames: np.ndarray  # the frame showing each lattice time


def plan_grid(starts: np.ndarray, duration: float, r1: float, max_frames: int | None, rule: str,
              with_lattice: bool = True) -> GridPlan:
    """The decode of a video (frame i starting at `starts[i]`, `duration` seconds) that F1 at `r1` by `rule`, capped at
    `max_frames`, and (`with_lattice`) the r1 lattice of the RGR contexts are taken from."""
    f1 = uniform_frames(starts, duration, r1, max_frames=max_frames, rule=rule)
    lattice = lattice_times(duration, r1, LATTICE_PHASE[rule]) if with_lattice else np.zeros(0, dtype=np.float64)
    shown = frames_at(starts, lattice)
    return GridPlan(np.union1d(f1, shown).astype(np.int64), f1, lattice, shown)


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


@dataclass(frozen=True)
class RgrPositions:
    """An RGR context on a grid: the grid positions it takes, and its frames against Algorithm 2's counts."""

    positions: np.ndarray  # sorted grid positions
    planned: int  # N_reflect of Eq. 9, before the frame cap
    capped: int  # Algorithm 2's count after the cap: what the context should hold
    lost: int  # capped - len(positions): frames the grid could not give (0 on the lattice)


def rgr_positions(segments: Sequence[tuple[float, float, int]], max_frames: int | None,
                  grid: np.ndarray) -> RgrPositions:
    """Algorithm 2's segments `(start, end, n)` (disjoint, in time order) capped at `max_frames` and snapped onto
    `grid` (`capped_counts`, `snap_segments`)."""
    kept = capped_counts([n for _, _, n in segments], max_frames)
    positions = snap_segments([(s, e, k) for (s, e, _), k in zip(segments, kept)], grid)
    return RgrPositions(positions, int(sum(n for _, _, n in segments)), int(sum(kept)),
                        int(sum(kept)) - len(positions))


def nearest_positions(grid: np.ndarray, times: np.ndarray) -> np.ndarray:
    """The position of the grid time nearest each time (ties to the earlier one); `grid` sorted, non-empty."""
    right = np.clip(np.searchsorted(grid, times, side="left"), 1, len(grid) - 1) if len(grid) > 1 else None
    if right is None:
        return np.zeros(len(times), dtype=np.int64)
    left = right - 1
    closer_right = (grid[right] - times) < (times - grid[left])
    return np.where(closer_right, right, left).astype(np.int64)


def grid_bytes(n_times: int, height: int, width: int, max_pixels: int | None) -> int:
    """Pixel bytes of `n_times` frames of a `height` x `width` video at `max_pixels` (uint8 RGB)."""
    h, w = fit_pixels(height, width, max_pixels) if max_pixels else (height, width)
    return int(n_times) * h * w * 3


def plan_bytes(plan: GridPlan, height: int, width: int, max_pixels: int | None) -> int:
    """Pixel bytes a video's whole-video decode holds while its questions run: the decode, and F1 copied out of it
    when the decode holds more than F1 (the model takes F1 as one array)."""
    extra = 0 if len(plan.f1) == len(plan.indices) else len(plan.f1)
    return grid_bytes(len(plan.indices) + extra, height, width, max_pixels)


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


@dataclass
class GridFrames(Frames):
    """The one whole-video decode of `plan_grid`: F1's frames and the lattice's, with which is which."""

    f1_indices: np.ndarray = None
    lattice: np.ndarray = None
    lattice_indices: np.ndarray = None

    @classmethod
    def of(cls, frames: Frames, plan: GridPlan) -> GridFrames:
        if not np.array_equal(frames.indices, plan.indices):
            raise ValueError(f"a decode of {len(frames)} frames is not the grid's {len(plan.indices)}")
        return cls(frames.frames, frames.timestamps, frames.indices, frames.native_fps, plan.f1, plan.lattice,
                   plan.lattice_frames)

    def _rows(self, indices: np.ndarray) -> np.ndarray:
        return np.searchsorted(self.indices, np.asarray(indices, dtype=np.int64))

    def f1(self) -> Frames:
        """F1: the very frames a decode of F1 alone returns (this decode itself when it holds nothing else). One copy
        for every question on the video: made once, kept with the decode."""
        if len(self.f1_indices) == len(self):
            return self
        if getattr(self, "_f1", None) is None:
            self._f1 = self.select(self._rows(self.f1_indices))
        return self._f1

    def lattice_grid(self) -> FrameGrid:
        """The lattice as a `FrameGrid` over this decode."""
        return FrameGrid(np.asarray(self.lattice, np.float64), self, self._rows(self.lattice_indices))
