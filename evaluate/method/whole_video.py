"""A sample's whole-video frames: F1 (Stage 1) and every RGR context (Stage 2) from one decode, F1's.

Without it, a Stage-2 sample with two reflections decodes its whole video three times (F1, then each RGR context),
and at 720p each time costs nearly a full decode of the stream (scripts/bench/decode_once.py, B14). Every one of
those samplings is at most as dense as F1 once capped at the frame budget, so the RGR contexts are taken from F1's
decode, the video's r1 grid capped at `max_frames` (`cader.vlm.frame_grid`: the grid, how an RGR segment's times
move onto it, and why). In a grouped run F1 is decoded once per video (`cader.evaluate.video_groups`), so the whole
video is decoded once for all its questions. Crops at r2 (up to 8 fps) still decode their own short window.

F1 is decoded and held for the proposals anyway, so the grid costs no memory beyond today's. Where F1's pixels
exceed `grid_max_bytes` (settings far from the paper's: 768 frames x 65,536 px is 151 MB), the RGR contexts are
decoded on their own as before, counted in `cost.grid_fallback` (summed in report.json's cost block). A variant that
never resamples (`CaderConfig.resamples_on_grid`) and direct callers of `run_stage2` without a `WholeVideo` sample as
before.

Cost: `cost.frames_decoded` counts F1 as before, and nothing for an RGR context taken from it.
"""

from __future__ import annotations

from cader.evaluate.method.config import CaderConfig
from cader.evaluate.method.rgr import rgr_segments, rgr_times
from cader.evaluate.method.stage1 import Cost, sample_stage1_frames
from cader.vlm.frame_grid import FrameGrid, capped_counts, grid_times, snap_segments
from cader.vlm.sampling import cap_times
from cader.vlm.video import Frames


class WholeVideo:
    """One sample's whole-video samplings. `reader`: the sample's video (`sample_uniform`, `sample_times`,
    `duration`: a VideoReader or a video group's view); `cost`: added to; `use_grid`: False decodes each RGR
    context on its own, as before the grid."""

    def __init__(self, reader, cfg: CaderConfig, cost: Cost, use_grid: bool = True):
        self.reader, self.cfg, self.cost, self.use_grid = reader, cfg, cost, use_grid
        self._f1: Frames | None = None
        self._f1_duration: float | None = None
        self._grid: FrameGrid | None = None

    def f1(self) -> Frames:
        """F1 = ConstantRateSample(V, r1) capped at the frame budget (Algorithm 1 line 5), decoded once."""
        if self._f1 is None:
            self._f1 = sample_stage1_frames(self.reader, self.cfg, self.cost)
            # the duration F1 was sampled on: a later decode (a crop reaching the end of a stream that holds fewer
            # frames than its index lists) may trim the reader's table, and the grid must stay F1's own times
            self._f1_duration = float(self.reader.duration)
        return self._f1

    def grid(self) -> FrameGrid | None:
        """F1 as the video's grid; None where RGR contexts are decoded on their own (module docstring)."""
        if self._grid is None and self.use_grid and self.cfg.resamples_on_grid:
            f1 = self.f1()
            if int(f1.frames.nbytes) > self.cfg.grid_max_bytes:
                self.cost.grid_fallback = 1
                return None
            self._grid = FrameGrid.of(grid_times(self._f1_duration, self.cfg.r1, self.cfg.max_frames), f1)
        return self._grid

    def rgr_context(self, scored, duration: float) -> tuple[Frames, int]:
        """(F_reflect capped at the frame budget, N_reflect of Eq. 9) for the scored segments (Algorithm 2)."""
        cfg, grid = self.cfg, self.grid()
        if grid is None:
            times = rgr_times(scored, duration, cfg.r1)
            frames = self.reader.sample_times(cap_times(times, cfg.max_frames), max_pixels=cfg.max_pixels)
            self.cost.frames_decoded += len(frames)
            return frames, len(times)
        segments = sorted(rgr_segments(scored, duration, cfg.r1))   # in time order, as the capped times are
        kept = capped_counts([n for _, _, n in segments], cfg.max_frames)
        positions = snap_segments([(s, e, k) for (s, e, _), k in zip(segments, kept)], grid.times)
        return grid.select(positions), sum(n for _, _, n in segments)
