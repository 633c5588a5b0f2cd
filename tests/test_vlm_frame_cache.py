"""The decoded-frame cache gives training the bytes and timestamps a direct decode gives, and misses when it must."""

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


@pytest.mark.parametrize("damage", ["truncate_pixels", "drop_meta", "drop_pixels", "wrong_shape", "old_format"])
def test_a_damaged_entry_is_a_miss_and_is_written_again(h264_video, tmp_path, damage):
    cache = FrameCache(tmp_path)
    direct = cache.frames(h264_video, BUDGET)
    key = cache.key(h264_video, BUDGET)
    pixels, meta = cache._files(key)
    if damage == "truncate_pixels":
        pixels.write_bytes(pixels.read_bytes()[:200])
    elif damage == "drop_meta":
        meta.unlink()
    elif damage == "drop_pixels":
        pixels.unlink()
    else:
        import json

        info = json.loads(meta.read_text())
        info.update({"shape": [1, 2, 3, 3]} if damage == "wrong_shape" else {"format": fc.CACHE_FORMAT - 1})
        meta.write_text(json.dumps(info))
    assert cache.get(key) is None
    assert_same_frames(cache.frames(h264_video, BUDGET), direct)
    assert cache.stats.misses == 2 and cache.get(key) is not None


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
    assert leftovers == []


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


@pytest.mark.slow
def test_the_fill_script_decodes_each_planned_video_once_and_training_then_only_reads(tiny_model_dir, tmp_path,
                                                                                      monkeypatch):
    import importlib

    from cader.dev.synthetic.dataset import make_synthetic_data
    from cader.train.cli import make_cli, parse_sft_args
    from cader.train.datamodule import PlannedDataset, SFTDataModule

    fill = importlib.import_module("cader.scripts.fill_frame_cache")
    make_synthetic_data(tmp_path / "data", n_train=6, n_images=2, n_tool=1, n_eval=1, n_heldout=1, train_duration=32)
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
