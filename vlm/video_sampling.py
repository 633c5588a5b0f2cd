"""What a `VideoReader` samples: the samplings every caller asks for, each reduced to frame indices and one decode.

`ReaderSampling` is the part of `cader.vlm.video.VideoReader` that turns a request (a rate over a window by a frame
rule, a count, a piecewise fps map, a list of times, the whole-video grid of `cader.vlm.frame_grid`) into the frame
indices of the reader's frame table (pure functions of `cader.vlm.sampling` and `cader.vlm.frame_grid`) and decodes
them with `decode_indices`. A decode that finds the stream shorter than its index trims the table
(`FrameCountMismatch`); the sampling then runs once more on the trimmed table, so it asks only for frames that exist.
"""

from __future__ import annotations

from collections.abc import Sequence

from cader.vlm.frame_grid import GridFrames, GridPlan, plan_grid, uniform_frames
from cader.vlm.frames import FrameCountMismatch, Frames
from cader.vlm.sampling import cap_times, count_times, fps_map_times


class ReaderSampling:
    """Mixed into `VideoReader`, which provides `frame_table`, `duration` and `decode_indices`."""

    def _sampled(self, sample):
        """`sample()`, and once more when its decode found the stream shorter than the index (`FrameCountMismatch`):
        the table is trimmed to the stream by then, so the second sampling asks only for frames that exist."""
        try:
            return sample()
        except FrameCountMismatch:
            return sample()

    def _window(self, start: float | None, end: float | None) -> tuple[float, float]:
        s = 0.0 if start is None else max(0.0, float(start))
        e = self.duration if end is None else min(self.duration, float(end))
        return s, e

    def sample_times(self, times: Sequence[float], max_pixels: int | None = None) -> Frames:
        """The frames showing the given times (deduplicated, sorted)."""
        return self._sampled(lambda: self._frames_showing(times, max_pixels))

    def _frames_showing(self, times, max_pixels: int | None) -> Frames:
        return self.decode_indices(self.frame_table.showing(times), max_pixels)

    def sample_uniform(
        self,
        fps: float,
        start: float | None = None,
        end: float | None = None,
        max_frames: int | None = None,
        max_pixels: int | None = None,
        rule: str = "bin_centre",
    ) -> Frames:
        """Constant-rate sampling over the whole video or [start, end], capped uniformly at `max_frames`, by `rule`
        (`cader.vlm.sampling`: "backbone", Qwen's own pipeline, or "bin_centre").

        A window too short for a frame at that rate still yields one (its middle), so a crop is never empty.
        """
        def sample() -> Frames:
            table = self.frame_table
            indices = uniform_frames(table.starts, table.duration, fps, start, end, max_frames, rule)
            return self.decode_indices(indices, max_pixels)

        return self._sampled(sample)

    def plan_grid(self, r1: float, max_frames: int | None, rule: str, with_lattice: bool = True) -> GridPlan:
        """What `sample_grid` decodes, on the current frame table (`cader.vlm.frame_grid.plan_grid`)."""
        table = self.frame_table
        return plan_grid(table.starts, table.duration, r1, max_frames, rule, with_lattice)

    def sample_grid(self, r1: float, max_frames: int | None = None, max_pixels: int | None = None,
                    rule: str = "bin_centre") -> GridFrames:
        """The whole-video decode of `cader.vlm.frame_grid`: F1 (`sample_uniform(r1, max_frames=..., rule=...)`'s
        frames exactly) and the r1 lattice, in one decode."""
        def sample() -> GridFrames:
            plan = self.plan_grid(r1, max_frames, rule)
            return GridFrames.of(self.decode_indices(plan.indices, max_pixels), plan)

        return self._sampled(sample)

    def sample_count(self, n: int, start: float | None = None, end: float | None = None, max_pixels=None) -> Frames:
        """`n` frames spread evenly over [start, end] (fewer if the window holds fewer distinct frames)."""
        def sample() -> Frames:
            s, e = self._window(start, end)
            return self._frames_showing(count_times(s, e, n), max_pixels)

        return self._sampled(sample)

    def sample_fps_map(
        self,
        segments: Sequence[tuple[float, float, float]],
        max_frames: int | None = None,
        max_pixels: int | None = None,
    ) -> Frames:
        """Piecewise-rate sampling: floor((e - s) * f) frames in each (s, e, f) segment, sorted by time."""
        def sample() -> Frames:
            clipped = [(max(0.0, s), min(self.duration, e), f) for s, e, f in segments]
            return self._frames_showing(cap_times(fps_map_times(clipped), max_frames), max_pixels)

        return self._sampled(sample)

