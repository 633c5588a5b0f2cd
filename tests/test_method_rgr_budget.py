"""RGR (Algorithm 2, Eq. 5-9) and the Stage-2 window rules (Eq. 4, breadth fallback, min crop), by hand."""

import numpy as np
import pytest
from cader.evaluate.method.budget import crop_window, dense_rate, is_too_broad
from cader.evaluate.method.rgr import (
    fuse_segments,
    relevance_fps,
    rgr_segments,
    rgr_times,
    unexplored_intervals,
)


def rgr_frame_counts(fused, duration, r1=1.0):
    """(n_i of each explored sub-interval (Eq. 8), frames of each unexplored interval at r1), from `rgr_segments`
    (which fuses again: fusing fused segments changes nothing)."""
    counts = [n for _, _, n in rgr_segments(fused, duration, r1)]
    return counts[:len(fused)], counts[len(fused):]


def test_relevance_fps_eq5():
    # Case study (App. B): rejected proposal P_yes = 0.378 -> f = 0.378 + 0.4 = 0.778.
    assert relevance_fps(0.378) == pytest.approx(0.778)
    assert relevance_fps(0.0) == pytest.approx(0.4)  # f_min keeps coverage
    assert relevance_fps(0.679) == 1.0  # 1.079 capped at 1.0
    assert relevance_fps(0.5, f_min=0.2) == pytest.approx(0.7)


def test_case_study_first_reflection_context():
    # [2100, 2130] rejected at P_yes 0.378 in a 3600 s video: 30 s * 0.778 -> floor(23.34) = 23 frames,
    # unexplored [0, 2100] and [2130, 3600] at r1 = 1 -> 2100 + 1470 frames.
    scored = [(2100.0, 2130.0, relevance_fps(0.378))]
    fused = fuse_segments(scored)
    assert fused == [(2100.0, 2130.0, pytest.approx(0.778))]
    assert unexplored_intervals(fused, 3600.0) == [(0.0, 2100.0), (2130.0, 3600.0)]
    assert rgr_frame_counts(fused, 3600.0, 1.0) == ([23], [2100, 1470])
    times = rgr_times(scored, 3600.0, 1.0)
    assert len(times) == 23 + 2100 + 1470
    assert np.all(np.diff(times) > 0)
    inside = times[(times > 2100) & (times < 2130)]
    assert len(inside) == 23
    # bins of 30/23 s centred: first at 2100 + 15/23
    assert inside[0] == pytest.approx(2100 + 15 / 23)


def test_fuse_most_recent_wins_and_merges_equal_neighbours():
    scored = [(10.0, 50.0, 0.8), (30.0, 70.0, 0.5)]
    # breakpoints 10, 30, 50, 70: [10,30] only k=0 -> .8; [30,50] k=0,1 -> k*=1 -> .5; [50,70] k=1 -> .5 (merged)
    assert fuse_segments(scored) == [(10.0, 30.0, 0.8), (30.0, 70.0, 0.5)]
    explored, unexplored = rgr_frame_counts(fuse_segments(scored), 100.0, 1.0)
    assert explored == [16, 20]  # floor(20*.8), floor(40*.5)
    assert unexplored == [10, 30]  # [0,10] and [70,100] at 1 fps
    assert len(rgr_times(scored, 100.0)) == 76


def test_fuse_order_matters():
    older_wide = [(0.0, 100.0, 0.6), (40.0, 60.0, 1.0)]
    assert fuse_segments(older_wide) == [(0.0, 40.0, 0.6), (40.0, 60.0, 1.0), (60.0, 100.0, 0.6)]
    newer_wide = [(40.0, 60.0, 1.0), (0.0, 100.0, 0.6)]
    assert fuse_segments(newer_wide) == [(0.0, 100.0, 0.6)]


def test_fuse_disjoint_leaves_gap_unexplored_and_does_not_merge_across_it():
    scored = [(10.0, 20.0, 0.5), (30.0, 40.0, 0.5)]
    fused = fuse_segments(scored)
    assert fused == [(10.0, 20.0, 0.5), (30.0, 40.0, 0.5)]
    assert unexplored_intervals(fused, 50.0) == [(0.0, 10.0), (20.0, 30.0), (40.0, 50.0)]
    assert rgr_frame_counts(fused, 50.0) == ([5, 5], [10, 10, 10])


def test_rgr_edge_cases():
    assert fuse_segments([]) == []
    assert len(rgr_times([], 12.5, 1.0)) == 12  # nothing explored: plain 1 fps
    assert fuse_segments([(5.0, 5.0, 0.9)]) == []  # zero-width segment explores nothing
    full = rgr_times([(0.0, 10.0, 0.4)], 10.0)
    assert len(full) == 4 and unexplored_intervals(fuse_segments([(0.0, 10.0, 0.4)]), 10.0) == []


def test_dense_rate_values():
    assert dense_rate(10.0) == 8.0  # 51.2 -> r_max
    assert dense_rate(64.0) == 8.0  # exactly 512/64
    assert dense_rate(128.0) == 4.0
    assert dense_rate(300.0) == pytest.approx(512 / 300)
    assert dense_rate(512.0) == 1.0
    assert dense_rate(1000.0) == 1.0  # 0.512 -> r_min
    assert dense_rate(0.0) == 8.0
    assert dense_rate(100.0, n_budget=256, r_min=0.5, r_max=2.0) == 2.0
    assert dense_rate(0.5, n_budget=2.0) == 4.0  # under a second: still N_budget / D_crop


def test_breadth_fallback():
    # 3600 s video: 20 % = 720 s
    assert not is_too_broad(2100, 2130, 3600)
    assert not is_too_broad(0, 720, 3600)  # exactly 20 % is allowed
    assert is_too_broad(0, 720.5, 3600)
    # 10000 s video: 20 % = 2000 s, so the 1200 s rule bites first
    assert not is_too_broad(0, 1200, 10000)
    assert is_too_broad(0, 1201, 10000)
    # short video: 60 s -> 12 s limit
    assert is_too_broad(0, 13, 60) and not is_too_broad(0, 12, 60)


def test_crop_min_duration_symmetric():
    assert crop_window(2100, 2130, 3600) == (2100, 2130)  # already >= 10 s
    assert crop_window(0.5, 20.5, 3600) == (0.5, 20.5)
    assert crop_window(100, 104, 3600) == (97.0, 107.0)  # mid 102 +- 5
    assert crop_window(50, 50, 3600) == (45.0, 55.0)
    # near the start: shift (default) keeps 10 s inside the video, clip cuts at 0
    assert crop_window(1, 3, 3600) == (0.0, 10.0)
    assert crop_window(1, 3, 3600, edge="clip") == (0.0, 7.0)
    # near the end
    assert crop_window(3598, 3600, 3600) == (3590.0, 3600.0)
    assert crop_window(3598, 3600, 3600, edge="clip") == (3594.0, 3600.0)
    # video shorter than the minimum crop: the whole video either way
    assert crop_window(2, 3, 6) == (0.0, 6.0)
    assert crop_window(2, 3, 6, edge="clip") == (0.0, 6.0)
    assert crop_window(2, 3, 6, min_crop=4) == (0.5, 4.5)
    with pytest.raises(ValueError):
        crop_window(1, 2, 10, edge="wrap")
