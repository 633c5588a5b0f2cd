import os
import threading

import numpy as np
import pytest
from cader.vlm.video import VideoReader, VideoReadError
from conftest import read_barcode, sequential_decode, write_barcode_video, write_coded_video


@pytest.fixture(scope="module")
def reader(barcode_video):
    return VideoReader(barcode_video)


def test_metadata(reader):
    assert reader.num_frames == 600 and reader.native_fps == pytest.approx(10.0)
    assert reader.duration == pytest.approx(60.0)
    assert (reader.height, reader.width) == (48, 64)


def test_uniform_sampling_indices_and_timestamps_are_exact(reader):
    frames = reader.sample_uniform(1.0)
    assert len(frames) == 60
    # centred bins: t = k + 0.5 -> frame floor(10 t) = 10 k + 5
    assert list(frames.indices) == [10 * k + 5 for k in range(60)]
    np.testing.assert_allclose(frames.timestamps, frames.indices / 10.0)
    decoded = [read_barcode(f) for f in frames.frames]
    assert decoded == list(frames.indices)


def test_window_sampling(reader):
    frames = reader.sample_uniform(2.0, start=20.0, end=30.0)
    assert len(frames) == 20
    assert frames.timestamps.min() >= 20.0 and frames.timestamps.max() < 30.0
    assert [read_barcode(f) for f in frames.frames] == list(frames.indices)


def test_short_window_still_gives_a_frame(reader):
    frames = reader.sample_uniform(0.5, start=10.0, end=11.0)
    assert len(frames) == 1 and 100 <= frames.indices[0] < 110


def test_max_frames_cap_keeps_the_whole_timeline(reader):
    frames = reader.sample_uniform(10.0, max_frames=16)
    assert len(frames) == 16
    assert frames.timestamps[0] < 1.0 and frames.timestamps[-1] > 59.0


def test_fps_map_counts_per_segment(reader):
    segments = [(0.0, 20.0, 0.5), (20.0, 30.0, 4.0), (30.0, 60.0, 1.0)]
    frames = reader.sample_fps_map(segments)
    t = frames.timestamps
    assert np.sum(t < 20) == 10 and np.sum((t >= 20) & (t < 30)) == 40 and np.sum(t >= 30) == 30
    assert np.all(np.diff(t) > 0)
    assert [read_barcode(f) for f in frames.frames] == list(frames.indices)


def test_pixel_budget(reader):
    frames = reader.sample_uniform(1.0, max_pixels=32 * 32)
    assert frames.frames.shape[1:] == (32, 32, 3)
    frames = reader.sample_uniform(1.0, max_pixels=65_536)
    h, w = frames.frames.shape[1:3]
    assert h * w <= 65_536 and h % 32 == 0 and w % 32 == 0


def test_reader_reused_across_threads(reader):
    results = []

    def work(start):
        f = reader.sample_uniform(1.0, start=start, end=start + 5)
        results.append([read_barcode(x) for x in f.frames] == list(f.indices))

    threads = [threading.Thread(target=work, args=(s,)) for s in (0, 10, 20, 30)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    assert results == [True] * 4


def test_metadata_for_processor(reader):
    frames = reader.sample_uniform(1.0, start=0, end=4)
    meta = frames.metadata()
    assert meta["fps"] == pytest.approx(10.0) and meta["frames_indices"] == [5, 15, 25, 35]


@pytest.mark.parametrize("kind", ["missing", "empty", "garbage", "truncated", "zero_frames"])
def test_bad_files_raise_one_clear_error(tmp_path, barcode_video, kind):
    path = tmp_path / f"{kind}.mp4"
    if kind == "empty":
        path.write_bytes(b"")
    elif kind == "garbage":
        path.write_bytes(b"\x00not a video at all" * 100)
    elif kind == "truncated":
        path.write_bytes(barcode_video.read_bytes()[:300])
    elif kind == "zero_frames":
        write_barcode_video(path, n_frames=0, fps=10)
    with pytest.raises(VideoReadError) as err:
        VideoReader(path).sample_uniform(1.0)
    assert str(path) in str(err.value)


# (file name, encoder, options): B-frames, open GOPs, hidden alt-ref frames, and containers whose timestamps or
# keyframe index decord gets wrong (AVI with B-frames numbers frames from 1; decord's keys are off in both).
CODECS = {
    "h264_bframes.mp4": ("libx264", {"g": "48", "bf": "3", "preset": "veryfast"}),
    "h264_open_gop.mp4": ("libx264", {"g": "48", "bf": "3", "x264-params": "open-gop=1:keyint=48"}),
    "hevc_bframes.mkv": ("libx265", {"g": "48", "bf": "3", "x265-params": "log-level=0"}),
    "vp9_altref.webm": ("libvpx-vp9", {"g": "48", "auto-alt-ref": "1", "lag-in-frames": "16"}),
    "mpeg4_bframes.avi": ("mpeg4", {"g": "48", "bf": "2"}),
    # MPEG-TS has no index: seeks land up to a keyframe interval late, and decord's times count from start_time
    "h264_bframes.ts": ("libx264", {"g": "48", "bf": "3", "preset": "veryfast"}),
    "h264_bframes.mov": ("libx264", {"g": "48", "bf": "3", "preset": "veryfast"}),
}


@pytest.fixture(scope="module", params=sorted(CODECS))
def coded_video(request, tmp_path_factory):
    path = tmp_path_factory.mktemp("codecs") / request.param
    write_coded_video(path, *CODECS[request.param])
    return path, sequential_decode(path)


@pytest.mark.parametrize("workers", [1, 3])
def test_planned_decode_returns_the_frames_a_sequential_decode_gives(coded_video, workers):
    path, truth = coded_video
    reader = VideoReader(path, decode_workers=workers)
    assert reader.num_frames == len(truth) == 240
    assert reader.planned == (path.suffix != ".avi")  # AVI stores no presentation times: decoded sequentially
    for indices in (np.arange(5, 240, 7), np.array([3, 200]), np.array([0, 47, 48, 49, 239]), np.arange(240)):
        assert np.array_equal(reader._scan(indices), truth[indices])  # the planned path itself, no fallback
        assert np.array_equal(reader.decode_indices(indices).frames, truth[indices])


def test_mpeg_ps_decodes_sequentially_and_exactly(tmp_path):
    # MPEG-2 in an MPEG program stream: its timestamps run frames ahead after a seek, decord's times are garbage and
    # decord's get_batch returned 1 of these 34 frames right.
    path = tmp_path / "mpeg2_bframes.mpg"
    write_coded_video(path, "mpeg2video", {"g": "12", "bf": "2"})
    truth = sequential_decode(path)
    reader = VideoReader(path, decode_workers=2)
    indices = np.arange(3, 240, 7)
    assert np.array_equal(reader.decode_indices(indices).frames, truth[indices])
    for i in (74, 148, 239):  # single reads on a fresh reader: where a seek would have landed frames off
        assert np.array_equal(VideoReader(path).decode_indices(np.array([i])).frames, truth[[i]])
    assert not reader.planned


def test_on_mp4_the_planned_decode_is_byte_identical_to_decords_batch(tmp_path):
    path = tmp_path / "h264.mp4"
    write_coded_video(path, *CODECS["h264_bframes.mp4"])
    reader = VideoReader(path, decode_workers=2)
    assert len(reader._key_indices) > 1  # several keyframe intervals, so jobs really seek and split
    indices = np.arange(5, 240, 7)
    import decord  # after PyAV (the reader imported it): see cader.vlm.video_index.decord_index

    decords = decord.VideoReader(str(path)).get_batch(indices.tolist()).asnumpy()
    assert np.array_equal(reader._scan(indices), decords)


def test_without_a_keyframe_index_every_job_starts_at_frame_zero_and_stays_exact(reader):
    indices = np.arange(3, 600, 37)
    expected = reader._scan(indices)
    reader_keys = reader._key_indices
    try:
        reader._key_indices = np.zeros(1, dtype=np.int64)
        assert np.array_equal(reader._scan(indices), expected)
    finally:
        reader._key_indices = reader_keys
    assert [read_barcode(f) for f in expected] == list(indices)


def test_one_decoder_per_dataloader_worker_else_the_cores(barcode_video):
    import torch.utils.data as tud

    class Probe(tud.Dataset):
        def __len__(self):
            return 1

        def __getitem__(self, i):
            return VideoReader(barcode_video).decode_workers

    assert next(iter(tud.DataLoader(Probe(), num_workers=1, batch_size=None))) == 1
    assert VideoReader(barcode_video).decode_workers == min(8, len(os.sched_getaffinity(0)))
    assert VideoReader(barcode_video, decode_workers=0).decode_workers == 1


def test_a_failed_plan_falls_back_to_a_sequential_decode_once_per_reader(barcode_video, monkeypatch, caplog):
    reader = VideoReader(barcode_video)
    calls = []

    def broken_scan(indices, max_pixels=None):
        calls.append(len(indices))
        raise VideoReadError(reader.path, "frames [5] not found while scanning")

    monkeypatch.setattr(reader, "_scan", broken_scan)
    frames = reader.sample_uniform(1.0, start=0, end=10)
    assert [read_barcode(f) for f in frames.frames] == list(frames.indices) == [10 * k + 5 for k in range(10)]
    later = reader.sample_uniform(1.0, start=10, end=20, max_pixels=32 * 32)
    assert [read_barcode(f) for f in later.frames] == [100 + 10 * k + 5 for k in range(10)]
    assert calls == [10]  # the plan is not tried again on a video where it failed
    warnings = [r.getMessage() for r in caplog.records if "sequentially" in r.getMessage()]
    assert len(warnings) == 1 and str(barcode_video) in warnings[0]  # once per reader, naming the file


def test_the_sequential_fallback_names_frames_past_the_end(barcode_video):
    reader = VideoReader(barcode_video)
    with pytest.raises(VideoReadError, match="ends after 600 frames"):
        reader._decode_sequentially(np.array([3, 650]), None)


def test_frames_are_resized_one_by_one_to_the_bytes_a_batch_resize_gives(coded_video):
    from cader.vlm.video import resize_frames, resize_to

    path, truth = coded_video
    reader = VideoReader(path, decode_workers=2)
    indices = np.arange(2, 240, 5)
    small = reader.decode_indices(indices, max_pixels=32 * 32)
    assert small.frames.shape == (len(indices), 32, 32, 3)
    assert np.array_equal(small.frames, resize_frames(truth[indices], 32 * 32))
    assert np.array_equal(resize_to(truth, (32, 32), chunk=7), resize_to(truth, (32, 32), chunk=240))


def test_a_late_seek_is_retried_from_ever_earlier_keyframes_then_the_stream_start(reader):
    keys, start = reader._key_indices, VideoReader.STREAM_START
    try:
        reader._key_indices = np.array([0, 47, 93])
        assert reader._seek_starts(93) == [93, 47, 0, start]
        assert reader._seek_starts(47) == [47, 0, start] and reader._seek_starts(0) == [0, start]
        reader._key_indices = np.arange(0, 480, 48)  # 1, 2, 4 and 8 intervals back, then the start
        assert reader._seek_starts(432) == [432, 384, 336, 240, 48, start]
    finally:
        reader._key_indices = keys
