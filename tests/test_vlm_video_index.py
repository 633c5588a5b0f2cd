"""The index of videos decord cannot read (AV1, WebM/MKV written live without cues) comes from a PyAV demux."""

import numpy as np
import pytest
from cader.vlm.video import VideoReader
from cader.vlm.video_index import decord_index, pyav_index
from conftest import sequential_decode, write_coded_video


def test_pyav_index_matches_decords_on_a_file_both_read(tmp_path):
    path = tmp_path / "h264.mp4"
    write_coded_video(path, "libx264", {"g": "24", "bf": "2", "preset": "veryfast"}, n_frames=120)
    ours, decords = pyav_index(path), decord_index(path)
    assert ours.num_frames == decords.num_frames == 120
    assert ours.fps == pytest.approx(decords.fps)
    np.testing.assert_array_equal(ours.key_indices, decords.key_indices)
    np.testing.assert_allclose(ours.frame_times, decords.frame_times, atol=1e-4)


def test_an_av1_video_decord_cannot_open_is_read_exactly(tmp_path):
    path = tmp_path / "av1.mkv"
    write_coded_video(path, "libsvtav1", {"g": "24", "preset": "12"}, n_frames=96)
    from decord._ffi.base import DECORDError

    with pytest.raises(DECORDError):
        decord_index(path)  # decord's FFmpeg has no AV1 decoder
    truth = sequential_decode(path)
    reader = VideoReader(path, decode_workers=2)
    assert reader.index.source == "pyav" and reader.num_frames == len(truth) == 96 and reader.planned
    indices = np.array([0, 5, 47, 48, 95])
    assert np.array_equal(reader.decode_indices(indices).frames, truth[indices])
    np.testing.assert_allclose(reader.decode_indices(indices).timestamps, indices / 24)


def test_a_live_recording_without_cues_is_read_exactly(tmp_path):
    """WebM as a browser's MediaRecorder writes it: a live stream, no cues and no duration in the header."""
    path = tmp_path / "live.webm"
    write_coded_video(path, "libvpx-vp9", {"g": "30", "deadline": "realtime", "cpu-used": "8"}, 90, rate=30,
                      container_options={"live": "1"})
    truth = sequential_decode(path)
    reader = VideoReader(path)
    assert reader.index.source == "pyav" and reader.num_frames == len(truth) == 90
    assert reader.duration == pytest.approx(3.0, abs=0.05)
    sample = reader.sample_uniform(2.0)
    assert len(sample) == 6 and np.array_equal(sample.frames, truth[sample.indices])


def test_a_file_neither_can_read_names_both_reasons(tmp_path):
    from cader.vlm.video import VideoReadError

    path = tmp_path / "junk.mp4"
    path.write_bytes(b"\x00" * 4096)
    with pytest.raises(VideoReadError, match="junk.mp4.*PyAV"):
        VideoReader(path)


def test_the_barcode_video_is_indexed_by_decord(barcode_video):
    assert VideoReader(barcode_video).index.source == "decord"
