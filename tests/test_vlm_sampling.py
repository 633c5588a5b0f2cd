import math

import numpy as np
import pytest
from cader.vlm.sampling import (
    cap_times,
    count_times,
    fit_pixels,
    fps_map_counts,
    fps_map_times,
    uniform_times,
)


def test_count_times_centres_bins():
    np.testing.assert_allclose(count_times(10.0, 20.0, 4), [11.25, 13.75, 16.25, 18.75])
    assert len(count_times(5.0, 5.0, 3)) == 0
    assert len(count_times(0.0, 1.0, 0)) == 0


def test_uniform_times_is_floor_of_duration_times_rate():
    # CADER Eq. 1: N1 = floor(D * r1)
    assert len(uniform_times(0.0, 1834.0, 1.0)) == 1834
    assert len(uniform_times(0.0, 10.9, 1.0)) == 10
    assert len(uniform_times(0.0, 0.3, 10.0)) == 3  # float error must not lose a frame
    np.testing.assert_allclose(uniform_times(0.0, 4.0, 1.0), [0.5, 1.5, 2.5, 3.5])


@pytest.mark.parametrize(
    "segments, expected",
    [
        ([(0.0, 100.0, 1.0)], [100]),
        ([(0.0, 30.0, 0.778), (30.0, 60.0, 1.0)], [23, 30]),  # floor(30 * 0.778) = floor(23.34)
        ([(2100.0, 2130.0, 0.778), (2300.0, 2330.0, 1.0)], [23, 30]),
        ([(0.0, 9.99, 0.5)], [4]),
    ],
)
def test_fps_map_counts_match_floor_delta_f(segments, expected):
    assert fps_map_counts(segments) == expected
    times = fps_map_times(segments)
    assert len(times) == sum(expected)
    assert np.all(np.diff(times) > 0)
    for (s, e, _), n in zip(segments, expected):
        assert np.sum((times >= s) & (times < e)) == n


def test_fps_map_times_sorted_even_if_segments_are_not():
    times = fps_map_times([(50.0, 60.0, 1.0), (0.0, 10.0, 1.0)])
    assert list(times) == sorted(times) and len(times) == 20


def test_cap_times_uniform_over_timeline():
    times = uniform_times(0, 1000, 1.0)
    capped = cap_times(times, 11)
    assert len(capped) == 11
    assert capped[0] == times[0] and capped[-1] == times[-1]
    gaps = np.diff(capped)
    assert gaps.max() - gaps.min() <= 1.0 + 1e-9
    assert cap_times(times, None) is not None and len(cap_times(times, 2000)) == 1000


@pytest.mark.parametrize("h, w, budget", [(1080, 1920, 65_536), (240, 320, 65_536), (720, 1280, 262_144),
                                          (48, 64, 65_536), (300, 3000, 65_536), (4000, 3000, 262_144)])
def test_fit_pixels_respects_budget_and_merge_unit(h, w, budget):
    nh, nw = fit_pixels(h, w, budget)
    assert nh * nw <= budget
    assert nh % 32 == 0 and nw % 32 == 0
    if min(h, w) >= 64:
        assert math.isclose(nh / nw, h / w, rel_tol=0.2)


def test_fit_pixels_known_values():
    # 1080p at 65,536 px: scale = sqrt(1080*1920/65536) = 5.625 -> 192 x 341.3 -> floor to 32s: 192 x 320
    assert fit_pixels(1080, 1920, 65_536) == (192, 320)
    # 320x240 fits already; round to 32s: 256 x 320 = 81,920 > 65,536 -> scale sqrt(76800/65536)=1.0825
    assert fit_pixels(240, 320, 65_536) == (192, 288)
    with pytest.raises(ValueError):
        fit_pixels(0, 10, 65_536)
