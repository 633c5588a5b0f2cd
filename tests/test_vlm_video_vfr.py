"""Variable-frame-rate video (phone and screen recordings): frames, times and processor metadata stay exact."""

import logging

import numpy as np
import pytest
from cader.vlm.video import VideoReader
from conftest import write_coded_video

N_FRAMES = 240
# How long each frame is shown, in ms: irregular, as a phone camera that drops to 15 fps in low light would record.
DURATIONS_MS = np.random.default_rng(7).choice([17, 33, 33, 33, 50, 67, 100], size=N_FRAMES)


@pytest.fixture(scope="module")
def vfr_video(tmp_path_factory):
    """(path, every frame in presentation order, each frame's time in seconds from frame 0)."""
    import av

    path = tmp_path_factory.mktemp("vfr") / "vfr.mp4"
    write_coded_video(path, "libx264", {"g": "30", "bf": "2", "preset": "veryfast"}, N_FRAMES, rate=30,
                      durations_ms=DURATIONS_MS)
    with av.open(str(path)) as container:
        decoded = list(container.decode(container.streams.video[0]))
        times = np.array([float(f.pts * f.time_base) for f in decoded])
        frames = np.stack([f.to_ndarray(format="rgb24") for f in decoded])
    return path, frames, times - times[0]


def test_the_reader_sees_the_variable_rate_and_the_real_duration(vfr_video):
    path, _, times = vfr_video
    reader = VideoReader(path)
    assert reader.frame_table.variable_rate
    np.testing.assert_allclose(reader.frame_table.starts, times, atol=1e-4)
    # the end of the last frame is the muxer's guess (the encoder never learns how long it stays on screen)
    assert times[-1] < reader.duration <= times[-1] + DURATIONS_MS.max() / 1000
    # the average-rate grid is off by several frames somewhere in this clip, so the table is what makes it exact
    assert np.max(np.abs(np.arange(N_FRAMES) / reader.native_fps - times)) > 3 / reader.native_fps


@pytest.mark.parametrize("workers", [1, 3])
def test_planned_decode_returns_the_ith_frame_without_falling_back(vfr_video, workers, caplog):
    path, truth, _ = vfr_video
    reader = VideoReader(path, decode_workers=workers)
    with caplog.at_level(logging.WARNING):
        for indices in (np.arange(5, N_FRAMES, 7), np.array([3, 200]), np.arange(N_FRAMES)):
            assert np.array_equal(reader._scan(indices), truth[indices])
        for i in range(0, N_FRAMES, 9):  # single-frame reads: a crop of one frame must be that frame
            assert np.array_equal(reader.decode_indices(np.array([i])).frames[0], truth[i])
    assert not [r for r in caplog.records if "decord" in r.getMessage()]


def test_times_pick_the_frame_on_screen_and_come_back_real(vfr_video):
    path, truth, times = vfr_video
    reader = VideoReader(path)
    asked = np.array([0.5, 2.0, 4.25, times[-1] + 0.001])
    sample = reader.sample_times(asked)
    expected = np.unique(np.searchsorted(times, asked, side="right") - 1)
    assert list(sample.indices) == list(expected)
    np.testing.assert_allclose(sample.timestamps, times[expected], atol=1e-4)
    assert np.array_equal(sample.frames, truth[expected])


def test_window_sampling_takes_the_frames_on_screen_at_the_bin_centres(vfr_video):
    path, truth, times = vfr_video
    sample = VideoReader(path).sample_uniform(2.0, start=3.0, end=6.0)
    centres = 3.0 + (np.arange(6) + 0.5) * 0.5  # 6 frames centred in 0.5-s bins of [3, 6]
    expected = np.searchsorted(times, centres, side="right") - 1
    assert list(sample.indices) == list(expected)
    assert np.array_equal(sample.frames, truth[expected])
    assert np.all((sample.timestamps > 2.9) & (sample.timestamps < 6.0))


def test_processor_metadata_gives_the_real_times(vfr_video):
    path, _, times = vfr_video
    sample = VideoReader(path).sample_uniform(1.0)
    meta = sample.metadata()
    # Qwen3-VL's processor writes frames_indices[k] / fps as the k-th frame's time
    written = np.array(meta["frames_indices"]) / meta["fps"]
    np.testing.assert_allclose(written, times[sample.indices], atol=1e-4)


def test_processor_prompt_carries_the_real_times(vfr_video, tiny_model_dir):
    from transformers import AutoProcessor

    path, _, times = vfr_video
    processor = AutoProcessor.from_pretrained(tiny_model_dir)
    sample = VideoReader(path).sample_count(4, max_pixels=32 * 32)
    prompt = processor.apply_chat_template(
        [{"role": "user", "content": [{"type": "video"}, {"type": "text", "text": "?"}]}],
        add_generation_prompt=True, tokenize=False,
    )
    inputs = processor(text=[prompt], videos=[sample.frames], video_metadata=[sample.metadata()],
                       do_sample_frames=False, return_tensors="pt")
    text = processor.batch_decode(inputs["input_ids"])[0]
    # two frames per temporal patch: each patch is labelled with the mean time of its two frames
    pairs = times[sample.indices].reshape(-1, 2).mean(axis=1)
    for t in pairs:
        assert f"<{t:.1f} seconds>" in text
