"""The "backbone" frame rule: frames as Qwen's own pipeline picks them, on the real timeline.

Hand-computed cases of the pure rule (`cader.vlm.sampling.backbone_count`, `backbone_frames`), then the reader's
frames against `qwen-vl-utils`' `fetch_video` itself (a test dependency, decord backend): the same frame indices and
sizes on constant-rate videos, whole and cropped; on a variable-rate video the real times, where qwen-vl-utils'
`index / average fps` is seconds off.
"""

import numpy as np
import pytest
from cader.vlm.sampling import backbone_count, backbone_frames
from cader.vlm.video import VideoReader
from conftest import write_coded_video

PAPER_PIXELS = 65_536


# ---- the rule: pure ------------------------------------------------------------------------------------------------


def test_backbone_count_hand_computed():
    assert backbone_count(95.0, 1.0, 2850, 768) == 94          # floor(D * fps) = 95 is odd: 94
    assert backbone_count(601.0, 1.0, 18030, 768) == 600
    assert backbone_count(7.5, 1.0, 225, 768) == 6
    assert backbone_count(1800.0, 1.0, 54_000, 768) == 768     # the cap, spread over the whole video
    assert backbone_count(1800.0, 1.0, 54_000, 767) == 766     # an odd cap is floored to even too
    assert backbone_count(2.0, 1.0, 60, 768) == 4              # at least 4 frames at a rate
    assert backbone_count(0.3, 10.0, 3, 768) == 2              # 0.3 s * 10 fps is 3 (no float loss), floored to 2
    assert backbone_count(0.1, 1.0, 3, 768) == 2               # 4 wanted, 3 there: the even count below
    assert backbone_count(0.04, 1.0, 1, 768) == 1              # one frame: that frame (qwen-vl-utils raises)
    assert backbone_count(10.0, 8.0, 300, None) == 80


def test_backbone_frames_hand_computed_constant_rate():
    starts = np.arange(10.0)   # 10 frames at 1 fps
    assert backbone_frames(starts, 10.0, 0.5).tolist() == [0, 3, 6, 9]        # 5 -> 4: round(linspace(0, 9, 4))
    assert backbone_frames(starts, 10.0, 1.0).tolist() == list(range(10))
    assert backbone_frames(starts, 10.0, 1.0, max_frames=4).tolist() == [0, 3, 6, 9]
    # a window: the frames starting inside [2.5, 7] are 3..7 (qwen-vl-utils: ceil(2.5), floor(7)), 5 s of video
    assert backbone_frames(starts, 10.0, 1.0, start=2.5, end=7.0).tolist() == [3, 4, 6, 7]
    assert backbone_frames(starts, 10.0, 1.0, start=4.2, end=4.9).tolist() == [4]   # no frame starts inside
    assert backbone_frames(starts, 10.0, 1.0, start=12.0, end=14.0).tolist() == []


def test_backbone_frames_hand_computed_variable_rate():
    # six frames at irregular times: 4 frames over 10 s, at 0, 3.3, 6.6 and 9.9 s of the real timeline; each the
    # frame starting nearest: 0 -> 0.0, 3.3 -> 5.0 (1.7 s away, 0.2 is 3.1), 6.6 -> 5.1, 9.9 -> 9.9
    starts = np.array([0.0, 0.1, 0.2, 5.0, 5.1, 9.9])
    assert backbone_frames(starts, 10.0, 0.4).tolist() == [0, 3, 4, 5]


# ---- against qwen-vl-utils -----------------------------------------------------------------------------------------


@pytest.fixture
def fetch_video(monkeypatch):
    """qwen-vl-utils' fetch_video on its decord backend (LongVT's trainer sets FORCE_QWENVL_VIDEO_READER=decord)."""
    vision_process = pytest.importorskip("qwen_vl_utils.vision_process")
    monkeypatch.setattr(vision_process, "get_video_reader_backend", lambda: "decord")

    def fetch(path, **ele):
        # min_pixels: qwen-vl-utils' default (128 tokens) is above 65,536 px and would fail its own assert
        video, meta = vision_process.fetch_video({"video": str(path), "max_pixels": PAPER_PIXELS, "min_pixels": 1024,
                                                  **ele}, image_patch_size=16, return_video_metadata=True)
        return np.asarray(meta["frames_indices"], dtype=np.int64), tuple(video.shape[2:]), meta

    return fetch


CFR_CASES = [  # (fps, start, end, max_frames): Stage 1 whole and capped, crops at r2 and at 1 fps
    (1.0, None, None, 768), (1.0, None, None, 16), (8.0, 10.0, 20.0, 768), (2.0, 3.3, 17.71, 768),
    (1.0, 40.0, 60.0, 768),
]


@pytest.mark.parametrize("fps, start, end, max_frames", CFR_CASES)
def test_same_frames_and_sizes_as_qwen_vl_utils_on_constant_rate_video(barcode_video, fetch_video, fps, start, end,
                                                                      max_frames):
    window = {} if start is None else {"video_start": start, "video_end": end}
    theirs, size, _ = fetch_video(barcode_video, fps=fps, max_frames=max_frames, **window)
    ours = VideoReader(barcode_video, decode_workers=1).sample_uniform(fps, start, end, max_frames, PAPER_PIXELS,
                                                                     rule="backbone")
    assert ours.indices.tolist() == theirs.tolist() and ours.frames.shape[1:3] == size


def test_same_frames_on_h264_with_b_frames_and_an_odd_second_count(tmp_path, fetch_video):
    path = tmp_path / "b.mp4"
    write_coded_video(path, "libx264", {"bf": "3", "g": "24"}, n_frames=239, rate=24)   # 9.96 s: 9 at 1 fps -> 8
    theirs, size, _ = fetch_video(path, fps=1.0, max_frames=768)
    ours = VideoReader(path, decode_workers=1).sample_uniform(1.0, None, None, 768, PAPER_PIXELS, rule="backbone")
    assert len(theirs) == 8 and ours.indices.tolist() == theirs.tolist() and ours.frames.shape[1:3] == size


def test_real_times_on_variable_rate_video_where_qwen_vl_utils_is_seconds_off(tmp_path, fetch_video):
    # 30 frames 10 ms apart, then 30 frames 500 ms apart: 15.3 s, 3.9 fps on average
    durations = [10] * 30 + [500] * 30
    real = np.concatenate([[0.0], np.cumsum(durations)[:-1]]) / 1000.0
    path = tmp_path / "vfr.mp4"
    write_coded_video(path, "libx264", {"bf": "0"}, n_frames=60, rate=30, durations_ms=durations)
    reader = VideoReader(path, decode_workers=1)
    ours = reader.sample_uniform(1.0, max_frames=768, max_pixels=PAPER_PIXELS, rule="backbone")
    assert np.allclose(ours.timestamps, real[ours.indices], atol=1e-3)   # the frames' own, real times
    # spread evenly over the real timeline: each frame starts nearest its time of linspace(0, last start, n)
    targets = np.linspace(0.0, real[-1], len(ours))
    nearest = np.abs(real[None, :] - targets[:, None]).argmin(axis=1)
    assert len(ours) == 14 and ours.indices.tolist() == sorted(set(nearest.tolist()))
    # qwen-vl-utils spreads the same count over frame indices and writes index / average fps as each frame's time
    theirs, _, meta = fetch_video(path, fps=1.0, max_frames=768)
    their_times = theirs / float(meta["fps"])
    assert len(theirs) == len(ours) and np.max(np.abs(their_times - real[theirs])) > 5.0   # seconds off
    # the processor writes frames_indices / fps: ours carry each frame's real time through it
    written = np.asarray(ours.metadata()["frames_indices"], float) / ours.metadata()["fps"]
    assert np.allclose(written, real[ours.indices], atol=1e-3)
