"""A sample's whole-video frames: F1 (Stage 1) and every RGR context (Stage 2) from one decode of the video.

Without it, a Stage-2 sample with two reflections decodes its whole video three times (F1, then each RGR context),
and at 720p each time costs nearly a full decode of the stream (scripts/bench/decode_once.py, B14). So the video is
decoded once, F1 and the r1 lattice together (`cader.vlm.frame_grid`: what the decode holds, and how a segment's
frames are taken from it), and in a grouped run once per video for all its questions
(`cader.evaluate.video_groups`). Every RGR context then holds exactly Algorithm 2's counts (capped at the frame
budget), each frame inside its own segment, as a decode of those frames alone would. Crops at r2 (up to 8 fps) still
decode their own short window.

Where the decode would exceed `grid_max_bytes` (16:9 video over 2.8 hours at the paper's settings), F1 is decoded
alone and each RGR context on its own, the same frames, counted in `cost.grid_fallback` (summed in report.json's cost
block). Under the speed option `trade_rgr_frames_for_speed` the decode is F1's alone and the contexts are taken from
F1's frames: a context then holds fewer frames than Algorithm 2's count where F1 is sparser than a segment asks
(videos longer than the frame budget); each resample step records `frames_lost`, the cost `rgr_frames_lost`. A
variant that never resamples (`CaderConfig.resamples_on_grid`) decodes F1 alone; direct callers of `run_stage2`
without a `WholeVideo` decode each context on its own.

Cost: `cost.frames_decoded` counts the frames of the whole-video decode (F1's and the lattice's), and nothing for an
RGR context taken from it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from cader.evaluate.method.config import CaderConfig
from cader.evaluate.method.rgr import rgr_segments, rgr_times
from cader.evaluate.method.stage1 import Cost, sample_stage1_frames
from cader.vlm.frame_grid import (
    LATTICE_PHASE,
    FrameGrid,
    GridFrames,
    grid_times,
    lattice_times,
    plan_bytes,
    rgr_positions,
)
from cader.vlm.sampling import cap_times
from cader.vlm.video import Frames


@dataclass(frozen=True)
class RgrContext:
    """F_reflect and its counts: N_reflect of Eq. 9 (`planned`), Algorithm 2's count after the cap (`capped`), and
    the frames the speed option's grid could not give (`lost`; None when the context is Algorithm 2's)."""

    frames: Frames
    planned: int
    capped: int
    lost: int | None = None


class WholeVideo:
    """One sample's whole-video samplings. `reader`: the sample's video (`sample_uniform`, `sample_grid`,
    `plan_grid`, `sample_times`, `duration`, `height`, `width`: a VideoReader or a video group's view); `cost`:
    added to; `use_grid`: False decodes F1 alone and each RGR context on its own."""

    def __init__(self, reader, cfg: CaderConfig, cost: Cost, use_grid: bool = True):
        self.reader, self.cfg, self.cost, self.use_grid = reader, cfg, cost, use_grid
        self._f1: Frames | None = None
        self._lattice: FrameGrid | None = None    # the r1 lattice over the whole-video decode
        self._lattice_times: np.ndarray | None = None   # the lattice's times when it was not decoded (fallback)
        self._f1_grid: FrameGrid | None = None    # the speed option's grid: F1's own times

    def whole(self) -> Frames:
        """The sample's one whole-video decode: F1 with the r1 lattice where the RGR contexts are taken from it and
        it fits `grid_max_bytes`, else F1 alone. What the decode-ahead stage runs (`cader.evaluate.in_flight`)."""
        cfg = self.cfg
        if self.use_grid and cfg.decodes_lattice:
            plan = self.reader.plan_grid(cfg.r1, cfg.max_frames, cfg.frame_rule)
            if plan_bytes(plan, self.reader.height, self.reader.width, cfg.max_pixels) <= cfg.grid_max_bytes:
                return self.reader.sample_grid(cfg.r1, cfg.max_frames, cfg.max_pixels, cfg.frame_rule)
            self._lattice_times = plan.lattice   # over the bound: each context decoded on its own, the same frames
        elif self.use_grid and cfg.resamples_on_grid:
            f1 = sample_stage1_frames(self.reader, cfg, Cost())
            if int(f1.frames.nbytes) > cfg.grid_max_bytes:   # the speed option's F1 over the bound: exact contexts
                self._lattice_times = lattice_times(float(self.reader.duration), cfg.r1, LATTICE_PHASE[cfg.frame_rule])
            return f1
        return sample_stage1_frames(self.reader, cfg, Cost())

    def f1(self) -> Frames:
        """F1 = ConstantRateSample(V, r1) capped at the frame budget (Algorithm 1 line 5), decoded once."""
        if self._f1 is None:
            decoded = self.whole()
            self.cost.frames_decoded += len(decoded)
            if isinstance(decoded, GridFrames):
                self._lattice = decoded.lattice_grid()
                self._f1 = decoded.f1()
            else:
                self._f1 = decoded
                if self.use_grid and self.cfg.trade_rgr_frames_for_speed and self._lattice_times is None:
                    self._f1_grid = self._speed_grid(decoded)
        return self._f1

    def _speed_grid(self, f1: Frames) -> FrameGrid:
        """The speed option's grid over F1: F1's bin-centre times (the rule's own) or, by the backbone rule, the
        frames' timestamps."""
        if self.cfg.frame_rule == "bin_centre":
            return FrameGrid.of(grid_times(float(self.reader.duration), self.cfg.r1, self.cfg.max_frames), f1)
        return FrameGrid(np.asarray(f1.timestamps, np.float64), f1, np.arange(len(f1), dtype=np.int64))

    def rgr_context(self, scored, duration: float) -> RgrContext:
        """F_reflect (Algorithm 2) for the scored segments, capped at the frame budget."""
        cfg = self.cfg
        if self.use_grid:
            self.f1()   # the whole-video decode, if not yet made
        segments = sorted(rgr_segments(scored, duration, cfg.r1))   # in time order, as the capped times are
        if self._lattice is not None:
            on = rgr_positions(segments, cfg.max_frames, self._lattice.times)
            return RgrContext(self._lattice.select(on.positions), on.planned, on.capped)
        if self._f1_grid is not None:
            on = rgr_positions(segments, cfg.max_frames, self._f1_grid.times)
            self.cost.rgr_frames_lost = (self.cost.rgr_frames_lost or 0) + on.lost
            return RgrContext(self._f1_grid.select(on.positions), on.planned, on.capped, on.lost)
        if self._lattice_times is not None:   # over the bound: the lattice's frames, decoded on their own
            on = rgr_positions(segments, cfg.max_frames, self._lattice_times)
            frames = self.reader.sample_times(self._lattice_times[on.positions], max_pixels=cfg.max_pixels)
            self.cost.frames_decoded += len(frames)
            self.cost.grid_fallback = 1
            return RgrContext(frames, on.planned, on.capped)
        # no grid at all (f_max above r1, a direct caller): Algorithm 2's bin-centre times, capped
        times = rgr_times(scored, duration, cfg.r1)
        frames = self.reader.sample_times(cap_times(times, cfg.max_frames), max_pixels=cfg.max_pixels)
        self.cost.frames_decoded += len(frames)
        return RgrContext(frames, len(times), min(len(times), cfg.max_frames))
