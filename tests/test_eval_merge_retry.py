"""`cader merge` after shards were rerun with --retry_failed: the merged file takes the shards' clean records, not the
failures an earlier merge already holds (issue 37: 4 of 24 stayed failed in the merged file and its report)."""

import shutil

from cader.dev.scripted import ScriptedBackend
from cader.evaluate.benchmarks.base import Sample
from cader.evaluate.method.config import CaderConfig
from cader.evaluate.runner import merge_shards, read_records, run_samples
from cader.evaluate.shards import predictions_path, select_samples

CONFIDENT = [0.0, 40.0, 0.0, 0.0]  # B with margin ~1: an early exit, no Stage 2


def samples_on(videos: list[str]) -> list[Sample]:
    return [Sample("bench", f"s{i}", video, f"q{i}", ["a", "b", "c", "d"], ["A", "B", "C", "D"], "B", 60.0, {})
            for i, video in enumerate(videos)]


def run_shards(samples, root, out, retry_failed=False):
    backend = ScriptedBackend({s.question: CONFIDENT for s in samples})
    cfg = CaderConfig(max_frames=8, max_pixels=2048)
    for rank in range(2):
        run_samples(select_samples(samples, shard=(rank, 2)), root, predictions_path(out, (rank, 2)), backend, backend,
                    cfg, video_path=lambda s, r: r / s.video, progress=False, retry_failed=retry_failed)


def test_a_retried_shard_replaces_the_failures_an_earlier_merge_kept(tmp_path, barcode_video):
    root = tmp_path / "videos"
    root.mkdir()
    shutil.copy(barcode_video, root / "a.mp4")
    samples = samples_on(["a.mp4", "b.mp4", "a.mp4", "b.mp4"])  # b.mp4 is missing: its questions fail
    out = tmp_path / "run"
    run_shards(samples, root, out)
    merge_shards(out)
    assert {r["sample_id"] for r in read_records(out / "predictions.jsonl") if r["error"]} == {"s1", "s3"}
    shutil.copy(barcode_video, root / "b.mp4")  # the user puts the missing video in place and retries each shard
    run_shards(samples, root, out, retry_failed=True)
    target, n = merge_shards(out)
    merged = read_records(target)
    assert n == 4 and sorted(r["sample_id"] for r in merged) == ["s0", "s1", "s2", "s3"]
    assert [r["sample_id"] for r in merged if r["error"]] == []
    assert {r["pred"] for r in merged} == {"B"}


def test_a_failure_never_replaces_a_success_and_between_failures_the_first_stays(tmp_path, barcode_video):
    root = tmp_path / "videos"
    root.mkdir()
    shutil.copy(barcode_video, root / "a.mp4")
    out = tmp_path / "run"
    run_shards(samples_on(["a.mp4", "b.mp4"]), root, out)
    merge_shards(out)
    first = {r["sample_id"]: r for r in read_records(out / "predictions.jsonl")}
    (root / "a.mp4").unlink()  # now every video is missing: a rerun of the shards fails everything
    for shard in out.glob("predictions.shard-*"):
        shard.unlink()
    run_shards(samples_on(["a.mp4", "b.mp4"]), root, out)
    merged = {r["sample_id"]: r for r in read_records(merge_shards(out)[0])}
    assert merged["s0"]["error"] is None and merged["s0"] == first["s0"]
    assert merged["s1"] == first["s1"] and merged["s1"]["error"]
