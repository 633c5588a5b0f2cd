"""Per video, not per question: a video's questions share one reader and its decodes, and write the records they
would write one by one (timings and the shared part of the cost aside)."""

import gc
import weakref

import numpy as np
import pytest
from cader.contracts.jsonl import read_jsonl
from cader.dev.scripted import ScriptedBackend, question_of
from cader.evaluate.benchmarks.base import Sample
from cader.evaluate.method.config import CaderConfig
from cader.evaluate.runner import run_samples
from cader.evaluate.video_groups import VideoGroup, group_by_video
from cader.vlm.video import Frames, VideoReader, VideoReadError

LETTERS = ["A", "B", "C", "D"]
CONFIDENT, UNSURE = [0.0, 40.0, 0.0, 0.0], [0.0, 0.1, 0.0, 0.0]
SHARED_KEYS = ("frames_shared", "forwards_shared")


def _samples(root, barcode, videos: str) -> list[Sample]:
    """One question per letter of `videos`, on the video of that name (the barcode file under several names)."""
    samples = []
    for i, name in enumerate(videos):
        video = f"{name}_{barcode.name}"
        if not (root / video).exists():
            (root / video).symlink_to(barcode)
        samples.append(Sample("bench", f"s{i}", video, f"q{i}", ["a", "b", "c", "d"], LETTERS, "B", 60.0, {}))
    return samples


def _logits(n):
    return {f"q{i}": CONFIDENT if i % 3 == 0 else UNSURE for i in range(n)}


def _run(samples, root, out, backend, **kw):
    cfg = CaderConfig(max_frames=8, max_pixels=2048)
    return run_samples(samples, root, out, backend, backend, cfg, video_path=lambda s, r: r / s.video,
                       progress=False, **kw)


def _comparable(record):
    """A record without its timing and the shared part of its cost (what may differ between the two ways)."""
    cost = {k: v for k, v in record["cost"].items() if k != "seconds" and k not in SHARED_KEYS}
    return {**record, "cost": cost}


@pytest.fixture
def counted(monkeypatch):
    """Counts VideoReader opens and frames actually decoded."""
    seen = {"opens": 0, "frames": 0}
    init, decode = VideoReader.__init__, VideoReader.decode_indices

    def counting_init(self, *a, **k):
        seen["opens"] += 1
        init(self, *a, **k)

    def counting_decode(self, indices, max_pixels=None):
        seen["frames"] += len(indices)
        return decode(self, indices, max_pixels)

    monkeypatch.setattr(VideoReader, "__init__", counting_init)
    monkeypatch.setattr(VideoReader, "decode_indices", counting_decode)
    return seen


def test_grouped_records_equal_per_question_records(tmp_path, barcode_video, counted):
    root = barcode_video.parent
    samples = _samples(root, barcode_video, "abaacbcab")  # interleaved: three videos, 4 + 3 + 2 questions
    _run(samples, root, tmp_path / "alone.jsonl", ScriptedBackend(_logits(9)))
    alone = {"opens": counted["opens"], "frames": counted["frames"]}
    _run(samples, root, tmp_path / "grouped.jsonl", ScriptedBackend(_logits(9)), group_by_video=True)
    grouped = {k: counted[k] - alone[k] for k in alone}
    a, g = read_jsonl(tmp_path / "alone.jsonl"), read_jsonl(tmp_path / "grouped.jsonl")
    # video by video, in order of each video's first question; within a video, benchmark order
    assert [r["sample_id"] for r in g] == ["s0", "s2", "s3", "s7", "s1", "s5", "s8", "s4", "s6"]
    by_id = {r["sample_id"]: _comparable(r) for r in a}
    assert [_comparable(r) for r in g] == [by_id[r["sample_id"]] for r in g]
    assert all(not set(SHARED_KEYS) & set(r["cost"]) for r in a)  # per question: records as they always were
    # one reader per video, and the shared part of the cost is exactly what was not decoded again
    assert alone["opens"] == 9 and grouped["opens"] == 3
    assert sum(r["cost"]["frames_decoded"] for r in a) == alone["frames"]
    assert sum(r["cost"]["frames_decoded"] - r["cost"]["frames_shared"] for r in g) == grouped["frames"]
    assert grouped["frames"] < 0.5 * alone["frames"]
    # the first question of a video pays its whole-video decode (F1's 8 frames and the 60 of the 1-fps lattice the
    # RGR contexts are taken from, frame 0 in both); every later one takes it from the group
    first = {"s0", "s1", "s4"}
    assert all(r["cost"]["frames_shared"] == 0 for r in g if r["sample_id"] in first)
    assert all(r["cost"]["frames_shared"] >= 8 + 60 - 1 for r in g if r["sample_id"] not in first)
    # same proposal [20, 30] for every question: its crop is decoded once per video too, by the first question of
    # the video that goes to Stage 2; every later one decodes nothing at all
    stage2 = [r for r in g if r["route"] == "stage2"]
    later = [r for k, r in enumerate(stage2) if any(x["video"] == r["video"] for x in stage2[:k])]
    assert later and all(r["cost"]["frames_shared"] == r["cost"]["frames_decoded"] == 67 + 8 for r in later)
    assert all(r["cost"]["forwards_shared"] == 0 for r in g)


def test_in_flight_together_same_records_and_same_attribution(tmp_path, barcode_video):
    from test_eval_concurrency import PerPrompt

    root = barcode_video.parent
    samples = _samples(root, barcode_video, "aabbbaab")
    cfg = CaderConfig(max_frames=8, max_pixels=2048, max_new_tokens_propose=16, max_new_tokens_answer=16)
    runs = {}
    for level in (1, 4):
        out = tmp_path / f"c{level}.jsonl"
        run_samples(samples, root, out, PerPrompt(), PerPrompt(), cfg, video_path=lambda s, r: r / s.video,
                    progress=False, concurrency=level, group_by_video=True)
        runs[level] = [{**r, "cost": {k: v for k, v in r["cost"].items() if k != "seconds"}}
                       for r in read_jsonl(out)]
    # the first in order pays, whichever thread decoded first: the shared parts are equal too
    assert runs[1] == runs[4]


def test_in_flight_the_next_videos_stage1_frames_are_decoded_ahead_and_paid_as_without(tmp_path, barcode_video,
                                                                                      monkeypatch):
    import threading

    from test_eval_concurrency import PerPrompt

    decoded_on = []
    decode = VideoReader.decode_indices

    def recording(self, indices, max_pixels=None):
        decoded_on.append(threading.current_thread().name)
        return decode(self, indices, max_pixels)

    monkeypatch.setattr(VideoReader, "decode_indices", recording)
    root = barcode_video.parent
    samples = _samples(root, barcode_video, "aabbccdd")
    cfg = CaderConfig(max_frames=8, max_pixels=2048, max_new_tokens_propose=16, max_new_tokens_answer=16)
    runs = {}
    for level in (1, 2):
        decoded_on.clear()
        out = tmp_path / f"c{level}.jsonl"
        run_samples(samples, root, out, PerPrompt(), PerPrompt(), cfg, video_path=lambda s, r: r / s.video,
                    progress=False, concurrency=level, group_by_video=True)
        runs[level] = [{**r, "cost": {k: v for k, v in r["cost"].items() if k != "seconds"}}
                       for r in read_jsonl(out)]
        # while samples wait on the model, later videos' F1 is decoded by the ahead workers, at concurrency 1 too
        # (grouped runs decode one sample ahead at every concurrency)
        assert any(name.startswith("cader-ahead") for name in decoded_on), (level, decoded_on)
    # a decode made ahead is paid by the video's first question, as without it
    assert runs[1] == runs[2]
    assert [r["cost"]["frames_shared"] for r in runs[2]][::2] == [0, 0, 0, 0]


@pytest.mark.slow
def test_the_cache_holds_one_video_group_at_a_time(tmp_path, barcode_video):
    root = barcode_video.parent
    samples = _samples(root, barcode_video, "aaabbbccc")
    video_of = {f"q{i}": s.video for i, s in enumerate(samples)}
    seen: list[tuple[str, weakref.ref]] = []
    leaks: list[int] = []
    ids: list[int] = []

    class Watching(ScriptedBackend):
        def letter_logits(self, prompts, letters):
            gc.collect()
            current = video_of[question_of(prompts[0])]
            leaks.append(sum(ref() is not None for video, ref in seen if video != current))
            seen.extend((current, weakref.ref(p.video)) for p in prompts)
            ids.extend(id(p.video) for p in prompts)
            return super().letter_logits(prompts, letters)

    _run(samples, root, tmp_path / "p.jsonl", Watching(_logits(9)), group_by_video=True)
    assert len(leaks) == 9 and leaks == [0] * 9  # an earlier video's frames are gone once its group is done
    # while one video's questions run, they all see the same F1 (one decode, kept alive by the group)
    assert len(set(ids[:3])) == 1 and len(set(ids[3:6])) == 1
    gc.collect()
    assert all(ref() is None for _, ref in seen)  # and nothing is held after the run


def test_rerun_after_an_interruption_in_the_middle_of_a_video_group(tmp_path, barcode_video):
    root = barcode_video.parent
    samples = _samples(root, barcode_video, "aaaabb")
    out = tmp_path / "p.jsonl"
    class Killed(ScriptedBackend):
        def letter_logits(self, prompts, letters):
            if question_of(prompts[0]) == "q2":
                raise KeyboardInterrupt  # not a per-sample failure: it ends the run, as a kill does
            return super().letter_logits(prompts, letters)

    with pytest.raises(KeyboardInterrupt):  # killed during the third question of video a
        _run(samples, root, out, Killed(_logits(6)), group_by_video=True)
    assert [r["sample_id"] for r in read_jsonl(out)] == ["s0", "s1"]
    counts = _run(samples, root, out, ScriptedBackend(_logits(6)), group_by_video=True)
    assert counts["done_before"] == 2 and counts["ran"] == 4
    resumed = read_jsonl(out)
    _run(samples, root, tmp_path / "whole.jsonl", ScriptedBackend(_logits(6)), group_by_video=True)
    whole = read_jsonl(tmp_path / "whole.jsonl")
    assert [r["sample_id"] for r in resumed] == [r["sample_id"] for r in whole] == [f"s{i}" for i in range(6)]
    assert [_comparable(r) for r in resumed] == [_comparable(r) for r in whole]
    # the resumed run decoded video a's F1 again: its first question pays it, honestly
    shared = {r["sample_id"]: r["cost"]["frames_shared"] for r in resumed}
    assert shared["s2"] == 0 and shared["s3"] > 0 and {r["sample_id"]: r["cost"]["frames_shared"] for r in whole
                                                       }["s2"] > 0


def test_variants_share_one_video_across_its_questions(tmp_path, barcode_video):
    from cader.evaluate.method.config import VARIANTS
    from cader.evaluate.runner import run_variants
    from test_eval_concurrency import PerPrompt

    root = barcode_video.parent
    samples = _samples(root, barcode_video, "abab")
    base = {"max_frames": 8, "max_pixels": 2048, "max_new_tokens_propose": 16, "max_new_tokens_answer": 16}
    cfgs = {v: CaderConfig(variant=v, **base) for v in VARIANTS}
    work = {}
    for grouped in (False, True):
        _, work[grouped] = run_variants(samples, root, tmp_path / str(grouped), PerPrompt(), PerPrompt(), cfgs,
                                        video_path=lambda s, r: r / s.video, progress=False, group_by_video=grouped)
    for variant in cfgs:
        alone, grouped = (read_jsonl(tmp_path / str(g) / variant / "predictions.jsonl") for g in (False, True))
        assert [r["sample_id"] for r in grouped] == ["s0", "s2", "s1", "s3"]
        by_id = {r["sample_id"]: _comparable(r) for r in alone}
        assert [_comparable(r) for r in grouped] == [by_id[r["sample_id"]] for r in grouped], variant
    # the same model calls either way (they are per sample); F1 and the shared crop once per video, not per question
    assert work[True].calls == work[False].calls and work[True].frames_asked == work[False].frames_asked
    assert work[True].frames < work[False].frames
    rows = [r for v in cfgs for r in read_jsonl(tmp_path / "True" / v / "predictions.jsonl")]
    assert sum(r["cost"]["frames_decoded"] - r["cost"]["frames_shared"] for r in rows) == work[True].frames


# ---- VideoGroup on its own: a fake reader counts decodes -------------------------------------------------------


class FakeReader:
    duration, num_frames = 60.0, 600

    def __init__(self, path, decode_workers=None):
        self.decodes = []

    def _frames(self, n):
        self.decodes.append(n)
        return Frames(np.zeros((n, 2, 2, 3), np.uint8), np.arange(n, dtype=float), np.arange(n), 10.0)

    def sample_uniform(self, fps, start=None, end=None, max_frames=None, max_pixels=None, rule="bin_centre"):
        return self._frames(int(((end or 60.0) - (start or 0.0)) * fps))

    def sample_times(self, times, max_pixels=None):
        return self._frames(len(times))


def test_video_group_pays_each_decode_once_by_the_first_in_order_and_bounds_windowed_frames():
    opened = []

    def opener(path, decode_workers=None):
        opened.append(path)
        return FakeReader(path)

    group = VideoGroup("v.mp4", stage2_bytes=5 * 12, opener=opener)  # 5 frames of 2 x 2 x 3 bytes
    late, early = group.view((1,)), group.view((0,))
    assert len(late.sample_uniform(1.0)) == 60 and early.sample_uniform(1.0) is late.sample_uniform(1.0)
    reader = group.reader()
    assert opened == ["v.mp4"] and reader.decodes == [60]
    # position 1 asked first in time, position 0 pays: the first in processing order
    assert early.frames_shared() == 0 and late.frames_shared() == 60 + 60  # its second ask is shared too
    crop1 = early.sample_uniform(1.0, start=10, end=14)
    early.sample_uniform(1.0, start=20, end=24)  # 4 + 4 frames > 5: the older crop is dropped
    assert group.cached_frames() == 60 + 4 and reader.decodes == [60, 4, 4]
    again = late.sample_uniform(1.0, start=10, end=14)
    assert again is not crop1 and reader.decodes == [60, 4, 4, 4]  # decoded again, and paid again by its asker
    assert late.frames_shared() == 120 and early.frames_shared() == 0
    group.close()
    assert group.cached_frames() == 0


def test_video_group_that_cannot_open_fails_every_sample_as_alone(tmp_path):
    opens = []

    def opener(path, decode_workers=None):
        opens.append(path)
        return VideoReader(path)

    group = VideoGroup(tmp_path / "missing.mp4", opener=opener)
    for position in range(3):
        with pytest.raises(VideoReadError, match="video_unreadable: .*missing.mp4: file does not exist"):
            _ = group.view((position,)).duration
    assert len(opens) == 1


def test_group_by_video_keeps_first_appearance_and_sample_order():
    assert group_by_video(["a1", "b1", "a2", "c1", "b2"], key=lambda s: s[0]) == [["a1", "a2"], ["b1", "b2"],
                                                                                    ["c1"]]
    assert group_by_video([], key=len) == []


def test_cli_groups_by_default():
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "evaluate"))
    from run import build_parser

    assert build_parser().parse_args(["--out", "x"]).group_by_video is True
    assert build_parser().parse_args(["--out", "x", "--group_by_video", "false"]).group_by_video is False
