"""One decode per video: F1 and every RGR context of every question on a video come from one decode of F1 and the
video's r1 lattice (`cader.vlm.frame_grid`, `cader.evaluate.method.whole_video`); crops decode their own window.

Pure tests of the grid and of how an RGR segment's times move onto it (hand-computed cases), then runs over the
barcode video (60 s at 10 fps, each frame readable back to its index) with scripted models that reject every
proposal, so both reflections resample: whole-video decodes are counted at the reader."""

from itertools import pairwise

import numpy as np
import pytest
from cader.dev.scripted import ScriptedBackend, question_of
from cader.evaluate.backends.base import Generation
from cader.evaluate.benchmarks.base import Sample
from cader.evaluate.method.config import CaderConfig
from cader.evaluate.runner import records_of
from cader.vlm.frame_grid import (
    FrameGrid,
    GridFrames,
    capped_counts,
    frames_at,
    grid_bytes,
    grid_times,
    lattice_times,
    nearest_positions,
    plan_bytes,
    plan_grid,
    rgr_positions,
    snap_segments,
    uniform_frames,
)
from cader.vlm.video import Frames, VideoReader

LETTERS = ["A", "B", "C", "D"]
UNSURE = [0.0, 0.1, 0.0, 0.0]


# ---- the grid and the mapping: pure --------------------------------------------------------------------------------


def test_lattice_times_are_one_step_apart_over_the_whole_video():
    assert lattice_times(10.0, 1.0) == pytest.approx(list(range(10)))   # whole seconds: the backbone rule's phase
    assert lattice_times(10.7, 1.0) == pytest.approx(list(range(11)))
    assert lattice_times(10.0, 1.0, 0.5) == pytest.approx([0.5 + k for k in range(10)])   # = uniform_times(0, 10, 1)
    assert lattice_times(10.7, 1.0, 0.5) == pytest.approx([0.5 + k for k in range(11)])   # 10.5 < 10.7: 1 s apart
    assert lattice_times(10.5, 1.0, 0.5) == pytest.approx([0.5 + k for k in range(10)])   # 10.5 is the end: outside
    assert lattice_times(3.0, 2.0) == pytest.approx([0.0, 0.5, 1.0, 1.5, 2.0, 2.5])
    assert lattice_times(0.3, 1.0, 0.5) == pytest.approx([0.15])   # no time of that phase inside: its middle
    assert lattice_times(0.3, 1.0) == pytest.approx([0.0]) and len(lattice_times(0.0, 1.0)) == 0


def test_grid_times_are_the_bin_centre_f1_times_capped():
    assert grid_times(10.0, 1.0) == pytest.approx([0.5 + k for k in range(10)])
    assert grid_times(10.7, 1.0) == pytest.approx([1.07 * (k + 0.5) for k in range(10)])  # spacing D / floor(D r1)
    assert grid_times(0.5, 1.0) == pytest.approx([0.25])  # shorter than a frame interval: its middle, as F1
    assert grid_times(100.0, 1.0, max_frames=4) == pytest.approx([0.5, 33.5, 66.5, 99.5])  # positions 0, 33, 66, 99
    assert len(grid_times(0.0, 1.0)) == 0


def test_frames_at_and_uniform_frames_hand_computed():
    starts = np.array([0.0, 0.5, 2.0, 2.1])   # a variable-rate video of 3 s
    assert frames_at(starts, [0.0, 0.49, 0.5, 1.99, 2.05, 9.0, -1.0]).tolist() == [0, 0, 1, 1, 2, 3, 0]
    # bin centres at 1 fps over 3 s: 0.5, 1.5, 2.5 -> frames 1, 1, 3 -> {1, 3}
    assert uniform_frames(starts, 3.0, 1.0).tolist() == [1, 3]
    assert uniform_frames(starts, 3.0, 1.0, rule="backbone").tolist() == [0, 1, 2, 3]   # 4 frames at least
    assert uniform_frames(starts, 3.0, 1.0, start=0.1, end=0.3).tolist() == [0]   # no bin: the middle
    with pytest.raises(ValueError, match="frame rule"):
        uniform_frames(starts, 3.0, 1.0, rule="middle")


def test_plan_grid_is_f1_and_the_lattice_hand_computed():
    starts = np.arange(100) / 10.0   # 10 s at 10 fps
    plan = plan_grid(starts, 10.0, 1.0, 4, "backbone")
    assert plan.f1.tolist() == [0, 33, 66, 99]   # round(linspace(0, 99, 4)): the cap spread over the whole video
    assert plan.lattice_frames.tolist() == [10 * k for k in range(10)]   # the frames showing 0, 1, ..., 9 s
    assert plan.indices.tolist() == sorted({0, 33, 66, 99} | {10 * k for k in range(10)})   # frame 0 in both
    bins = plan_grid(starts, 10.0, 1.0, None, "bin_centre")   # F1 is the lattice itself: one set of frames
    assert bins.f1.tolist() == bins.lattice_frames.tolist() == bins.indices.tolist() == [5 + 10 * k for k in range(10)]
    assert len(plan_grid(starts, 10.0, 1.0, 4, "backbone", with_lattice=False).lattice) == 0
    # 30 minutes of 30-fps 16:9 at 65,536 px: 1,800 lattice frames and 768 of F1 (26 of them on the lattice, frame 0
    # among them), plus F1's copy, at 192 x 320 x 3 bytes each
    long = plan_grid(np.arange(54_000) / 30.0, 1800.0, 1.0, 768, "backbone")
    assert len(long.lattice) == 1800 and len(long.f1) == 768 and len(long.indices) == 1800 + 768 - 26
    assert plan_bytes(long, 720, 1280, 65_536) == (2542 + 768) * 192 * 320 * 3   # 610 MB


def test_capped_counts_are_what_cap_times_keeps_of_each_block():
    # 10 times, cap 4: positions round(linspace(0, 9, 4)) = 0, 3, 6, 9 -> blocks [0, 3), [3, 8), [8, 10)
    assert capped_counts([3, 5, 2], 4) == [1, 2, 1]
    assert capped_counts([3, 5, 2], 10) == [3, 5, 2] == capped_counts([3, 5, 2], None)
    assert capped_counts([0, 6], 3) == [0, 3]


def test_nearest_positions_ties_go_to_the_earlier():
    grid = np.array([0.5, 1.5, 2.5, 3.5])
    assert nearest_positions(grid, np.array([0.0, 1.0, 1.1, 2.0, 9.0])).tolist() == [0, 0, 1, 1, 3]
    assert nearest_positions(np.array([5.0]), np.array([0.0, 9.0])).tolist() == [0, 0]


def test_snap_segments_hand_computed():
    grid = grid_times(10.0, 1.0)  # 0.5, 1.5, ..., 9.5
    # explored [2, 5) at f = 0.7: n = floor(3 * 0.7) = 2 times 2.75, 4.25 -> nearest 2.5, 4.5 (positions 2, 4)
    assert snap_segments([(2.0, 5.0, 2)], grid).tolist() == [2, 4]
    # as many grid times as frames asked for: all of them
    assert snap_segments([(1.5, 3.5, 2)], grid).tolist() == [1, 2]
    # [0, 4) at 0.5 fps: times 1.0, 3.0, both ties -> the earlier grid times 0.5, 2.5
    assert snap_segments([(0.0, 4.0, 2)], grid).tolist() == [0, 2]
    # a segment and its unexplored neighbour never share a grid time: [0, 2) gets 0.5, 1.5; [2, 5) one of 2.5..4.5
    assert snap_segments([(0.0, 2.0, 2), (2.0, 5.0, 1)], grid).tolist() == [0, 1, 3]
    # the bin-centre grid of D = 10.7 is 1.07 s apart: [0.6, 2.65) holds only 1.605, one fewer than the 2 asked for
    assert snap_segments([(0.6, 2.65, 2)], grid_times(10.7, 1.0)).tolist() == [1]
    # ... the lattice, 1 s apart, holds both (1.5, 2.5)
    assert snap_segments([(0.6, 2.65, 2)], lattice_times(10.7, 1.0)).tolist() == [1, 2]
    assert snap_segments([(3.0, 3.0, 1), (4.0, 6.0, 0)], grid).tolist() == []


def test_rgr_positions_count_against_algorithm_2():
    segments = [(0.0, 20.0, 20), (20.0, 30.0, 5), (30.0, 60.0, 30)]   # 55 frames; cap 16: 6 + 1 + 9 of them
    on_lattice = rgr_positions(segments, 16, lattice_times(60.0, 1.0))
    assert (on_lattice.planned, on_lattice.capped, on_lattice.lost, len(on_lattice.positions)) == (55, 16, 0, 16)
    f1_times = np.array([7.5, 22.5, 37.5, 52.5])   # a sparse F1: the speed option's grid holds 1 + 1 + 2 of them
    on_f1 = rgr_positions(segments, 16, f1_times)
    assert (on_f1.capped, on_f1.lost, on_f1.positions.tolist()) == (16, 12, [0, 1, 2, 3])


@pytest.mark.parametrize("seed", range(20))
def test_snapped_frames_stay_inside_their_segment_distinct_and_near(seed):
    rng = np.random.default_rng(seed)
    duration, r1 = float(rng.uniform(5, 400)), 1.0
    grid = grid_times(duration, r1)
    cuts = np.sort(rng.uniform(0, duration, 6))
    bounds = [0.0, *cuts, duration]
    segments = []
    for s, e in pairwise(bounds):
        rate = r1 if rng.random() < 0.5 else float(rng.uniform(0.4, 1.0))
        segments.append((s, e, int(np.floor((e - s) * rate + 1e-9))))
    positions = snap_segments(segments, grid)
    assert len(set(positions.tolist())) == len(positions)
    for s, e, n in segments:
        inside = positions[(grid[positions] >= s) & (grid[positions] < e)]
        held = int(np.count_nonzero((grid >= s) & (grid < e)))
        assert len(inside) == min(n, held) and held >= n - 1  # n kept whenever the segment holds n grid times
    assert len(positions) == sum(min(n, int(np.count_nonzero((grid >= s) & (grid < e)))) for s, e, n in segments)


def test_frame_grid_selects_the_frame_showing_each_grid_time():
    def frames(times):
        times = np.asarray(times, float)
        return Frames(np.arange(len(times), dtype=np.uint8).reshape(-1, 1, 1, 1).repeat(3, -1), times,
                      np.arange(len(times)) * 20, 10.0)

    grid = FrameGrid.of(np.array([0.5, 1.5, 2.5]), frames([0.0, 2.0]))  # a video slower than the grid
    assert grid.rows.tolist() == [0, 0, 1]
    picked = grid.select([0, 1])
    assert len(picked) == 1 and picked.timestamps.tolist() == [0.0]
    whole = FrameGrid.of(np.array([0.5, 1.5]), frames([0.5, 1.5]))
    assert whole.select([1, 0]) is whole.frames  # all of it: the decode itself, no copy
    assert grid_bytes(1800, 720, 1280, 65_536) == 1800 * 192 * 320 * 3  # 332 MB: 30 min of 720p at 1 fps


def test_grid_frames_hand_f1_and_the_lattice_their_rows():
    plan = plan_grid(np.arange(100) / 10.0, 10.0, 1.0, 4, "backbone")
    decoded = Frames(np.zeros((len(plan.indices), 1, 1, 3), np.uint8), plan.indices / 10.0, plan.indices, 10.0)
    grid = GridFrames.of(decoded, plan)
    f1 = grid.f1()
    assert f1.indices.tolist() == [0, 33, 66, 99] and grid.f1() is f1   # one copy for every question
    lattice = grid.lattice_grid()
    assert grid.indices[lattice.rows].tolist() == plan.lattice_frames.tolist()
    with pytest.raises(ValueError, match="not the grid"):
        GridFrames.of(f1, plan)


# ---- runs over a video: decodes counted ----------------------------------------------------------------------------


class Rejecting(ScriptedBackend):
    """Every question unsure, every crop rejected (P_yes 0.1), each question proposing its own windows."""

    WINDOWS = ((20, 30), (40, 48), (5, 12))

    def __init__(self, n):
        super().__init__({f"q{i}": UNSURE for i in range(n)}, p_yes=0.1)
        self.asked = {}

    def generate(self, prompts, max_new_tokens):
        out = []
        for p in prompts:
            q = int(question_of(p).removeprefix("q"))
            tries = self.asked[q] = self.asked.get(q, -1) + 1
            s, e = self.WINDOWS[(q + tries) % 3]
            out.append(Generation(f'"relevant_windows": [[{s + q}, {e + q}]]', 5, 3))
        return out


@pytest.fixture
def decodes(monkeypatch):
    """(first index, last index, count) of every decode the readers make."""
    seen = []
    decode = VideoReader.decode_indices

    def counting(self, indices, max_pixels=None):
        indices = np.asarray(indices)
        if len(indices):
            seen.append((int(indices[0]), int(indices[-1]), len(indices), self.num_frames))
        return decode(self, indices, max_pixels)

    monkeypatch.setattr(VideoReader, "decode_indices", counting)
    return seen


def whole_video(decodes) -> int:
    """Decodes that span most of the video (F1, a grid, an RGR context); crops span 10 s of 60."""
    return sum(last - first > 0.5 * n_frames for first, last, _, n_frames in decodes)


def run(barcode_video, n, concurrency=1, **cfg):
    samples = [Sample("bench", f"s{i}", barcode_video.name, f"q{i}", ["a", "b", "c", "d"], LETTERS, "B", 60.0, {})
               for i in range(n)]
    cfg = CaderConfig(**{"max_frames": 64, "max_pixels": 2048, "max_new_tokens_propose": 16,
                         "max_new_tokens_answer": 16, **cfg})
    backend = Rejecting(n)
    return [r for _, r in records_of(samples, backend, backend, cfg, lambda s: barcode_video,
                                     concurrency=concurrency, group_by_video=True)]


def comparable(record):
    """A record without what may differ between the grid and the per-context path: timing and the frames decoded."""
    cost = {k: v for k, v in record["cost"].items() if k not in ("seconds", "frames_decoded", "grid_fallback",
                                                                  "frames_shared")}
    return {**record, "cost": cost}


def test_a_video_with_several_questions_is_decoded_whole_once(barcode_video, decodes):
    records = run(barcode_video, 3)
    assert all(r["error"] is None and r["route"] == "stage2" for r in records)
    resamples = [s for r in records for s in r["stage2"]["steps"] if s["phase"] == "resample"]
    assert len(resamples) == 6 and all(s["n_frames"] > 0 for s in resamples)  # two reflections per question
    assert whole_video(decodes) == 1  # F1 and the lattice, for 3 questions x (1 F1 + 2 RGR contexts)
    assert all("grid_fallback" not in r["cost"] and "rgr_frames_lost" not in r["cost"] for r in records)
    # what a run decoded, as its records count it: the whole-video decode once, then the crops only
    grid = len(VideoReader(barcode_video).plan_grid(1.0, 64, "backbone").indices)
    # the lattice 0, 10, ..., 590 and F1 round(linspace(0, 599, 60)), 10.15 frames apart: 0, 10, 20, 30 in both
    assert grid == 60 + 60 - 4
    crops = sum(count for first, last, count, n in decodes if last - first <= 0.5 * n)
    assert sum(r["cost"]["frames_decoded"] - r["cost"].get("frames_shared", 0) for r in records) == grid + crops


def test_beyond_the_bound_each_context_is_decoded_alone_the_same_frames_and_counted(barcode_video, decodes):
    grid = run(barcode_video, 3)
    decodes.clear()
    alone = run(barcode_video, 3, grid_max_bytes=1)
    assert whole_video(decodes) == 1 + 3 * 2  # F1 once (shared), each RGR context on its own
    assert [r["cost"].get("grid_fallback") for r in alone] == [1, 1, 1]
    # the very same records, the contexts' frame counts included: only what was decoded differs
    assert [comparable(r) for r in grid] == [comparable(r) for r in alone]
    from cader.evaluate.report import build_report
    assert build_report(alone, provenance={})["cost"]["total"]["grid_fallback"] == 3  # report.json counts them


def test_exit_and_rgr_free_samples_keep_their_records_exactly(barcode_video):
    """Where the frames are the same (F1, crops), so are the records, cost included."""
    for variant in ("no_rgr", "no_reflection"):
        on, off = run(barcode_video, 2, variant=variant), run(barcode_video, 2, variant=variant, grid_max_bytes=0)
        strip = [{**r, "cost": {k: v for k, v in r["cost"].items() if k != "seconds"}} for r in on + off]
        assert strip[:2] == strip[2:]


@pytest.mark.parametrize("rule", ["backbone", "bin_centre"])
def test_rgr_context_frames_are_algorithm_2s_and_a_direct_decode(barcode_video, rule):
    from cader.evaluate.method.stage1 import Cost
    from cader.evaluate.method.whole_video import WholeVideo

    reader = VideoReader(barcode_video, decode_workers=1)
    scored = [(20.0, 30.0, 0.5), (25.0, 40.0, 0.6)]
    for max_frames in (64, 16):
        cfg = CaderConfig(max_frames=max_frames, max_pixels=2048, frame_rule=rule)
        whole = WholeVideo(reader, cfg, Cost())
        f1 = whole.f1()
        direct_f1 = reader.sample_uniform(1.0, max_frames=max_frames, max_pixels=2048, rule=rule)
        assert np.array_equal(f1.indices, direct_f1.indices) and np.array_equal(f1.frames, direct_f1.frames)
        context = whole.rgr_context(scored, reader.duration)
        direct = reader.decode_indices(context.frames.indices, 2048)
        assert np.array_equal(context.frames.frames, direct.frames)
        assert np.array_equal(context.frames.timestamps, direct.timestamps)
        # N_reflect of Eq. 9: [20, 25) at .5 -> 2, [25, 40) at .6 -> 9, unexplored 20 + 20 s at 1 fps -> 40
        assert context.planned == 2 + 9 + 40 and context.lost is None
        # cap 16: the cap keeps 6 + 1 + 3 + 6 of the four segments, and the lattice gives each all of its count
        per_segment = [6, 1, 3, 6] if max_frames == 16 else [20, 2, 9, 20]
        assert len(context.frames) == context.capped == sum(per_segment)
        times = context.frames.timestamps
        held = [int(np.count_nonzero((times >= s - 0.1) & (times < e - 0.1)))   # a frame shows its lattice time
                for s, e in ((0, 20), (20, 25), (25, 40), (40, 60))]          # (up to a frame, 0.1 s, before it)
        assert held == per_segment


def test_the_speed_option_takes_contexts_from_f1_and_counts_what_they_lose(barcode_video, decodes):
    exact = run(barcode_video, 2, max_frames=16)
    decodes.clear()
    fast = run(barcode_video, 2, max_frames=16, trade_rgr_frames_for_speed=True)
    assert whole_video(decodes) == 1   # F1 alone: 16 frames
    steps = [s for r in fast for s in r["stage2"]["steps"] if s["phase"] == "resample"]
    exact_steps = [s for r in exact for s in r["stage2"]["steps"] if s["phase"] == "resample"]
    assert all(s["frames_lost"] == e["n_frames"] - s["n_frames"] for s, e in zip(steps, exact_steps))
    assert sum(s["frames_lost"] for s in steps) > 0   # 16 frames over 60 s: F1 is sparser than the segments
    assert [r["cost"]["rgr_frames_lost"] for r in fast] == [
        sum(s["frames_lost"] for s in r["stage2"]["steps"] if s["phase"] == "resample") for r in fast]
    from cader.evaluate.report import build_report
    total = build_report(fast, provenance={})["cost"]["total"]["rgr_frames_lost"]
    assert total == sum(s["frames_lost"] for s in steps)
    # nothing else of the method differs (the scripted models do not look at pixels)

    def method(record):
        trimmed = [{k: v for k, v in s.items() if k not in ("n_frames", "frames_lost")} for s in record["stage2"]["steps"]]
        return {**comparable(record), "cost": {}, "stage2": {**record["stage2"], "steps": trimmed}}

    assert [method(r) for r in fast] == [method(r) for r in exact]


def test_decode_ahead_at_one_sample_at_a_time(barcode_video, monkeypatch, tmp_path):
    """The HF backend's default (--concurrency 1): the next video's whole-video decode runs on the ahead worker."""
    import threading

    decoded_on = []
    decode = VideoReader.decode_indices

    def recording(self, indices, max_pixels=None):
        decoded_on.append(threading.current_thread().name)
        return decode(self, indices, max_pixels)

    monkeypatch.setattr(VideoReader, "decode_indices", recording)
    for name in ("a", "b"):
        (tmp_path / f"{name}.mp4").symlink_to(barcode_video)
    samples = [Sample("bench", f"s{i}", f"{v}.mp4", f"q{i}", ["a", "b", "c", "d"], LETTERS, "B", 60.0, {})
               for i, v in enumerate("aabb")]
    cfg = CaderConfig(max_frames=8, max_pixels=2048, max_new_tokens_propose=16, max_new_tokens_answer=16)
    backend = Rejecting(4)
    records = [r for _, r in records_of(samples, backend, backend, cfg, lambda s: tmp_path / s.video,
                                        concurrency=1, group_by_video=True)]
    assert len(records) == 4 and all(r["error"] is None for r in records)
    assert any(name.startswith("cader-ahead") for name in decoded_on), decoded_on


def test_p14_stage1_forward_size_at_the_paper_settings():
    """768 frames of 720p at 65,536 px (192 x 320): 384 temporal pairs of 12 x 20 patches, merged 2 x 2."""
    from cader.scripts.bench.decode_once import stage1_gpu_seconds

    seconds, seq = stage1_gpu_seconds(768, 192, 320, mfu=0.4, peak_tflops=989.0)
    assert seq == 384 * 12 * 20 // 4 + 8 * 384 + 200   # 26,312 tokens: inside max_model_len 32,768
    assert 1.0 < seconds < 3.0   # the issue's ~1.7 s of an H100 at 40 % MFU


def test_a_record_counts_its_flops_by_role_at_the_models_own_sizes():
    # three calls of a sample: Stage 1, one generation, one verifier score, at hand-checkable sizes
    from cader.calibrate.compute import call_flops
    from cader.evaluate.method.stage1 import Cost
    from cader.vlm.flops import TextShape

    main = TextShape(hidden=4, intermediate=8, layers=1, heads=2, kv_heads=1, head_dim=2, vocab=10)
    verifier = TextShape(hidden=4, intermediate=4, layers=1, heads=2, kv_heads=1, head_dim=2, vocab=10)
    cost = Cost(shapes=(main, verifier))
    cost.calls += [("stage1", 100, 0), ("main", 50, 10), ("verifier", 30, 0)]
    flops = cost.to_dict()["flops"]
    stage1, gen, ver = call_flops(main, 100), call_flops(main, 50, 10), call_flops(verifier, 30)
    assert flops == pytest.approx({"stage1": stage1, "main": stage1 + gen, "verifier": ver,
                                   "total": stage1 + gen + ver}, rel=1e-5)
    assert "flops" not in Cost(shapes=None, calls=[("stage1", 1, 0)]).to_dict()  # no model sizes: not counted


def test_b14_floor_decodes_the_reference_pictures_of_each_window_only(tmp_path):
    """The crops' floor: a window of H.264 with B-frames keeps its I/P pictures (and referenced B's), not the
    unreferenced B-frames, so it decodes fewer pictures than the window holds, and more than none."""
    from cader.scripts.bench.decode_once import reference_pictures_cpu_s
    from conftest import write_coded_video

    path = tmp_path / "b.mp4"
    write_coded_video(path, "libx264", {"bf": "3", "g": "48", "b_strategy": "0"}, n_frames=240, rate=24)
    seconds, pictures = reference_pictures_cpu_s(path, [(2.0, 4.0), (6.0, 8.0)])
    window_pictures = 2 * 2 * 24
    assert seconds >= 0.0 and 0 < pictures < window_pictures


def test_b14_parts_average_and_row_value():
    from cader.scripts.bench.decode_once import decode_parts, per_sample_average
    from cader.scripts.bench.run_all import _b14

    # 1,000 frames: two whole-video decodes (the grid or F1, then a context on its own) and a 40-frame crop
    parts = decode_parts([(0, 999, 10.0), (3, 990, 4.0), (500, 540, 1.5)], 1000)
    assert parts == {"whole": 10.0, "rgr_contexts": [4.0], "crops": 1.5}
    # 38.6 % exit after the whole-video decode; the rest pay it, the contexts and the crops
    assert per_sample_average(parts) == pytest.approx(0.386 * 10.0 + 0.614 * 15.5)
    row = {"ratio_default": 0.55, "ratio_speed": 0.40, "frames_kept": {"default": 1.0}}
    assert _b14(row) == 0.55
    assert np.isnan(_b14({**row, "ratio_speed": 0.45})) and np.isnan(_b14({**row, "frames_kept": {"default": 0.98}}))
