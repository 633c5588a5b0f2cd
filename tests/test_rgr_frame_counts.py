"""Property test of RGR's frame counts: over videos of 30 s to 3 h, 0-3 rejected windows anywhere
(the video's edges included), frame budgets of 16-4096 and the paper's 768, the default RGR context holds exactly
Algorithm 2's count per segment after the cap, every frame inside its own segment; the speed option never holds more.

The reference for "Algorithm 2's count after the cap" is computed independently of `capped_counts`: Algorithm 2's
frame times (`rgr_times`: each segment's n_i bin-centre times, sorted) capped by `cap_times`, counted per segment.
"""

import numpy as np
from cader.evaluate.method.rgr import relevance_fps, rgr_segments, rgr_times
from cader.vlm.frame_grid import frames_at, lattice_times, rgr_positions, uniform_frames
from cader.vlm.sampling import cap_times
from hypothesis import given, settings
from hypothesis import strategies as st

R1 = 1.0
NATIVE_FPS = 5.0   # above r1, so every lattice time shows a frame of its own; small arrays for 3 h


@st.composite
def scenarios(draw):
    duration = draw(st.integers(30_000, 3 * 3600_000)) / 1000.0   # milliseconds, as parsed windows are
    windows = []
    for _ in range(draw(st.integers(0, 3))):
        edge = draw(st.sampled_from(["start", "end", "inside"]))
        length = draw(st.integers(100, int(duration * 1000) // 3)) / 1000.0
        start = {"start": 0.0, "end": duration - length}.get(edge)
        if start is None:
            start = draw(st.integers(0, int((duration - length) * 1000))) / 1000.0
        p_yes = draw(st.floats(0.0, 0.6, exclude_max=True))   # rejected: P_yes < delta
        windows.append((start, start + length, relevance_fps(p_yes)))
    max_frames = draw(st.one_of(st.just(768), st.integers(16, 4096)))
    return duration, windows, max_frames


def reference_counts(scored, duration, max_frames, segments):
    """Per segment: how many of Algorithm 2's times survive `cap_times` (independent of `capped_counts`)."""
    kept = cap_times(rgr_times(scored, duration, R1), max_frames)
    return [int(np.count_nonzero((kept >= s) & (kept < e))) for s, e, _ in segments]


def held_per_segment(times, segments):
    return [int(np.count_nonzero((times >= s) & (times < e))) for s, e, _ in segments]


@settings(max_examples=300, deadline=None, derandomize=True, database=None)
@given(scenarios())
def test_default_context_holds_algorithm_2s_capped_count_per_segment(scenario):
    duration, scored, max_frames = scenario
    segments = sorted(rgr_segments(scored, duration, R1))
    want = reference_counts(scored, duration, max_frames, segments)
    lattice = lattice_times(duration, R1)
    on = rgr_positions(segments, max_frames, lattice)
    times = lattice[on.positions]
    assert held_per_segment(times, segments) == want   # exactly the count, and only inside the segment
    assert len(times) == on.capped == sum(want) and on.lost == 0
    assert np.all(times >= 0) and np.all(times < duration) and len(np.unique(on.positions)) == len(on.positions)
    # the frames shown: on a constant-rate video each is on screen at its lattice time, inside the segment
    starts = np.arange(int(np.ceil(duration * NATIVE_FPS))) / NATIVE_FPS   # the last frame reaches the end
    shown = starts[frames_at(starts, times)]
    assert np.all(shown <= times) and np.all(times - shown < 1 / NATIVE_FPS)
    # the speed option: the same counts onto F1's frames never give a segment more
    f1 = starts[uniform_frames(starts, duration, R1, max_frames=max_frames, rule="backbone")]
    fast = rgr_positions(segments, max_frames, f1)
    fast_held = held_per_segment(f1[fast.positions], segments)
    assert all(h <= w for h, w in zip(fast_held, want)) and fast.lost == sum(want) - sum(fast_held) >= 0
