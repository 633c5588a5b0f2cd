"""A video's index, read once when it is opened: frame count, average rate, keyframes and every frame's times.

decord builds it while opening a file (it reads every packet header), so it comes first. decord's bundled FFmpeg is
old, though: it has no AV1 decoder, and it cannot measure the duration of a WebM or MKV written live without cues
(browser MediaRecorder, OBS) or of a one-frame MPEG-TS. For those, `pyav_index` builds the same index from a demux
pass with PyAV (packet headers only, nothing decoded). The frames themselves are always decoded with PyAV
(`cader.vlm.video`).

An index can list more frames than the stream decodes: an MP4 trimmed by its edit list (as QuickTime and phone editors
trim without re-encoding) keeps the packets up to the next keyframe, flagged as discarded, and decord counts them.
PyAV's index leaves out such trailing discarded packets; decord's cannot, and the reader finds out when a decode
reaches the end of the stream early (`cader.vlm.video.FrameCountMismatch`).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import numpy as np

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class VideoIndex:
    num_frames: int
    fps: float  # average rate
    key_indices: np.ndarray  # (K,) int64, presentation-order indices of keyframes
    frame_times: np.ndarray | None  # (N, 2) start and end seconds from the stream's start_time, or None
    source: str  # "decord" or "pyav"


def video_stream(container):
    """The stream FFmpeg picks as the video (av_find_best_stream), the one decord indexes too: the first video
    stream can be a thumbnail or preview track."""
    return container.streams.best("video")


def decord_index(path: Path, num_threads: int = 0) -> VideoIndex:
    """decord's index. Raises whatever decord raises when it cannot read the file."""
    # PyAV's FFmpeg libraries must load before decord's bundled older copies, which otherwise shadow some of them
    # for the whole process (PyAV's libvpx-vp9 encoder then fails to open).
    import av  # noqa: F401
    import decord

    reader = decord.VideoReader(str(path), ctx=decord.cpu(0), num_threads=num_threads)
    n = len(reader)
    try:
        keys = np.asarray(reader.get_key_indices(), dtype=np.int64)
    except Exception:  # without keyframes every decode job starts at frame 0 (slow, still exact)
        keys = np.zeros(1, dtype=np.int64)
    try:
        times = np.asarray(reader.get_frame_timestamp(np.arange(n)), dtype=np.float64) if n else None
    except Exception:
        times = None
    return VideoIndex(n, float(reader.get_avg_fps()), keys, times, "decord")


def pyav_index(path: Path) -> VideoIndex:
    """The same index from one demux pass with PyAV: packets in presentation order by their timestamps.

    Raises ValueError when the file has no video packets or no usable rate.
    """
    import av

    with av.open(str(path)) as container:
        stream = video_stream(container)
        if stream is None:
            raise ValueError("no video stream")
        pts, keyframe, durations, discarded = [], [], [], []
        for packet in container.demux(stream):
            if packet.size == 0:  # the demuxer's final flush packet
                continue
            pts.append(packet.pts)
            keyframe.append(packet.is_keyframe)
            durations.append(packet.duration or 0)
            discarded.append(bool(getattr(packet, "is_discard", False)))
        start, tick = stream.start_time or 0, float(stream.time_base)
        rate = stream.average_rate or stream.guessed_rate
    n = len(pts)
    if n == 0:
        raise ValueError("no video packets")
    if any(p is None for p in pts):  # no presentation times: decode order stands in, the times are left unknown
        order, times = np.arange(n), None
    else:
        order = np.argsort(np.asarray(pts, dtype=np.int64), kind="stable")
        shown = np.flatnonzero(~np.asarray(discarded)[order])
        if len(shown):  # packets after the last shown one are never displayed (an edit list's trim): not frames
            order = order[: shown[-1] + 1]
            n = len(order)
        starts = (np.asarray(pts, dtype=np.float64)[order] - start) * tick
        last = durations[order[-1]] * tick or (starts[-1] - starts[-2] if n > 1 else 0.0)
        times = np.stack([starts, np.append(starts[1:], starts[-1] + last)], axis=1)
    fps = float(rate) if rate else 0.0
    if not fps > 0 and times is not None and times[-1, 1] > times[0, 0]:
        fps = n / float(times[-1, 1] - times[0, 0])
    if not fps > 0:
        raise ValueError("no frame rate")
    keys = np.flatnonzero(np.asarray(keyframe)[order]).astype(np.int64)
    return VideoIndex(n, fps, keys if len(keys) else np.zeros(1, dtype=np.int64), times, "pyav")


def read_index(path: Path, num_threads: int = 0) -> VideoIndex:
    """decord's index, or PyAV's when decord cannot read the file. Raises ValueError naming decord's reason when
    neither can."""
    try:
        return decord_index(path, num_threads)
    except Exception as err:  # decord raises its own DECORDError and sometimes RuntimeError
        reason = str(err).splitlines()[0][:200]
    try:
        index = pyav_index(path)
    except Exception as err:
        raise ValueError(f"cannot decode: {reason}; PyAV: {str(err).splitlines()[0][:200]}") from err
    log.info("%s: decord cannot read it (%s); indexed with PyAV", path, reason)
    return index
