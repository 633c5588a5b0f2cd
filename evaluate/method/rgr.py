"""Relevance-Guided Resampling (paper Eq. 5-9, supplementary E Algorithm 2) as pure functions on numbers.

A scored segment is (t_s, t_e, f): a verified window and the frame rate it gets in the next proposal's context,
f = min(f_max, P_yes + f_min) (Eq. 5; the paper's ceiling f_max is 1.0). Overlapping segments are fused into a
non-overlapping fps map in which each sub-interval between consecutive breakpoints takes the rate of the most recent
segment covering it (Eq. 6-7); equal-rate neighbours are merged. Explored sub-intervals get n_i = floor(delta_i * f_i) frames (Eq. 8), the rest of
the video is sampled at the base rate r1, and all frame times are sorted (Eq. 9, Algorithm 2 lines 13-24).
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import pairwise

import numpy as np
from cader.vlm.sampling import count_times, frames_at_rate

Segment = tuple[float, float, float]  # (start, end, fps)


def relevance_fps(p_yes: float, f_min: float = 0.4, f_max: float = 1.0) -> float:
    """Eq. 5: f = min(f_max, P_yes + f_min), the paper's f_max being 1.0 fps; f_min keeps some coverage of even
    clearly irrelevant segments."""
    return float(min(f_max, p_yes + f_min))


def fuse_segments(scored: Sequence[Segment]) -> list[Segment]:
    """Algorithm 2 Step 1: the non-overlapping fps map P, sorted by time.

    `scored` is in the order the segments were verified (index k = iteration), so "most recent" = largest index.
    Sub-intervals covered by no segment (gaps between disjoint windows) are not in the map: they are unexplored.
    """
    breakpoints = sorted({float(t) for s, e, _ in scored for t in (s, e)})
    fused: list[Segment] = []
    for b_s, b_e in pairwise(breakpoints):
        covering = [k for k, (s, e, _) in enumerate(scored) if s <= b_s and e >= b_e]
        if not covering:
            continue
        fps = float(scored[max(covering)][2])  # Eq. 7: k* = argmax_k over covering segments
        if fused and fused[-1][2] == fps and fused[-1][1] == b_s:
            fused[-1] = (fused[-1][0], b_e, fps)  # merge equal neighbours (Algorithm 2 line 12)
        else:
            fused.append((b_s, b_e, fps))
    return fused


def unexplored_intervals(fused: Sequence[Segment], duration: float) -> list[tuple[float, float]]:
    """U = [0, D] minus the explored sub-intervals (Algorithm 2 line 20), as sorted disjoint intervals."""
    gaps: list[tuple[float, float]] = []
    cursor = 0.0
    for s, e, _ in sorted(fused):
        if s > cursor:
            gaps.append((cursor, min(s, duration)))
        cursor = max(cursor, e)
    if cursor < duration:
        gaps.append((cursor, duration))
    return [(s, e) for s, e in gaps if e > s]


def rgr_segments(scored: Sequence[Segment], duration: float, r1: float = 1.0) -> list[tuple[float, float, int]]:
    """Algorithm 2 lines 13-24 as (start, end, n): each explored sub-interval with its n_i (Eq. 8), then each
    unexplored interval with floor(delta * r1) frames; disjoint, their n summing to N_reflect (Eq. 9)."""
    fused = fuse_segments(scored)
    explored = [(s, e, frames_at_rate(s, e, f)) for s, e, f in fused]
    return explored + [(s, e, frames_at_rate(s, e, r1)) for s, e in unexplored_intervals(fused, duration)]


def rgr_times(scored: Sequence[Segment], duration: float, r1: float = 1.0) -> np.ndarray:
    """Algorithm 2: frame times of F_reflect, sorted. len(...) equals N_reflect of Eq. 9 (summed per interval)."""
    parts = [count_times(s, e, n) for s, e, n in rgr_segments(scored, duration, r1)]
    if not parts:
        return np.zeros(0, dtype=np.float64)
    return np.sort(np.concatenate(parts))
