import numpy as np
import pytest
from cader.vlm.decode_plan import GopJob, group_by_keyframe, split_balanced


def test_one_job_per_keyframe_interval_that_holds_wanted_frames():
    # keyframes every 48 frames; 1 fps centred bins at 24 fps -> frames 12, 36, 60, 84, 108
    jobs = group_by_keyframe([12, 36, 60, 84, 108], [0, 48, 96, 144])
    assert jobs == [GopJob(0, (12, 36)), GopJob(48, (60, 84)), GopJob(96, (108,))]
    # from each keyframe through the last wanted frame: 37 + 37 + 13; frames 37-47 and 85-95 are never decoded
    assert [job.frames_to_decode for job in jobs] == [37, 37, 13]


def test_intervals_without_wanted_frames_are_skipped_and_frame_zero_is_a_start():
    jobs = group_by_keyframe([5, 400], [100, 300, 500])  # no keyframe listed at 0
    assert jobs == [GopJob(0, (5,)), GopJob(300, (400,))]
    assert [job.frames_to_decode for job in jobs] == [6, 101]


def test_a_wanted_keyframe_starts_its_own_interval():
    assert group_by_keyframe([47, 48], [0, 48]) == [GopJob(0, (47,)), GopJob(48, (48,))]


def test_unsorted_or_repeated_indices_are_refused():
    with pytest.raises(ValueError):
        group_by_keyframe([5, 3], [0])
    with pytest.raises(ValueError):
        group_by_keyframe([3, 3], [0])
    assert group_by_keyframe([], [0]) == []


def jobs_of(work):
    """Jobs whose frames_to_decode are the given numbers (keyframes 1000 apart)."""
    return [GopJob(1000 * k, (1000 * k + w - 1,)) for k, w in enumerate(work)]


def loads(runs):
    return [sum(job.frames_to_decode for job in run) for run in runs]


def test_split_is_contiguous_and_balanced():
    assert loads(split_balanced(jobs_of([10, 10, 10, 10]), 2)) == [20, 20]
    # greedy on "reached the share" would give [30, 10]; closing before an overshoot gives [15, 25]
    assert loads(split_balanced(jobs_of([15, 15, 10]), 2)) == [15, 25]
    # one long job does not starve the others: it runs alone, the rest share what is left
    assert loads(split_balanced(jobs_of([100, 1, 1, 1]), 2)) == [100, 3]
    assert loads(split_balanced(jobs_of([5, 5, 5, 5, 5, 5]), 3)) == [10, 10, 10]


def test_split_never_exceeds_workers_or_jobs_and_keeps_every_job_in_order():
    rng = np.random.default_rng(0)
    for _ in range(200):
        jobs = jobs_of(rng.integers(1, 60, size=rng.integers(1, 40)).tolist())
        workers = int(rng.integers(1, 9))
        runs = split_balanced(jobs, workers)
        assert 1 <= len(runs) <= min(workers, len(jobs))
        assert [job for run in runs for job in run] == jobs
        assert all(run for run in runs)


def test_split_rejects_zero_workers_and_handles_no_jobs():
    with pytest.raises(ValueError):
        split_balanced(jobs_of([1]), 0)
    assert split_balanced([], 4) == []
