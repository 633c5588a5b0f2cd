"""Decode choice per video: the cost model (hand-computed), the same frames on either path, one swscale thread."""

from typing import ClassVar

import numpy as np
import pytest
from cader.vlm.decode_plan import DecodeCost, StreamFacts, choose_decode, decode_costs
from cader.vlm.video import VideoReader
from conftest import sequential_decode, write_coded_video

CONSTANTS = {"seek_cost": 10.0, "nonref_share": 0.5, "thread_overhead": 0.2}


def facts(key_every: int, n_keys: int = 100, droppable: bool = False, seekable: bool = True) -> StreamFacts:
    return StreamFacts(tuple(range(0, key_every * n_keys, key_every)), droppable, seekable)


def test_sparse_sampling_on_two_second_keyframes_plans():
    # 30 fps, 1 fps centred bins, a keyframe every 60 frames: jobs (0: 15, 45) and (60: 75, 105), 46 pictures each
    cost = decode_costs([15, 45, 75, 105], facts(60), workers=1, **CONSTANTS)
    assert cost == DecodeCost(planned=46 + 10 + 46 + 10, sequential=106 * 1.2)
    assert cost.cheaper == "planned"


def test_droppable_pictures_are_dropped_in_every_job_but_a_decoders_first():
    # the second job has 46 - 2 = 44 unwanted pictures, half of them dropped: 46 - 22 + 10
    cost = decode_costs([15, 45, 75, 105], facts(60, droppable=True), workers=1, **CONSTANTS)
    assert cost.planned == pytest.approx(56 + 34)
    # on two decoders each job is its decoder's first: nothing dropped
    assert decode_costs([15, 45, 75, 105], facts(60, droppable=True), workers=2, **CONSTANTS).planned == 112


def test_a_dense_window_at_the_start_of_short_keyframe_intervals_decodes_sequentially():
    # every frame of 0-59, keyframes every 30: two jobs of 30 pictures plus two seeks (80) against 60 * 1.2 = 72
    cost = decode_costs(np.arange(60), facts(30), workers=1, **CONSTANTS)
    assert cost == DecodeCost(80.0, 72.0) and cost.cheaper == "sequential"
    # the same window later in the video: a sequential decode must run from the start of the stream
    later = decode_costs(np.arange(600, 660), facts(30), workers=1, **CONSTANTS)
    assert later == DecodeCost(80.0, 660 * 1.2) and later.cheaper == "planned"


def test_long_keyframe_intervals_without_droppable_pictures_can_go_either_way():
    # one wanted frame per 10-s interval near its end: the plan saves only the tails and pays a seek each
    tails = decode_costs([290, 590, 890], facts(300), workers=1, **CONSTANTS)
    assert tails == DecodeCost(3 * (291 + 10), 891 * 1.2) and tails.cheaper == "planned"
    dense_end = decode_costs(np.arange(0, 900, 2), facts(300), workers=1, seek_cost=100.0, nonref_share=0.5,
                             thread_overhead=0.0)
    assert dense_end.planned == 3 * (299 + 100) and dense_end.cheaper == "sequential"


def test_a_video_that_cannot_seek_has_only_the_sequential_path_and_nothing_costs_nothing():
    cost = decode_costs([15, 45], facts(60, seekable=False), workers=2, **CONSTANTS)
    assert cost.planned == float("inf") and cost.cheaper == "sequential"
    assert decode_costs([], facts(60), workers=2) == DecodeCost(0.0, 0.0)
    assert choose_decode([], facts(60), workers=2) == "planned"  # a tie keeps the plan


@pytest.fixture(scope="module", params=["b_frames", "no_b_frames", "miniature"])
def small_video(request, tmp_path_factory):
    """(path, every frame, whether it has B-frames): x264 High with 3 B-frames, x264 Constrained Baseline (both
    64x48, 240 frames, a keyframe every 48), and a video of the miniature's synthetic data set."""
    folder = tmp_path_factory.mktemp(request.param)
    path = folder / "video.mp4"
    if request.param == "miniature":
        from cader.dev.synthetic.media import VideoSpec, write_video

        write_video(VideoSpec("v", duration=30.0, fps=8, t_s=10.0, t_e=14.0, colour="red", scene_s=6.0,
                              scene_e=20.0), path)
    else:
        options = {"g": "48", "bf": "3"} if request.param == "b_frames" else {"g": "48", "profile": "baseline"}
        write_coded_video(path, "libx264", options)
    truth = sequential_decode(path)
    return path, truth, request.param == "b_frames"


def test_the_index_tells_b_frames_apart(small_video):
    path, _, b_frames = small_video
    reader = VideoReader(path, decode_workers=2)
    if b_frames:
        assert reader.reorders and reader.stream_facts.droppable
    elif "no_b_frames" in str(path):
        assert not reader.reorders and not reader.stream_facts.droppable
    assert VideoReader(path, skip_unwanted=False).stream_facts.droppable is False


@pytest.mark.parametrize("workers", [1, 3])
def test_both_paths_return_the_frames_of_one_sequential_decode(small_video, workers):
    path, truth, _ = small_video
    planned = VideoReader(path, decode_workers=workers, decode_path="planned")
    sequential = VideoReader(path, decode_workers=workers, decode_path="sequential")
    chosen = VideoReader(path, decode_workers=workers)
    n = len(truth)
    for indices in (np.arange(5, n, 30), np.arange(3, n, 7), np.array([0, 47, 48, 49, n - 1]), np.arange(n)):
        a, b = planned.decode_indices(indices).frames, sequential.decode_indices(indices).frames
        assert np.array_equal(a, truth[indices]) and np.array_equal(b, truth[indices])
        assert np.array_equal(chosen.decode_indices(indices, 32 * 32).frames,
                              planned.decode_indices(indices, 32 * 32).frames)
    assert set(planned.paths_taken) == {"planned"} and set(sequential.paths_taken) == {"sequential"}


def test_auto_takes_the_path_the_chooser_names(small_video, monkeypatch):
    path, truth, _ = small_video
    reader = VideoReader(path, decode_workers=2)
    indices = np.arange(0, 40)  # a dense window at the start: sequential where there is nothing to drop
    expected = choose_decode(indices, reader.stream_facts, 2)
    assert reader.path_for(indices) == expected
    assert np.array_equal(reader.decode_indices(indices).frames, truth[indices])
    assert set(reader.paths_taken) == {expected}
    for forced in ("planned", "sequential"):
        assert VideoReader(path, decode_path=forced).path_for(indices) == forced
    with pytest.raises(ValueError, match="decode_path"):
        VideoReader(path, decode_path="fastest")


def test_a_video_that_cannot_be_planned_is_decoded_sequentially_even_when_planned_is_asked(tmp_path):
    path = tmp_path / "v.avi"
    write_coded_video(path, "mpeg4", {"bf": "2", "g": "24"})
    reader = VideoReader(path, decode_workers=2, decode_path="planned")
    assert not reader.planned and reader.path_for(np.array([3, 50])) == "sequential"
    assert np.array_equal(reader.decode_indices(np.array([3, 50])).frames, sequential_decode(path)[[3, 50]])


class RecordingReformatter:
    """A swscale converter that records the keyword arguments of every conversion."""

    calls: ClassVar[list[dict]] = []

    def reformat(self, frame, **kwargs):
        RecordingReformatter.calls.append(kwargs)
        return self.real.reformat(frame, **kwargs)


@pytest.mark.parametrize("decode_path", ["planned", "sequential"])
def test_every_conversion_runs_on_one_swscale_thread(small_video, decode_path, monkeypatch):
    import av
    import av.video.reformatter

    path, truth, _ = small_video
    RecordingReformatter.calls = []
    real = av.video.reformatter.VideoReformatter
    monkeypatch.setattr(RecordingReformatter, "__init__", lambda self: setattr(self, "real", real()))
    monkeypatch.setattr(av.video.reformatter, "VideoReformatter", RecordingReformatter)
    indices = np.arange(3, len(truth), 20)
    frames = VideoReader(path, decode_workers=3, decode_path=decode_path).decode_indices(indices).frames
    assert np.array_equal(frames, truth[indices])
    assert len(RecordingReformatter.calls) == len(indices)
    if int(av.__version__.split(".")[0]) >= 17:  # PyAV 17 converts on every core unless told (PyAV PR #2187)
        assert all(call.get("threads") == 1 for call in RecordingReformatter.calls)
