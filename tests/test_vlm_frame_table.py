import numpy as np
import pytest
from cader.vlm.frame_table import FrameTable, frame_table, grid_table

# A variable-rate clip of 5 frames: shown for 0.1, 0.05, 0.05, 0.3 and 0.1 s.
VFR_TIMES = [(2.0, 2.1), (2.1, 2.15), (2.15, 2.2), (2.2, 2.5), (2.5, 2.6)]


def test_grid_showing_is_floor_dedup_clip():
    table = grid_table(20, 10.0)
    # floor(t * 10): 0.05 -> 0, 0.06 -> 0, 0.99 -> 9; 5.0 is past the end -> 19; -1.0 before the start -> 0
    assert list(table.showing([0.05, 0.06, 0.99, 5.0, -1.0])) == [0, 9, 19]
    assert list(table.showing([0.3, 0.7])) == [3, 7]  # a time that is a frame's start picks that frame
    assert table.duration == 2.0 and not table.variable_rate


def test_container_times_on_the_grid_give_the_exact_grid():
    fps = 30000 / 1001  # 29.97 fps with timestamps rounded to milliseconds, as MP4 muxers often store them
    n = 100
    rounded = np.round(np.arange(n + 1) / fps, 3)
    table = frame_table(n, fps, np.stack([rounded[:-1], rounded[1:]], axis=1).astype(np.float32))
    assert not table.variable_rate
    np.testing.assert_array_equal(table.starts, np.arange(n) / fps)  # exact, not the rounded float32 copy


def test_variable_rate_table_is_shifted_to_start_at_zero():
    table = frame_table(5, 5 / 0.6, VFR_TIMES)
    assert table.variable_rate
    np.testing.assert_allclose(table.starts, [0.0, 0.1, 0.15, 0.2, 0.5])
    assert table.duration == pytest.approx(0.6)
    assert table.period(3) == pytest.approx(0.3) and table.period(4) == pytest.approx(0.1)


def test_variable_rate_showing_uses_the_real_times():
    table = frame_table(5, 5 / 0.6, VFR_TIMES)
    # 0.16 s is inside frame 2 [0.15, 0.2); 0.45 s inside frame 3 [0.2, 0.5); at 0.5 s frame 4 starts
    assert list(table.showing([0.16])) == [2]
    assert list(table.showing([0.45, 0.5])) == [3, 4]
    # the average-rate grid (8.33 fps) says floor(0.16 * 8.33) = 1: the frame shown until 0.15 s
    assert list(grid_table(5, 5 / 0.6).showing([0.16])) == [1]


def test_nearest_maps_a_decoded_timestamp_to_its_frame():
    table = frame_table(5, 5 / 0.6, VFR_TIMES)
    assert [table.nearest(t) for t in (0.0, 0.1, 0.1501, 0.2, 0.5)] == [0, 1, 2, 3, 4]
    # 0.36 s is 0.16 s after frame 3 starts (period 0.3) and 0.14 s before frame 4 (period 0.1): neither
    assert table.nearest(0.36) == -1
    assert table.nearest(-0.2) == -1 and table.nearest(0.9) == -1


def test_nearest_on_the_grid_rounds():
    table = grid_table(24, 24.0)
    assert table.nearest(1 / 24 + 0.01) == 1 and table.nearest(0.5) == 12
    assert table.nearest(-1.0) == -1 and table.nearest(1.0) == -1  # frame 24 does not exist


@pytest.mark.parametrize(
    "times",
    [
        None,
        [(0.0, 0.1)] * 4,  # not one row per frame
        [(0.0, 0.1), (0.1, 0.2), (np.nan, 0.3), (0.3, 0.4), (0.4, 0.5)],  # not finite
        [(-3.8e17, -3.8e17)] * 5,  # what decord reports for AVI with B-frames: no usable timestamps
        [(-1e14, -1e14), (0.0, 0.1), (0.1, 0.2), (0.2, 0.3), (0.3, 0.4)],  # a garbage first row stretches the span
        [(0.0, 0.1), (0.2, 0.3), (0.1, 0.2), (0.3, 0.4), (0.4, 0.5)],  # not increasing
    ],
)
def test_unusable_container_times_fall_back_to_the_grid(times):
    table = frame_table(5, 10.0, times)
    assert not table.variable_rate
    np.testing.assert_array_equal(table.starts, np.arange(5) / 10.0)


def test_a_last_frame_without_an_end_gets_the_average_interval():
    times = [(0.0, 0.1), (0.1, 0.15), (0.15, 0.2), (0.2, 0.5), (0.5, 0.5)]  # last end missing (equal to its start)
    table = frame_table(5, 10.0, times)
    assert table.variable_rate and table.duration == pytest.approx(0.6)


def test_empty_table():
    table = FrameTable(np.zeros(0), 0.0, 10.0, False)
    assert len(table.showing([1.0])) == 0


def test_frames_before_the_first_one_shown_are_hidden():
    # A stream-copy cut: the container lists two frames before time 0 that the decoder drops (edit list).
    times = [(-0.2, -0.1), (-0.1, 0.0), (0.0, 0.1), (0.1, 0.2), (0.2, 0.3)]
    table = frame_table(5, 10.0, times, first_shown=0.0)
    assert table.hidden == 2 and len(table) == 3 and not table.variable_rate
    np.testing.assert_allclose(table.starts, [0.0, 0.1, 0.2])
    assert table.duration == pytest.approx(0.3)
    # without the decoder's first timestamp nothing is hidden, and times count from the container's first row
    assert frame_table(5, 10.0, times).hidden == 0
    # a first shown frame a little after its listed time (timestamp rounding) hides nothing
    assert frame_table(5, 10.0, [(0.0, 0.1), (0.1, 0.2), (0.2, 0.3), (0.3, 0.4), (0.4, 0.5)], first_shown=0.01).hidden == 0
