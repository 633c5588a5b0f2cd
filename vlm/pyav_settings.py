"""How the reader drives PyAV's decoders: how many run at once, which containers may be seeked by timestamp,
which codecs may drop unreferenced pictures, the colour conversion's threads, and what probing frame 0 tells.
Used by `cader.vlm.video.VideoReader` (re-exported there)."""

from __future__ import annotations

import functools
import os
from typing import NamedTuple


def default_decode_workers(limit: int = 8) -> int:
    """Parallel decoders for one decode: the usable cores (at most `limit`), or 1 inside a DataLoader worker,
    where the loader already runs one sample per process and more threads would only oversubscribe the cores."""
    from torch.utils.data import get_worker_info

    if get_worker_info() is not None:
        return 1
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, min(limit, cores))


# Containers whose timestamps place every decoded picture on the frame table, so a decode may seek (the planned
# path). AVI stores no presentation times (H.264 with B-frames comes out with decode-order ones), ASF's rate and
# MPEG-PS's timestamps after a seek are off by frames: those videos are decoded sequentially, exact but slower.
PLANNED_FORMATS = frozenset({"mov", "mp4", "matroska", "webm", "mpegts", "flv"})

# Decoders that honour FFmpeg's skip_frame=NONREF slice by slice, so it can change from one packet to the next: a
# picture no other picture references (most B-frames of web video) is then dropped before it is decoded, unless it is
# wanted. Other decoders read the setting once, or not at all, and decode every picture.
THINNABLE_CODECS = frozenset({"h264", "hevc"})


# Packets whose timestamps are read at open to see whether pictures come out of decode order (B-frames).
REORDER_PROBE_PACKETS = 64


@functools.cache
def reformat_options() -> dict:
    """Keyword arguments for `VideoReformatter.reformat`: one swscale thread. PyAV 17 made the conversion use every
    core by default (PyAV PR #2187), which slows it down and can fail with BlockingIOError where decoders already run
    in parallel (PyAV issues #2200, #2281); here the parallelism is across decoders (and DataLoader workers), so each
    conversion keeps to its decoder's thread. Older PyAV has no such argument and converts on one thread."""
    import av

    major = int(av.__version__.split(".")[0])
    return {"threads": 1} if major >= 17 else {}


def steps_on(previous: int, index: int, droppable: set[int]) -> bool:
    """Whether a decoder's next picture, frame `index`, may follow frame `previous`: the next frame, or a later
    one when every frame between was one the decoder was allowed to drop."""
    return index == previous + 1 or (index > previous and droppable.issuperset(range(previous + 1, index)))


class FirstFrame(NamedTuple):
    """What decoding frame 0 tells about a stream."""

    pts: int | None  # presentation timestamp in stream ticks; None when the first picture carries none
    seconds: float | None  # the same in seconds from the stream's start_time, the origin of the index's frame times
    coded_size: tuple[int, int]  # (height, width) as stored
    rotation: int  # counter-clockwise degrees a player turns it: 0, 90, 180 or 270
    container_format: str  # FFmpeg's demuxer names, e.g. "mov,mp4,m4a,3gp,3g2,mj2"
    codec: str = ""  # the decoder's name, e.g. "h264"
    reorders: bool = False  # pictures come out of decode order (B-frames) within the first packets
