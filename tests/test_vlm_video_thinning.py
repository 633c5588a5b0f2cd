"""Pictures nobody wants and nothing references are dropped undecoded (H.264, HEVC); the frames stay exact."""

import numpy as np
import pytest
from cader.vlm.video import THINNABLE_CODECS, VideoReader, steps_on
from conftest import sequential_decode, write_coded_video

# B-frames that no picture references: x264's and x265's non-reference B-frames between references.
THINNABLE = {
    "h264_bframes.mp4": ("libx264", {"g": "48", "bf": "3", "preset": "veryfast"}),
    "h264_open_gop.mkv": ("libx264", {"g": "48", "bf": "3", "x264-params": "open-gop=1:keyint=48"}),
    "h264_bframes.ts": ("libx264", {"g": "48", "bf": "3", "preset": "veryfast"}),
    "hevc_bframes.mp4": ("libx265", {"g": "48", "bf": "3", "x265-params": "log-level=0"}),
}


@pytest.fixture(scope="module", params=sorted(THINNABLE))
def thinnable_video(request, tmp_path_factory):
    path = tmp_path_factory.mktemp("thinning") / request.param
    write_coded_video(path, *THINNABLE[request.param])
    return path, sequential_decode(path)


def count_pictures(monkeypatch) -> list:
    """Record every picture the decoders hand to the reader."""
    seen = []
    original = VideoReader._pictures

    def counting(self, *args):
        for picture in original(self, *args):
            seen.append(picture.pts)
            yield picture

    monkeypatch.setattr(VideoReader, "_pictures", counting)
    return seen


@pytest.mark.parametrize("workers", [1, 3])
def test_dropping_unwanted_unreferenced_pictures_keeps_every_frame_exact(thinnable_video, workers):
    path, truth = thinnable_video
    for indices in (np.arange(5, 240, 30), np.arange(3, 240, 7), np.array([0, 47, 48, 49, 239]), np.arange(240)):
        thinned = VideoReader(path, decode_workers=workers)
        assert thinned.planned
        assert np.array_equal(thinned._scan(indices), truth[indices])  # the planned path itself, no fallback
        assert np.array_equal(thinned.decode_indices(indices, max_pixels=32 * 32).frames,
                              VideoReader(path, skip_unwanted=False).decode_indices(indices, 32 * 32).frames)


def test_at_one_frame_in_thirty_the_decoder_skips_pictures(thinnable_video, monkeypatch):
    path, truth = thinnable_video
    seen = count_pictures(monkeypatch)
    indices = np.arange(15, 240, 30)
    VideoReader(path, decode_workers=1, skip_unwanted=False).decode_indices(indices)
    every = len(seen)
    seen.clear()
    frames = VideoReader(path, decode_workers=1).decode_indices(indices)
    assert np.array_equal(frames.frames, truth[indices])
    assert len(seen) < 0.8 * every  # the first keyframe interval is decoded whole, the others thinned


def test_only_decoders_that_honour_the_setting_per_packet_are_thinned():
    assert THINNABLE_CODECS == {"h264", "hevc"}


def test_a_gap_in_the_pictures_is_allowed_only_over_droppable_frames():
    assert steps_on(4, 5, set())
    assert steps_on(4, 7, {5, 6}) and steps_on(4, 7, {5, 6, 9})
    assert not steps_on(4, 7, {5}) and not steps_on(4, 7, set())
    assert not steps_on(4, 3, {3}) and not steps_on(4, 4, {4}) and not steps_on(4, -1, {5})
