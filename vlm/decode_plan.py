"""Plan an exact decode of many frame indices: which keyframe each group starts from, and which worker runs it.

Inter-coded video can only be decoded forward from a keyframe. To return frame i exactly, every frame from the
keyframe at or before i up to i has to go through the decoder; the frames after the last wanted one in a
keyframe interval (GOP) are needed by nothing and are never decoded. So a decode is a set of independent jobs, one
per GOP that holds a wanted frame: seek to its keyframe, decode up to its last wanted frame. Jobs share no decoder
state, so they can run on parallel decoders; `split_balanced` hands out contiguous runs of jobs with about equal
numbers of frames to decode. Pure functions on integers; the I/O is in `cader.vlm.video`.
"""

from __future__ import annotations

from dataclasses import dataclass

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
