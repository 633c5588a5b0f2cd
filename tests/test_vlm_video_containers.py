"""Containers whose timestamps cannot place decoded pictures, several video streams, and bad arguments."""

import logging

import numpy as np
import pytest
from cader.vlm.video import VideoReader
from conftest import sequential_decode, write_coded_video

H264_BFRAMES = ("libx264", {"g": "24", "bf": "2", "preset": "veryfast"})


@pytest.fixture(scope="module")
def avi_h264(tmp_path_factory):
    """H.264 with B-frames in AVI: the decoded pictures carry decode-order timestamps (1, 3, 4, 2, 6, 7, 5, ...)."""
    path = tmp_path_factory.mktemp("avi") / "h264_bframes.avi"
    write_coded_video(path, *H264_BFRAMES)
    return path, sequential_decode(path)


def test_a_container_without_presentation_times_is_decoded_sequentially(avi_h264):
    path, truth = avi_h264
    reader = VideoReader(path, decode_workers=2)
    assert not reader.planned
    for indices in (np.array([1, 3, 13, 100]), np.arange(0, 240, 5), np.array([239])):
        assert np.array_equal(reader.decode_indices(indices).frames, truth[indices])


def test_timestamps_out_of_display_order_make_the_plan_give_way(avi_h264, caplog):
    # The safety net behind the container list: forced onto the planned path, the same file is caught by the check
    # that decoded pictures step through the frame table one frame at a time, and the reader falls back.
    path, truth = avi_h264
    reader = VideoReader(path, decode_workers=1)
    reader.planned = True
    indices = np.array([1, 3, 13, 100])
    with caplog.at_level(logging.WARNING):
        assert np.array_equal(reader.decode_indices(indices).frames, truth[indices])
    assert not reader.planned
    assert any("not in display order" in r.getMessage() for r in caplog.records)


def test_the_main_video_stream_is_read_not_a_preview_track(tmp_path):
    import av

    path = tmp_path / "two_tracks.mkv"
    with av.open(str(path), "w") as container:
        preview = container.add_stream("libx264", rate=1)
        preview.width, preview.height, preview.pix_fmt = 32, 32, "yuv420p"
        main = container.add_stream("libx264", rate=24)
        main.width, main.height, main.pix_fmt = 64, 48, "yuv420p"
        main.options = H264_BFRAMES[1]
        for k in range(120):
            if k % 24 == 0 and k < 72:
                grey = av.VideoFrame.from_ndarray(np.full((32, 32, 3), 128, np.uint8), format="rgb24")
                for packet in preview.encode(grey):
                    container.mux(packet)
            img = np.zeros((48, 64, 3), np.uint8)
            img[:, : (k % 64)] = (7 * k) % 256
            for packet in main.encode(av.VideoFrame.from_ndarray(img, format="rgb24")):
                container.mux(packet)
        for stream in (preview, main):
            for packet in stream.encode():
                container.mux(packet)
    truth = sequential_decode(path)
    assert truth.shape == (120, 48, 64, 3)  # the best stream is the main one
    reader = VideoReader(path)
    indices = np.array([0, 2, 100])
    assert np.array_equal(reader.decode_indices(indices).frames, truth[indices])


def test_a_first_picture_without_a_timestamp_counts_as_frame_zero(tmp_path):
    """An MPEG-TS whose first video PES header lost its PTS/DTS: planning by timestamps would call picture 1
    frame 0; the reader decodes such a video sequentially, and decord's garbage first row is not a frame time."""
    src, path = tmp_path / "src.ts", tmp_path / "first_without_pts.ts"
    write_coded_video(src, *H264_BFRAMES, n_frames=120)
    data = bytearray(src.read_bytes())
    for offset in range(0, len(data), 188):  # find the first TS packet that starts a video PES
        packet = data[offset:offset + 188]
        adaptation = (packet[3] >> 4) & 3
        start = 4 + (1 + packet[4] if adaptation & 2 else 0)
        if packet[1] & 0x40 and packet[start:start + 4] == b"\x00\x00\x01\xe0":
            flags = packet[start + 7]
            data[offset + start + 7] = flags & 0x3F  # clear the PTS and DTS flags ...
            stamp_bytes = {2: 5, 3: 10}.get(flags >> 6, 0)
            data[offset + start + 9:offset + start + 9 + stamp_bytes] = b"\xff" * stamp_bytes  # ... and stuff them
            break
    path.write_bytes(bytes(data))
    truth = sequential_decode(path)
    reader = VideoReader(path)
    assert reader.num_frames == len(truth) == 120 and not reader.planned
    assert not reader.frame_table.variable_rate and reader.frame_table.hidden == 0
    indices = np.arange(0, 120, 4)
    assert np.array_equal(reader.decode_indices(indices).frames, truth[indices])


@pytest.mark.parametrize("indices", [[50, 10], [10, 10], [-1, 5], [5, 240]])
def test_bad_indices_are_a_caller_error_and_leave_the_plan_on(avi_h264, tmp_path, indices):
    path = tmp_path / "h264.mp4"
    write_coded_video(path, *H264_BFRAMES)
    reader = VideoReader(path)
    with pytest.raises(ValueError, match="sorted, unique"):
        reader.decode_indices(np.array(indices))
    assert reader.planned


def test_an_empty_decode_has_the_shape_of_a_full_one(tmp_path):
    path = tmp_path / "h264.mp4"
    write_coded_video(path, *H264_BFRAMES, n_frames=24)
    reader = VideoReader(path)
    for max_pixels in (None, 32 * 32):
        empty, one = reader.decode_indices(np.array([], int), max_pixels), reader.decode_indices([3], max_pixels)
        assert empty.frames.shape[1:] == one.frames.shape[1:]
