"""Plan an exact decode of many frame indices: which keyframe each group starts from, and which worker runs it.

Inter-coded video can only be decoded forward from a keyframe. To return frame i exactly, every frame from the
keyframe at or before i up to i has to go through the decoder; the frames after the last wanted one in a
keyframe interval (GOP) are needed by nothing and are never decoded. So a decode is a set of independent jobs, one
per GOP that holds a wanted frame: seek to its keyframe, decode up to its last wanted frame. Jobs share no decoder
state, so they can run on parallel decoders; `split_balanced` hands out contiguous runs of jobs with about equal
numbers of frames to decode.

The plan is not always the cheaper way. Where a decoder may drop the pictures nothing references (B-frames of H.264
and HEVC), the plan decodes about half of every interval; where it may not (Constrained Baseline, most phone and
screen recordings) and the keyframes are far apart, it skips only the tails of the intervals and pays a seek per
interval, and one sequential decode on FFmpeg's own threads costs less. `decode_costs` estimates both in decoded
pictures from the video's index (keyframes, whether it has droppable pictures) and the wanted frames, and
`choose_decode` takes the cheaper; both paths return the same frames. Pure functions on integers; the I/O is in
`cader.vlm.video`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np


@dataclass(frozen=True)
class GopJob:
    key: int  # index of the keyframe decoding starts from
    indices: tuple[int, ...]  # wanted frame indices in this keyframe interval, ascending

    @property
    def frames_to_decode(self) -> int:
        """Frames the decoder must produce: from the keyframe through the last wanted frame."""
        return self.indices[-1] - self.key + 1


def group_by_keyframe(indices, key_indices) -> list[GopJob]:
    """One job per keyframe interval holding wanted frames.

    `indices` sorted ascending and unique; `key_indices` the keyframe indices of the stream (any order). Frame 0 is
    treated as a keyframe: decoding always can start at the beginning of the stream.
    """
    indices = np.asarray(indices, dtype=np.int64)
    if len(indices) == 0:
        return []
    if np.any(np.diff(indices) <= 0) or indices[0] < 0:
        raise ValueError("indices must be non-negative, sorted ascending and unique")
    keys = np.union1d(np.asarray(key_indices, dtype=np.int64), [0])
    gop = np.searchsorted(keys, indices, side="right") - 1
    bounds = np.flatnonzero(np.diff(gop)) + 1
    return [GopJob(int(keys[g[0]]), tuple(int(i) for i in part))
            for part, g in zip(np.split(indices, bounds), np.split(gop, bounds))]


def split_balanced(jobs: list[GopJob], workers: int) -> list[list[GopJob]]:
    """Contiguous runs of jobs, at most `workers` of them, each with about 1/workers of the frames to decode.

    Contiguous runs keep each worker's reads moving forward through the file. Greedy: a run closes before the next
    job when adding it would overshoot the fair share (work remaining / workers remaining) by more than closing now
    falls short of it.
    """
    if workers < 1:
        raise ValueError(f"workers must be >= 1, got {workers}")
    runs: list[list[GopJob]] = []
    remaining = sum(job.frames_to_decode for job in jobs)
    current: list[GopJob] = []
    load = 0
    for job in jobs:
        work = job.frames_to_decode
        workers_left = workers - len(runs)
        if current and workers_left > 1:
            target = remaining / workers_left
            if load + work - target > target - load:  # adding it overshoots more than closing now falls short
                runs.append(current)
                remaining -= load
                current, load = [], 0
        current.append(job)
        load += work
    if current:
        runs.append(current)
    return runs


# The costs below are in decoded pictures (CPU), fitted on 720p H.264 by scripts/bench/decode_choice.py (2 decoders).
SEEK_COST_PICTURES = 10.0  # one seek: the demuxer's jump and the decoder's flush and restart (~15 ms at 720p)
NONREF_SHARE = 0.5  # pictures an H.264/HEVC decoder drops undecoded in a stream with B-frames (x264's default: 3 B)
THREAD_OVERHEAD = 0.2  # CPU a frame-threaded decoder spends per picture beyond a one-thread decoder's (1.17-1.24x)

DecodePath = Literal["planned", "sequential"]


@dataclass(frozen=True)
class StreamFacts:
    """What the choice needs to know about a video, from its index and its first packets."""

    key_indices: tuple[int, ...]  # keyframe indices in presentation order
    droppable: bool  # the stream has pictures the decoder may drop undecoded (B-frames of H.264/HEVC)
    seekable: bool  # its timestamps place every picture, so the planned decode may seek (`PLANNED_FORMATS`)


@dataclass(frozen=True)
class DecodeCost:
    planned: float  # pictures the planned decode is expected to decode, seeks counted as pictures
    sequential: float  # pictures one sequential decode from the start decodes, its threads' overhead counted

    @property
    def cheaper(self) -> DecodePath:
        """The path with the lower cost; the plan on a tie (it also runs on parallel decoders)."""
        return "sequential" if self.sequential < self.planned else "planned"


def planned_cost(jobs: list[GopJob], workers: int, droppable: bool, seek_cost: float = SEEK_COST_PICTURES,
                 nonref_share: float = NONREF_SHARE) -> float:
    """Pictures the planned decode of `jobs` on `workers` decoders is expected to decode.

    A job decodes its interval through its last wanted frame; with `droppable`, all but the first job of each
    decoder (decoded whole: it checks the display order) drop `nonref_share` of the pictures nobody asked for. Each job
    costs a seek.
    """
    total = 0.0
    for run in split_balanced(jobs, workers):
        for number, job in enumerate(run):
            unwanted = job.frames_to_decode - len(job.indices)
            dropped = nonref_share * unwanted if droppable and number > 0 else 0.0
            total += job.frames_to_decode - dropped + seek_cost
    return total


def decode_costs(indices, facts: StreamFacts, workers: int, seek_cost: float = SEEK_COST_PICTURES,
                 nonref_share: float = NONREF_SHARE, thread_overhead: float = THREAD_OVERHEAD) -> DecodeCost:
    """Both paths' expected cost for decoding `indices` (sorted, unique) of a video with these facts.

    The sequential decode runs from the start of the stream through the last wanted frame and decodes every picture
    (it counts pictures to place them, so it may drop none). A video that cannot seek has only that path (the plan
    costs infinity).
    """
    indices = np.asarray(indices, dtype=np.int64)
    if len(indices) == 0:
        return DecodeCost(0.0, 0.0)
    sequential = (int(indices[-1]) + 1) * (1.0 + thread_overhead)
    if not facts.seekable:
        return DecodeCost(float("inf"), sequential)
    jobs = group_by_keyframe(indices, facts.key_indices)
    return DecodeCost(planned_cost(jobs, workers, facts.droppable, seek_cost, nonref_share), sequential)


def choose_decode(indices, facts: StreamFacts, workers: int) -> DecodePath:
    """The cheaper way to decode `indices` of this video (`decode_costs`); both return the same frames."""
    return decode_costs(indices, facts, workers).cheaper
