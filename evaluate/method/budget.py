"""Stage-2 window rules as pure functions: breadth-aware fallback, minimum crop, budget-aware dense sampling.

Paper (cader.txt, "Temporal Segment Proposal" and "Local Evidence Verification"; Algorithm 1 lines 18-23):
- "if the proposed window exceeds 1200 s or spans more than 20 % of the video, the question is treated as globally
  dependent and the system falls back to A1";
- "crop_video extracts the segment, enforcing a minimum duration of 10 s by symmetrically expanding shorter windows
  around their midpoint";
- Eq. 4: r2 = clip(N_budget / D_crop, r_min, r_max) with N_budget = 512, r_min = 1.0, r_max = 8.0.
"""

from __future__ import annotations

import math


def is_too_broad(
    start: float, end: float, duration: float, max_seconds: float = 1200.0, max_fraction: float = 0.2
) -> bool:
    """Breadth-aware fallback: width > max_seconds or width > max_fraction * duration (strictly greater)."""
    width = end - start
    return width > max_seconds or width > max_fraction * duration


def crop_window(
    start: float, end: float, duration: float, min_crop: float = 10.0, edge: str = "shift"
) -> tuple[float, float]:
    """The crop of a proposed window: at least `min_crop` seconds, expanded symmetrically about its midpoint.

    edge="shift" (default): an expanded window that crosses 0 or `duration` is slid back inside the video, so it
    keeps min_crop when the video is that long (the paper's minimum is a rule on the window).
    edge="clip": the expanded window is cut at 0 and `duration` (it may end up shorter than min_crop at an edge).
    """
    if end - start >= min_crop:
        return max(0.0, start), min(duration, end)
    mid = (start + end) / 2.0
    lo, hi = mid - min_crop / 2.0, mid + min_crop / 2.0
    if edge == "shift":
        if lo < 0.0:
            lo, hi = 0.0, hi - lo
        if hi > duration:
            lo, hi = lo - (hi - duration), duration
    elif edge != "clip":
        raise ValueError(f"edge must be 'clip' or 'shift', got {edge!r}")
    return max(0.0, lo), min(duration, hi)


def dense_rate(
    crop_duration: float, n_budget: float = 512.0, r_min: float = 1.0, r_max: float = 8.0
) -> float:
    """Eq. 4: r2 = clip(N_budget / D_crop, r_min, r_max). A zero-length crop gets the densest rate."""
    if crop_duration <= 0 or not math.isfinite(crop_duration):
        return float(r_max)
    return float(min(r_max, max(r_min, n_budget / crop_duration)))
