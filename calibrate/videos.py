"""Which questions share a video, across benchmarks: the key calibration counts videos by, and the fit/select split
that keeps each video's questions on one side.

The key. Questions are correlated through the file they are asked about, not through the benchmark that lists them:
synthetic and synthetic_heldout over one folder of videos, two splits of one release, or one file a user placed
under several benchmark names are one video however many benchmarks ask about it. A record names its file by
``video``, the path relative to the data root of the run that wrote it (DESIGN.md section 2; normally each release
sits in a folder of its own under that root, so the path starts with that folder), so the key is that path alone,
never (benchmark, path). Keyed by (benchmark, path), 400 questions of one file listed by three benchmarks were
three videos, split between fit and selection, and certified an exit; keyed by the file they are one video, which a
bound counting videos refuses to certify anything on (calibrate/per_video.py).

What a relative path cannot tell, and which way each error goes:
- two files with one relative path under different data roots count as one video: fewer, larger clusters only make
  the design effect larger and the bound more conservative, never less;
- one file under two relative paths (a symlink, a copy, or one run given the benchmark's own folder as data root and
  another its parent) stays two videos. Only a content fingerprint written into the records could join those; the
  records carry none (evaluate/runner.py would have to write one).
A row without a video is a video of its own: nothing can match it to others.

The split. Stratified by benchmark as before, with each video in the benchmark of its first question in (benchmark,
sample_id) order, so a video asked about by several benchmarks goes to one side whole. Where no video is shared
between benchmarks this is exactly calibrate/records.py's per-benchmark split (the same seed gives the same split).
"""

from __future__ import annotations

import logging
from collections.abc import Hashable, Sequence
from typing import Literal

import numpy as np
from cader.calibrate.clusters import cluster_codes

log = logging.getLogger(__name__)

SPLIT_UNITS = ("video", "question")


def video_key(benchmark, sample_id, video) -> Hashable:
    """The identity of a question's video: its path relative to the data root, whichever benchmark asks; a question
    without a (non-empty string) path is a video of its own."""
    if isinstance(video, str) and video:
        return ("video", video)
    return ("question", benchmark, sample_id)


def video_codes(records: Sequence) -> np.ndarray:
    """A video code per record (0..V-1, equal for the questions of one file, whatever their benchmark)."""
    return cluster_codes([video_key(r.benchmark, r.sample_id, r.video) for r in records])[0]


def _split(records: Sequence, units: np.ndarray, seed: int, fit_fraction: float) -> tuple[list, list]:
    """Per benchmark (in name order), floor(units * fit_fraction) of its units, drawn by the seed, to the fit part;
    a unit belongs to the benchmark of its first record in key order, and units are ordered by that record."""
    rng = np.random.default_rng(seed)
    strata: dict[str, dict[int, list[int]]] = {}  # benchmark -> unit -> record indices
    stratum_of: dict[int, str] = {}
    for i in sorted(range(len(records)), key=lambda i: records[i].key):
        unit = int(units[i])
        bench = stratum_of.setdefault(unit, records[i].benchmark)
        strata.setdefault(bench, {}).setdefault(unit, []).append(i)
    fit, select = [], []
    for bench in sorted(strata):
        members = list(strata[bench].values())
        order = rng.permutation(len(members))
        n_fit = int(np.floor(len(members) * fit_fraction))
        for rank, k in enumerate(order):
            (fit if rank < n_fit else select).extend(members[k])
    return fit, select


def split_fit_select_videos(
    records: Sequence,
    seed: int = 0,
    fit_fraction: float = 0.5,
    *,
    by: Literal["video", "question"] = "video",
) -> tuple[np.ndarray, np.ndarray, str]:
    """Disjoint index arrays (fit, select) into ``records``, and the unit the split actually kept together.

    Args:
        records: the usable Stage-1 records (``benchmark``, ``sample_id``, ``video``, ``key``)
        seed: seed of the shuffle
        fit_fraction: share of each benchmark's videos (or questions) that fits T; the rest selects tau
        by: "video" keeps every video's questions on one side, across benchmarks (module docstring);
            "question" splits questions independently (kept for comparison)

    When no benchmark holds two videos of its own (a calibration set cut from one video, however many benchmarks
    list it), a video split would leave nothing to fit T on: the split falls back to questions, logs a warning
    saying so and returns "question".
    """
    if not 0.0 < fit_fraction < 1.0:
        raise ValueError(f"fit_fraction must be in (0, 1), got {fit_fraction}")
    if by not in SPLIT_UNITS:
        raise ValueError(f"split unit must be one of {SPLIT_UNITS}, got {by!r}")
    records = list(records)
    questions = np.arange(len(records))
    videos = video_codes(records) if by == "video" else questions
    fit, select = _split(records, videos, seed, fit_fraction)
    used = by
    if by == "video" and records and not fit:
        log.warning(
            "split by video leaves nothing to fit the temperature on (no benchmark holds two or more of the %d "
            "videos among %d records; a video several benchmarks ask about counts once); splitting questions "
            "instead, so fit and selection share videos", int(videos.max()) + 1, len(records)
        )
        fit, select = _split(records, questions, seed, fit_fraction)
        used = "question"
    return np.asarray(sorted(fit), dtype=np.int64), np.asarray(sorted(select), dtype=np.int64), used
