"""An MP4 cut without re-encoding (`ffmpeg -ss ... -c copy`): the frames before the cut are hidden by an edit list."""

import logging

import numpy as np
import pytest
from cader.vlm.video import VideoReader, VideoReadError
from conftest import read_barcode, write_barcode_video

HIDDEN = 10  # frames between the keyframe the copy starts from and the cut


@pytest.fixture(scope="module")
def cut_video(tmp_path_factory):
    """Frames 0-119 of a barcode video, remuxed so that frames 0-9 fall before time 0: the MP4 muxer writes an edit
    list that starts the video at frame 10, as a stream-copy cut does."""
    import av

    folder = tmp_path_factory.mktemp("cut")
    write_barcode_video(folder / "source.mp4", n_frames=120, fps=24)
    with av.open(str(folder / "source.mp4")) as source, av.open(str(folder / "cut.mp4"), "w") as cut:
        stream = source.streams.video[0]
        out = cut.add_stream_from_template(stream)
        shift = round(HIDDEN / 24 / stream.time_base)
        for packet in source.demux(stream):
            if packet.dts is None:  # the demuxer's final flush packet
                continue
            packet.pts, packet.dts, packet.stream = packet.pts - shift, packet.dts - shift, out
            cut.mux(packet)
    return folder / "cut.mp4"


def test_hidden_frames_are_not_frames_of_the_video(cut_video):
    reader = VideoReader(cut_video)
    assert reader.frame_table.hidden == HIDDEN
    assert reader.num_frames == 120 - HIDDEN
    assert reader.duration == pytest.approx((120 - HIDDEN) / 24)


@pytest.mark.parametrize("workers", [1, 3])
def test_frame_i_is_the_ith_frame_shown(cut_video, workers, caplog):
    reader = VideoReader(cut_video, decode_workers=workers)
    with caplog.at_level(logging.WARNING):
        for indices in (np.array([0, 1, 50, 109]), np.arange(0, 110, 7), np.arange(110)):
            frames = reader.decode_indices(indices).frames
            assert [read_barcode(f) for f in frames] == list(indices + HIDDEN)
    assert not [r for r in caplog.records if "decord" in r.getMessage()]


def test_times_count_from_the_cut(cut_video):
    sample = VideoReader(cut_video).sample_uniform(1.0)
    # floor(110/24 s * 1 fps) = 4 frames at the centres of 4 bins of 1.146 s: 0.573, 1.719, 2.865, 4.010 s
    assert list(sample.indices) == [13, 41, 68, 96]
    np.testing.assert_allclose(sample.timestamps, sample.indices / 24)
    assert [read_barcode(f) for f in sample.frames] == [23, 51, 78, 106]


def test_the_sequential_fallback_counts_only_the_frames_shown(cut_video, monkeypatch):
    reader = VideoReader(cut_video)

    def broken_scan(indices, max_pixels=None):
        raise VideoReadError(reader.path, "frames [5] not found while scanning")

    monkeypatch.setattr(reader, "_scan", broken_scan)
    frames = reader.decode_indices(np.array([0, 5, 109])).frames
    assert [read_barcode(f) for f in frames] == [HIDDEN, 5 + HIDDEN, 109 + HIDDEN]
