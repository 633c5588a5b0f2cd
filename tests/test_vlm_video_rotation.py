"""Rotated video (a phone held upright stores landscape pictures plus a display rotation): frames come back upright."""

import numpy as np
import pytest
from cader.vlm.video import VideoReader, VideoReadError, resize_frames

N_FRAMES = 96


def write_rotated_video(path, degrees):
    import av

    with av.open(str(path), "w") as container:
        stream = container.add_stream("libx264", rate=24)
        stream.width, stream.height, stream.pix_fmt = 64, 48, "yuv420p"
        stream.options = {"g": "24", "bf": "2", "preset": "veryfast"}
        stream.set_display_rotation(degrees)  # counter-clockwise, as PyAV reads it back
        for k in range(N_FRAMES):
            img = np.zeros((48, 64, 3), np.uint8)
            img[:16, :24] = 255  # a white block in the top-left corner of the stored picture: shows the turn
            img[24:, :, 2] = (9 * k) % 256  # and which frame it is
            for packet in stream.encode(av.VideoFrame.from_ndarray(img, format="rgb24")):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)


@pytest.fixture(scope="module", params=[90, 180, -90])
def rotated_video(request, tmp_path_factory):
    """(path, counter-clockwise degrees, every frame as stored, in presentation order)."""
    import av

    path = tmp_path_factory.mktemp("rotated") / f"rot{request.param}.mp4"
    write_rotated_video(path, request.param)
    with av.open(str(path)) as container:
        stored = np.stack([f.to_ndarray(format="rgb24") for f in container.decode(container.streams.video[0])])
    return path, request.param, stored


@pytest.mark.parametrize("workers", [1, 3])
def test_frames_come_back_as_a_player_shows_them(rotated_video, workers):
    path, degrees, stored = rotated_video
    reader = VideoReader(path, decode_workers=workers)
    upright = np.rot90(stored, k=degrees // 90, axes=(1, 2))
    assert (reader.height, reader.width) == upright.shape[1:3]
    assert reader.rotation == degrees % 360
    indices = np.array([0, 5, 30, 31, 95])
    frames = reader.decode_indices(indices).frames
    assert np.array_equal(frames, upright[indices])
    # the hand-checkable corner: a quarter turn counter-clockwise moves the stored top-left block to the bottom-left
    corner = {90: frames[0, -1, 0], 180: frames[0, -1, -1], 270: frames[0, 0, -1]}[degrees % 360]
    assert corner.min() > 200


def test_the_pixel_budget_applies_to_the_upright_picture(rotated_video):
    path, degrees, stored = rotated_video
    sample = VideoReader(path).sample_uniform(2.0, max_pixels=32 * 64)
    upright = np.rot90(stored[sample.indices], k=degrees // 90, axes=(1, 2))
    assert np.array_equal(sample.frames, resize_frames(np.ascontiguousarray(upright), 32 * 64))
    assert sample.frames.shape[1] * sample.frames.shape[2] <= 32 * 64


def test_the_sequential_fallback_turns_frames_upright_too(rotated_video, monkeypatch):
    path, degrees, stored = rotated_video
    reader = VideoReader(path)

    def broken_scan(indices, max_pixels=None):
        raise VideoReadError(reader.path, "frames [5] not found while scanning")

    monkeypatch.setattr(reader, "_scan", broken_scan)
    frames = reader.decode_indices(np.array([5, 60])).frames
    assert np.array_equal(frames, np.rot90(stored[[5, 60]], k=degrees // 90, axes=(1, 2)))
