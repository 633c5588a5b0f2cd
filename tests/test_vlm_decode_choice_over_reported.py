"""A container that lists more frames than its stream decodes (decord's get_batch hangs on such files, decord #373):
the index, the plan and the decoded count agree, or the video is flagged and counted, and nothing hangs."""

from pathlib import Path

import numpy as np
import pytest
from cader.vlm.video import FRAME_COUNT_OVER_REPORTED, FrameCountMismatch, VideoReader, flag_counts
from cader.vlm.video_index import decord_index, pyav_index
from conftest import read_barcode

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "over_reported" / "trimmed_by_edit_list.mp4"
DECODABLE = 45  # the edit list shows 4.5 s at 10 fps; 49 packets are stored up to the next keyframe (PROVENANCE.md)


def test_decords_index_over_reports_and_pyavs_agrees_with_the_stream():
    assert decord_index(FIXTURE).num_frames == 49  # the file is what the test needs: an index that over-reports
    index = pyav_index(FIXTURE)
    assert index.num_frames == DECODABLE and index.frame_times[-1, 1] == pytest.approx(DECODABLE / 10)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("decode_path", ["auto", "planned", "sequential"])
def test_sampling_flags_the_video_trims_it_to_the_stream_and_returns_real_frames(decode_path):
    before = flag_counts().get(FRAME_COUNT_OVER_REPORTED, 0)
    reader = VideoReader(FIXTURE, decode_workers=2, decode_path=decode_path)
    assert reader.num_frames == 49 and not reader.flags
    frames = reader.sample_uniform(2.0)  # 2 fps over the listed 4.9 s asks for frame 46, which never decodes
    assert reader.flags == [FRAME_COUNT_OVER_REPORTED]
    assert reader.num_frames == DECODABLE and reader.duration == pytest.approx(4.5)
    assert max(reader.stream_facts.key_indices) < DECODABLE
    assert list(frames.indices) == list(range(2, 45, 5))  # 2 fps over the 4.5 s the stream has
    assert [read_barcode(f) for f in frames.frames] == list(frames.indices)
    assert flag_counts()[FRAME_COUNT_OVER_REPORTED] == before + 1
    again = reader.sample_count(10)  # the table agrees with the stream now: nothing more to flag
    assert [read_barcode(f) for f in again.frames] == list(again.indices) and again.indices[-1] < DECODABLE
    assert reader.flags == [FRAME_COUNT_OVER_REPORTED] and flag_counts()[FRAME_COUNT_OVER_REPORTED] == before + 1


@pytest.mark.timeout(120)
def test_asking_for_a_frame_past_the_stream_raises_a_clear_error_naming_both_counts():
    reader = VideoReader(FIXTURE, decode_workers=2)
    with pytest.raises(FrameCountMismatch, match=r"video_unreadable: .*trimmed_by_edit_list.mp4: "
                                                 r"frame_count_over_reported: the index lists 49 frames, the stream "
                                                 r"ends after 45; frame 47 was asked for"):
        reader.decode_indices(np.array([2, 47]))
    assert reader.num_frames == DECODABLE and reader.planned  # the plan is kept: it failed for want of frames
    frames = reader.decode_indices(np.array([2, 44]))
    assert [read_barcode(f) for f in frames.frames] == [2, 44]
