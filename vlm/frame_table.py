"""When each frame of a video starts: the table every step between times and frames goes through. Pure numbers.

Most videos have a constant frame rate, and frame i starts at i / fps. Phone and screen recordings often do not:
their frames come at irregular times (variable frame rate, VFR), and i / (average fps) drifts from the truth, by
seconds on a long recording. Then "which frame shows time t", "when was frame i shown" and "which frame is this
decoded picture" all need the container's own presentation timestamps, or a crop returns the wrong frames and the
`<t seconds>` tokens lie. `frame_table` decides which of the two a video gets: the exact grid when the container's
times agree with it (or are missing, as in AVI), else the container's times.

An MP4 cut without re-encoding (`ffmpeg -ss ... -c copy`) starts at the keyframe before the cut and hides the frames
before it with an edit list: the container still lists them, at times before the first frame the decoder shows, and
the decoder drops them. Those are not frames of the video; the table leaves them out and counts them in `hidden`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

# A container table within this many frame intervals of the grid is a constant-rate video whose timestamps were
# rounded to the container's time base (29.97 fps in milliseconds, say); it gets the exact grid.
GRID_TOLERANCE_FRAMES = 0.25


@dataclass(frozen=True)
class FrameTable:
    starts: np.ndarray  # (N,) float64 seconds, frame 0 at 0.0, strictly increasing
    duration: float  # seconds from the start of frame 0 to the end of the last frame
    fps: float  # average rate (the grid's rate when `variable_rate` is False)
    variable_rate: bool
    hidden: int = 0  # frames the container lists before frame 0 that are never shown (an edit list's cut)

    def __len__(self) -> int:
        return len(self.starts)

    def period(self, index: int) -> float:
        """How long frame `index` is shown."""
        following = self.starts[index + 1] if index + 1 < len(self.starts) else self.duration
        return float(following - self.starts[index])

    def showing(self, times) -> np.ndarray:
        """The frame on screen at each time (the last one starting at or before it), deduplicated and sorted.

        Times before frame 0 or after the end are clipped to the first and last frame. A nanosecond of slack absorbs
        float error, so a time computed as exactly a frame's start picks that frame.
        """
        if len(self.starts) == 0:
            return np.zeros(0, dtype=np.int64)
        times = np.asarray(times, dtype=np.float64)
        idx = np.searchsorted(self.starts, times + 1e-9, side="right") - 1
        return np.unique(np.clip(idx, 0, len(self.starts) - 1)).astype(np.int64)

    def nearest(self, seconds: float) -> int:
        """The frame that starts at `seconds` (a decoded picture's timestamp), or -1 when none starts within half a
        frame interval of it: a picture the table does not know must not take the place of one it does."""
        n = len(self.starts)
        if not self.variable_rate:  # the hot path: one per decoded frame
            index = round(seconds * self.fps)
            return index if 0 <= index < n else -1
        right = int(np.searchsorted(self.starts, seconds))
        candidates = [k for k in (right - 1, right) if 0 <= k < n]
        if not candidates:
            return -1
        index = min(candidates, key=lambda k: abs(self.starts[k] - seconds))
        return index if abs(self.starts[index] - seconds) < 0.5 * self.period(index) else -1


def grid_table(num_frames: int, fps: float, hidden: int = 0) -> FrameTable:
    """Constant rate: frame i starts at i / fps."""
    starts = np.arange(num_frames, dtype=np.float64) / fps
    return FrameTable(starts, num_frames / fps, float(fps), False, hidden)


def frame_table(num_frames: int, fps: float, container_times=None, first_shown: float | None = None) -> FrameTable:
    """The frame table of a video from the container's frame count, average rate and (start, end) time of every
    frame in presentation order (decord's `get_frame_timestamp`; None when unavailable), and the timestamp of the
    first frame the decoder shows (None when unknown).

    The container's rows before `first_shown` (by more than a quarter frame) are hidden frames and left out. The
    container's times are used only when they are a usable table (one row per frame, finite, strictly increasing
    starts) that strays from the grid by more than `GRID_TOLERANCE_FRAMES` somewhere; otherwise the exact grid.
    """
    if container_times is None or num_frames == 0:
        return grid_table(num_frames, fps)
    times = np.asarray(container_times, dtype=np.float64).reshape(-1, 2)
    if len(times) != num_frames or not np.all(np.isfinite(times)) or np.any(np.diff(times[:, 0]) <= 0):
        return grid_table(num_frames, fps)  # AVI without timestamps, say: decord fills in garbage
    span = times[-1, 1] - times[0, 0]
    if not 0.5 <= span * fps / num_frames <= 2.0:
        return grid_table(num_frames, fps)  # a garbage row (a first packet without a timestamp) stretches the span
    hidden = 0
    if first_shown is not None:
        hidden = min(int(np.searchsorted(times[:, 0], first_shown - GRID_TOLERANCE_FRAMES / fps)), num_frames - 1)
        times = times[hidden:]
    grid = grid_table(len(times), fps, hidden)
    starts = times[:, 0] - times[0, 0]
    if np.max(np.abs(starts - grid.starts)) <= GRID_TOLERANCE_FRAMES / fps:
        return grid
    duration = float(times[-1, 1] - times[0, 0])
    if not duration > starts[-1]:  # no usable end for the last frame: give it the average interval
        duration = float(starts[-1] + 1.0 / fps)
    return FrameTable(starts, duration, float(fps), True, hidden)


def trim_table(table: FrameTable, count: int) -> FrameTable:
    """The first `count` frames of `table` (a stream that decodes fewer frames than its container lists); the last
    kept frame is shown until the first dropped one would have started."""
    if not 0 < count <= len(table):
        raise ValueError(f"cannot keep {count} of {len(table)} frames")
    if count == len(table):
        return table
    starts = table.starts[:count]
    return FrameTable(starts, float(table.starts[count]), table.fps, table.variable_rate, table.hidden)
