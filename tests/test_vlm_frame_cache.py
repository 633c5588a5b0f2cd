"""The decoded-frame cache gives training the bytes and timestamps a direct decode gives, and misses when it must."""

import hashlib
import json
import logging
import os
import pickle
import threading

import numpy as np
import pytest
from cader.vlm import frame_cache as fc
from cader.vlm.frame_cache import FrameCache, TrainingSampling, sample_for_training, training_frames
from cader.vlm.video import VideoReader
from conftest import write_coded_video

H264_BFRAMES = ("libx264", {"g": "48", "bf": "3", "preset": "veryfast"})
BUDGET = TrainingSampling(fps=1.0, frames=8, max_pixels=32 * 32)


@pytest.fixture(scope="module")
def h264_video(tmp_path_factory):
    path = tmp_path_factory.mktemp("cache_videos") / "h264_bframes.mp4"
    write_coded_video(path, *H264_BFRAMES)  # 240 frames at 24 fps: 10 s
    return path


@pytest.fixture(scope="module")
def h264_direct(h264_video):
    """What training decodes of `h264_video` under BUDGET without a cache."""
    return sample_for_training(VideoReader(h264_video), BUDGET)


@pytest.fixture(scope="module")
def vfr_video(tmp_path_factory):
    """Variable frame rate: timestamps off the average-rate grid, which the cache must keep exactly."""
    path = tmp_path_factory.mktemp("cache_vfr") / "vfr.mp4"
    durations = [20 if k % 3 else 70 for k in range(240)]  # milliseconds each frame is shown
    write_coded_video(path, *H264_BFRAMES, durations_ms=durations)
    assert VideoReader(path).frame_table.variable_rate
    return path


def assert_same_frames(got, want):
    assert np.array_equal(got.frames, want.frames) and got.frames.dtype == np.uint8
    assert np.array_equal(got.timestamps, want.timestamps) and got.timestamps.dtype == np.float64
    assert np.array_equal(got.indices, want.indices) and got.native_fps == want.native_fps
    assert got.metadata() == want.metadata()


@pytest.mark.parametrize("sampling", [
    BUDGET,                                                  # 10 frames at 1 fps, capped to 8
    TrainingSampling(fps=1.0, frames=16, max_pixels=None),   # too short for 16 at 1 fps: 16 spread evenly
    TrainingSampling(fps=2.0, frames=20, max_pixels=64 * 64),
])
@pytest.mark.parametrize("video", ["h264_video", "vfr_video"])
def test_cold_and_warm_frames_equal_a_direct_decode_bit_for_bit(video, sampling, request, tmp_path):
    path = request.getfixturevalue(video)
    direct = sample_for_training(VideoReader(path), sampling)
    cache = FrameCache(tmp_path / "frames")
    cold = training_frames(path, sampling, cache)
    warm = training_frames(path, sampling, cache)
    assert_same_frames(cold, direct)
    assert_same_frames(warm, direct)
    assert warm.frames.flags.writeable  # the processor may work on it in place
    assert (cache.stats.misses, cache.stats.hits) == (1, 1) and cache.stats.bytes_written > direct.frames.nbytes


def test_the_training_sampling_is_the_one_the_encoder_used(h264_video):
    reader = VideoReader(h264_video)
    capped = sample_for_training(reader, BUDGET)
    assert len(capped) == 8 and np.array_equal(capped.indices, reader.sample_uniform(1.0, max_frames=8).indices)
    spread = sample_for_training(reader, TrainingSampling(1.0, 16, None))
    assert np.array_equal(spread.indices, reader.sample_count(16).indices)


def test_a_hit_opens_no_video(h264_video, tmp_path, monkeypatch):
    cache = FrameCache(tmp_path)
    first = cache.frames(h264_video, BUDGET)

    def no_decode(*args, **kwargs):
        raise AssertionError("a hit must not open the video")

    monkeypatch.setattr(fc, "VideoReader", no_decode)
    assert_same_frames(FrameCache(tmp_path).frames(h264_video, BUDGET), first)  # another worker, rank or run


def test_a_changed_file_or_setting_is_a_miss(h264_video, tmp_path):
    copy = tmp_path / "clip.mp4"
    copy.write_bytes(h264_video.read_bytes())
    cache = FrameCache(tmp_path / "frames")
    key = cache.key(copy, BUDGET)
    assert cache.key(copy, BUDGET) == key
    for other in (TrainingSampling(2.0, 8, 32 * 32), TrainingSampling(1.0, 9, 32 * 32), TrainingSampling(1.0, 8, 2048),
                  TrainingSampling(1.0, 8, None)):
        assert cache.key(copy, other) != key
    assert cache.key(h264_video, BUDGET) != key  # the same bytes elsewhere
    status = copy.stat()
    os.utime(copy, ns=(status.st_atime_ns, status.st_mtime_ns + 1_000_000))
    assert cache.key(copy, BUDGET) != key
    touched = cache.key(copy, BUDGET)
    with open(copy, "ab") as handle:
        handle.write(b"\0")
    os.utime(copy, ns=(status.st_atime_ns, status.st_mtime_ns + 1_000_000))  # same mtime, other size
    assert cache.key(copy, BUDGET) != touched


def test_a_library_upgrade_is_a_miss(h264_video, tmp_path, monkeypatch):
    key = FrameCache(tmp_path).key(h264_video, BUDGET)
    monkeypatch.setattr(fc, "pixel_libraries", lambda: {"pyav": "0", "torch": "0"})
    assert FrameCache(tmp_path).key(h264_video, BUDGET) != key


def flip_last_pixel(pixels, meta):
    data = bytearray(pixels.read_bytes())
    data[-1] ^= 0xFF  # behind an intact header: the file still loads, with other pixels
    pixels.write_bytes(bytes(data))


def rewrite_meta(**fields):
    def damage(pixels, meta):
        info = json.loads(meta.read_text())
        info.update(fields)
        meta.write_text(json.dumps({k: v for k, v in info.items() if v is not None}))
    return damage


def resave_pixels(change):
    def damage(pixels, meta):
        np.save(pixels, change(np.load(pixels)), allow_pickle=False)
    return damage


def written_by_format_1(pixels, meta):
    """An entry as the format before the checksum wrote it: no dtype, no checksum."""
    info = json.loads(meta.read_text())
    meta.write_text(json.dumps({"format": 1, **{k: info[k] for k in ("source", "shape", "timestamps", "indices",
                                                                     "native_fps")}}))


# (damage, the file the log must name): every way the issue found, and their neighbours
DAMAGES = {
    "empty_pixels": (lambda pixels, meta: pixels.write_bytes(b""), ".npy"),
    "truncated_pixels": (lambda pixels, meta: pixels.write_bytes(pixels.read_bytes()[:200]), ".npy"),
    "truncated_header": (lambda pixels, meta: pixels.write_bytes(pixels.read_bytes()[:30]), ".npy"),
    "flipped_pixel_byte": (flip_last_pixel, ".npy"),
    "pixels_other_shape": (resave_pixels(lambda frames: frames[:-1]), ".npy"),
    "pixels_other_dtype": (resave_pixels(lambda frames: frames.astype(np.uint16)), ".npy"),
    "pixels_missing": (lambda pixels, meta: pixels.unlink(), ".npy"),
    "meta_other_shape": (rewrite_meta(shape=[1, 2, 3, 3]), ".json"),
    "meta_format_only": (lambda pixels, meta: meta.write_text(json.dumps({"format": fc.CACHE_FORMAT})), ".json"),
    "meta_a_list": (lambda pixels, meta: meta.write_text("[]"), ".json"),
    "meta_not_json": (lambda pixels, meta: meta.write_text("{not json"), ".json"),
    "meta_not_utf8": (lambda pixels, meta: meta.write_bytes(b"\xff\xfe{"), ".json"),
    "meta_bad_timestamps": (rewrite_meta(timestamps="soon"), ".json"),
    "meta_short_indices": (rewrite_meta(indices=[0]), ".json"),
    "meta_zero_rate": (rewrite_meta(native_fps=0.0), ".json"),
    "meta_other_dtype": (rewrite_meta(dtype="float32"), ".json"),
    "meta_no_checksum": (rewrite_meta(pixels_blake2b=None), ".json"),
    "meta_older_format": (written_by_format_1, ".json"),
}


def damaged_warnings(caplog):
    return [r for r in caplog.records if r.levelno == logging.WARNING and "damaged entry" in r.getMessage()]


@pytest.mark.parametrize("damage", sorted(DAMAGES))
def test_a_damaged_entry_is_a_counted_miss_named_once_and_written_again(h264_video, h264_direct, tmp_path, caplog,
                                                                         damage):
    make_damage, named = DAMAGES[damage]
    cache = FrameCache(tmp_path)  # a later run, or another worker
    key = cache.key(h264_video, BUDGET)
    FrameCache(tmp_path).put(key, h264_direct, h264_video)  # the entry a first run wrote
    pixels, meta = cache._files(key)
    make_damage(pixels, meta)
    with caplog.at_level(logging.WARNING, logger=fc.__name__):
        assert_same_frames(cache.frames(h264_video, BUDGET), h264_direct)  # no traceback, no damaged bytes
        assert_same_frames(cache.frames(h264_video, BUDGET), h264_direct)  # written again: a hit
    assert (cache.stats.hits, cache.stats.misses, cache.stats.damaged) == (1, 1, 1)
    [warning] = damaged_warnings(caplog)
    assert str(cache._files(key)[0 if named == ".npy" else 1]) in warning.getMessage()
    assert_same_frames(FrameCache(tmp_path).get(key), h264_direct)


def test_a_missing_or_half_written_entry_is_a_plain_miss(h264_video, tmp_path, caplog):
    cache = FrameCache(tmp_path)
    key = cache.key(h264_video, BUDGET)
    meta = cache._files(key)[1]
    assert cache.get(key) is None  # nothing stored
    cache.frames(h264_video, BUDGET)
    meta.unlink()  # as a writer leaves it between its two renames
    with caplog.at_level(logging.WARNING, logger=fc.__name__):
        assert cache.get(key) is None and not cache.contains(key)
    assert cache.stats.damaged == 0 and damaged_warnings(caplog) == []


def test_the_metadata_holds_a_checksum_of_the_pixel_bytes(h264_video, tmp_path):
    cache = FrameCache(tmp_path)
    frames = cache.frames(h264_video, BUDGET)
    info = json.loads(cache._files(cache.key(h264_video, BUDGET))[1].read_text())
    assert info["pixels_blake2b"] == hashlib.blake2b(frames.frames.tobytes(), digest_size=16).hexdigest()
    assert info["format"] == fc.CACHE_FORMAT and info["dtype"] == "uint8" and info["shape"] == list(frames.frames.shape)


def test_a_format_bump_leaves_older_entries_unread(h264_video, tmp_path, monkeypatch):
    key = FrameCache(tmp_path).key(h264_video, BUDGET)
    monkeypatch.setattr(fc, "CACHE_FORMAT", fc.CACHE_FORMAT - 1)
    assert FrameCache(tmp_path).key(h264_video, BUDGET) != key


def test_a_damaged_entry_that_cannot_be_written_again_is_named_once(h264_video, tmp_path, caplog, monkeypatch):
    cache = FrameCache(tmp_path)
    direct = cache.frames(h264_video, BUDGET)
    cache._files(cache.key(h264_video, BUDGET))[0].write_bytes(b"")

    def read_only(path, write):
        raise PermissionError(f"read-only: {path}")

    monkeypatch.setattr(fc, "_save_atomic", read_only)
    with caplog.at_level(logging.WARNING, logger=fc.__name__):
        for _ in range(3):
            assert_same_frames(cache.frames(h264_video, BUDGET), direct)
    assert (cache.stats.damaged, cache.stats.write_errors) == (3, 3) and len(damaged_warnings(caplog)) == 1


@pytest.mark.parametrize("damage", ["empty_pixels", "truncated_pixels", "meta_format_only", "meta_a_list",
                                    "pixels_other_shape"])
def test_the_fill_writes_a_damaged_entry_again(h264_video, tmp_path, damage):
    """A resumed fill checks each entry's .json and .npy header and size, not its pixels (those are checked on every
    read): damage they show is decoded again, not reported present."""
    cache = FrameCache(tmp_path)
    direct = cache.frames(h264_video, BUDGET)
    key = cache.key(h264_video, BUDGET)
    assert cache.contains(key) and cache.fill(h264_video, BUDGET) == 0
    DAMAGES[damage][0](*cache._files(key))
    assert not cache.contains(key)
    assert cache.fill(h264_video, BUDGET) > 0 and cache.contains(key)
    assert_same_frames(cache.get(key), direct)


def test_a_cache_that_cannot_be_written_warns_once_and_training_goes_on(h264_video, tmp_path, caplog):
    blocked = tmp_path / "blocked"
    blocked.write_text("a file where the cache folder should be")
    cache = FrameCache(blocked)
    with caplog.at_level(logging.WARNING):
        first = cache.frames(h264_video, BUDGET)
        cache.frames(h264_video, BUDGET)
    assert_same_frames(first, sample_for_training(VideoReader(h264_video), BUDGET))
    assert cache.stats.write_errors == 2 and len([r for r in caplog.records if "cannot write" in r.message]) == 1


def test_writers_racing_on_one_entry_leave_a_whole_one(h264_video, tmp_path):
    direct = sample_for_training(VideoReader(h264_video), BUDGET)
    cache = FrameCache(tmp_path)
    results = []
    threads = [threading.Thread(target=lambda: results.append(cache.frames(h264_video, BUDGET))) for _ in range(4)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    assert len(results) == 4
    for frames in results:
        assert_same_frames(frames, direct)
    assert_same_frames(cache.get(cache.key(h264_video, BUDGET)), direct)
    leftovers = [p for p in tmp_path.rglob("*") if p.is_file() and p.suffix == ".tmp"]
    assert leftovers == [] and cache.stats.damaged == 0  # a reader never meets a torn entry


def test_workers_racing_on_a_damaged_entry_serve_the_decode_and_leave_a_whole_one(h264_video, tmp_path):
    direct = sample_for_training(VideoReader(h264_video), BUDGET)
    cache = FrameCache(tmp_path)
    cache.frames(h264_video, BUDGET)
    key = cache.key(h264_video, BUDGET)
    flip_last_pixel(*cache._files(key))
    results, errors = [], []

    def read():
        try:
            results.append(cache.frames(h264_video, BUDGET))
        except Exception as err:  # noqa: BLE001 -- the test reports it
            errors.append(err)

    threads = [threading.Thread(target=read) for _ in range(4)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    assert errors == [] and len(results) == 4
    for frames in results:
        assert_same_frames(frames, direct)
    assert_same_frames(FrameCache(tmp_path).get(key), direct)
    assert cache.stats.damaged >= 1


def test_a_cache_travels_to_spawned_dataloader_workers(h264_video, tmp_path):
    cache = FrameCache(tmp_path)
    cache.frames(h264_video, BUDGET)
    clone = pickle.loads(pickle.dumps(cache))
    assert clone.root == cache.root and clone.key(h264_video, BUDGET) == cache.key(h264_video, BUDGET)
    assert clone.frames(h264_video, BUDGET) is not None and clone.stats.hits == 1


def test_the_sample_encoder_gives_the_model_the_same_inputs_through_the_cache(h264_video, tiny_model_dir, tmp_path):
    from cader.train.budget import BudgetConfig
    from cader.train.collate import SampleEncoder
    from cader.train.formats import Sample, Turn
    from cader.vlm.loading import load_processor

    sample = Sample("clips", "clips:0", [
        Turn("user", [{"type": "video", "path": h264_video.name}, {"type": "text", "text": "What moves?"}]),
        Turn("assistant", [{"type": "text", "text": "<think>a bar</think><answer>A</answer>"}])])
    processor = load_processor(str(tiny_model_dir))
    direct = SampleEncoder(processor, BudgetConfig(max_length=2048))
    cached = SampleEncoder(processor, BudgetConfig(max_length=2048), frame_cache_dir=str(tmp_path / "frames"))
    planned = direct.plan(sample, h264_video.parent)
    want = direct.encode(planned)
    for _ in range(2):  # cold, then warm
        got = cached.encode(planned)
        assert sorted(got) == sorted(want) and "pixel_values_videos" in got
        for name in want:
            assert want[name].dtype == got[name].dtype and bool((want[name] == got[name]).all()), name
    assert (cached.frame_cache.stats.misses, cached.frame_cache.stats.hits) == (1, 1)
    assert direct.frame_cache is None


@pytest.mark.parametrize("damage", ["empty_pixels", "meta_format_only", "flipped_pixel_byte"])
def test_the_training_dataset_decodes_a_damaged_entry_again_instead_of_failing(h264_video, tiny_model_dir, tmp_path,
                                                                               caplog, damage):
    """The path the issue reproduced with train/sft.py: a DataLoader worker's dataset reading the frame cache."""
    from cader.train.budget import BudgetConfig
    from cader.train.collate import SampleEncoder
    from cader.train.formats import Sample, Turn
    from cader.train.loading import PlannedDataset
    from cader.vlm.loading import load_processor

    sample = Sample("clips", "clips:0", [
        Turn("user", [{"type": "video", "path": h264_video.name}, {"type": "text", "text": "What moves?"}]),
        Turn("assistant", [{"type": "text", "text": "<think>a bar</think><answer>A</answer>"}])])
    encoder = SampleEncoder(load_processor(str(tiny_model_dir)), BudgetConfig(max_length=2048),
                            frame_cache_dir=str(tmp_path / "frames"))
    dataset = PlannedDataset([encoder.plan(sample, h264_video.parent)], encoder)
    want = dataset[0]  # cold: decoded and stored
    cache = encoder.frame_cache
    [key] = [meta.stem for meta in cache.root.rglob("*.json")]
    DAMAGES[damage][0](*cache._files(key))
    with caplog.at_level(logging.WARNING, logger=fc.__name__):
        got = dataset[0]
    assert isinstance(got, dict) and not dataset.failures
    for name in want:
        assert bool((want[name] == got[name]).all()), name
    assert (cache.stats.misses, cache.stats.damaged, cache.stats.hits) == (2, 1, 0)
    assert len(damaged_warnings(caplog)) == 1
    dataset[0]
    assert cache.stats.hits == 1  # written again on the same run


@pytest.mark.slow
def test_the_fill_script_decodes_each_planned_video_once_and_training_then_only_reads(tiny_model_dir, tmp_path,
                                                                                      monkeypatch):
    import importlib

    from cader.dev.synthetic.dataset import Counts, Timeline, make_synthetic_data
    from cader.train.cli import make_cli, parse_sft_args
    from cader.train.datamodule import PlannedDataset, SFTDataModule

    fill = importlib.import_module("cader.scripts.fill_frame_cache")
    make_synthetic_data(tmp_path / "data", counts=Counts(n_train=6, n_images=2, n_tool=1, n_eval=1,
                                                         n_heldout=1), timeline=Timeline(train_duration=32))
    train = tmp_path / "data" / "train"
    source = {"name": "video_r1", "format": "video_r1", "path": str(train / "video_r1_cot.json"),
              "media_root": str(train)}
    argv = ["--config", "cot_mix.yaml", "--model.model_path", str(tiny_model_dir), "--data.sources", f"[{source}]",
            "--data.plan_cache_dir", str(tmp_path / "plans"), "--trainer.default_root_dir", str(tmp_path / "run"),
            "--data.frame_cache_dir", str(tmp_path / "frames")]

    def run_fill(*flags):
        return fill.fill_frame_cache(make_cli([*argv, *flags], cli_class=fill.FillFrameCacheCLI).config)

    sized = run_fill("--dry_run", "true")
    assert sized["samplings"] > 0 and not (tmp_path / "frames").exists()
    first = run_fill("--workers", "2")
    assert first["samplings"] == sized["samplings"] and first["written"] == first["samplings"] and first["failed"] == 0
    assert 0 < first["bytes_written"] <= first["bytes_at_most"] + 4096 * first["samplings"]  # + headers and times
    assert fill.main([*argv, "--workers", "1"]) == 0  # the command line: every entry already there
    again = run_fill("--workers", "1")
    assert again["present"] == first["samplings"] and again["written"] == 0

    config = parse_sft_args(argv)
    module = SFTDataModule(**{**config.data.as_dict(), "report_dir": str(tmp_path / "run")})
    module.setup("fit")
    monkeypatch.setattr(fc, "VideoReader", lambda *a, **k: pytest.fail("training decoded a video the fill decoded"))
    dataset = PlannedDataset(module.items, module.encoder)
    videos = [i for i, item in enumerate(module.items) if any(m["type"] == "video" for m in item.sample.media)]
    for index in videos:
        assert "pixel_values_videos" in dataset[index]
    assert module.encoder.frame_cache.stats.hits == len(videos) and not dataset.failures
