"""Reading predictions.jsonl: bad rows are named by file and line and counted; unusable files fail clearly."""

import json

import numpy as np
import pytest
from cader.calibrate.records import (
    PredictionFileError,
    PredictionRowError,
    read_prediction_file,
    read_predictions,
)
from cader.calibrate.videos import split_fit_select_videos
from cader.dev.calibration_rows import synthetic_prediction_rows


def _write(path, rows):
    with open(path, "w", encoding="utf-8") as fh:
        for row in rows:
            fh.write(row if isinstance(row, str) else json.dumps(row))
            fh.write("\n")
    return path


def split_fit_select(records, seed=0, fit_fraction=0.5, *, by="video"):
    """(fit, select) of the product's split (`split_fit_select_videos`)."""
    return split_fit_select_videos(records, seed, fit_fraction, by=by)[:2]


def cluster(record):
    """(benchmark, video): the videos of these tests are each asked about by one benchmark; a row without a video is
    a cluster of its own."""
    return (record.benchmark, record.video) if record.video else (record.benchmark, "\0sample:" + record.sample_id)


def _good(n=3, bench="synthetic", **kw):
    return synthetic_prediction_rows(bench, n, seed=1, **kw)


def test_reads_good_rows(tmp_path):
    rows = _good(5)
    loaded = read_prediction_file(_write(tmp_path / "p.jsonl", rows))
    assert len(loaded.records) == 5 and not loaded.problems and loaded.rows_read == 5
    rec = loaded.records[2]
    assert rec.line == 3 and rec.letters == ["A", "B", "C", "D"]
    np.testing.assert_array_equal(rec.logits, rows[2]["stage1"]["logits"])
    assert rec.letters[rec.gold] == rows[2]["answer"]
    assert rec.stage2_correct is None


def test_malformed_rows_are_named_counted_and_skipped(tmp_path):
    rows = _good(8)
    nan_row = json.dumps(rows[1]).replace(str(rows[1]["stage1"]["logits"][0]), "NaN", 1)
    no_logits = dict(rows[2], stage1=None)
    failed = dict(rows[3], error="video_unreadable: videos/3.mp4", pred=None, correct=False)
    short = dict(rows[4], stage1=dict(rows[4]["stage1"], logits=[1.0, 2.0]))
    bad_answer = dict(rows[5], answer="Q")
    path = _write(
        tmp_path / "p.jsonl",
        [rows[0], nan_row, no_logits, failed, short, "", bad_answer, "{not json", rows[6]],
    )
    loaded = read_prediction_file(path)
    assert [r.line for r in loaded.records] == [1, 9]
    assert dict(loaded.skipped) == {
        "non_finite": 1,
        "missing_logits": 1,
        "row_error": 1,
        "length_mismatch": 1,
        "empty_line": 1,
        "answer_not_in_letters": 1,
        "bad_json": 1,
    }
    text = [str(p) for p in loaded.problems]
    assert text[0].startswith(f"{path}:2: ") and "NaN" in text[0] and "synthetic-1" in text[0]
    assert text[1].startswith(f"{path}:3: ") and "stage1.logits" in text[1]
    assert any(t.startswith(f"{path}:6: empty line") for t in text)
    assert any(t.startswith(f"{path}:8: ") and "JSON" in t for t in text)


def test_a_non_finite_margin_is_a_rejected_row_named_by_the_contract(tmp_path):
    rows = _good(3)
    rows[1]["stage1"]["margin"] = float("inf")  # the logits are fine: the row still breaks the contract
    path = _write(tmp_path / "p.jsonl", rows)
    loaded = read_prediction_file(path)
    assert [r.line for r in loaded.records] == [1, 3] and dict(loaded.skipped) == {"non_finite": 1}
    (problem,) = loaded.problems
    assert str(problem).startswith(f"{path}:2: ") and problem.reason == "non_finite"
    assert "stage1.margin: " in problem.message and "Infinity" in problem.message
    assert rows[1]["sample_id"] in problem.message


def test_strict_raises_on_the_first_bad_row(tmp_path):
    rows = _good(3)
    path = _write(tmp_path / "p.jsonl", [rows[0], dict(rows[1], stage1={"logits": [1.0, None, 0.0, 0.0]})])
    with pytest.raises(PredictionRowError, match=r"p\.jsonl:2: "):
        read_prediction_file(path, strict=True)


def test_empty_missing_and_logit_free_files_fail_clearly(tmp_path):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    with pytest.raises(PredictionFileError, match="empty.jsonl: empty"):
        read_prediction_file(empty)
    with pytest.raises(PredictionFileError, match="nope.jsonl: no such"):
        read_prediction_file(tmp_path / "nope.jsonl")
    no_logits = _write(tmp_path / "nolog.jsonl", [dict(r, stage1={"pred": "A"}) for r in _good(3)])
    with pytest.raises(
        PredictionFileError, match=r"nolog\.jsonl: no usable row.*nolog\.jsonl:1: .*stage1\.logits"
    ):
        read_predictions([no_logits])
    with pytest.raises(PredictionFileError):
        read_predictions([])


def test_stage2_outcomes_and_duplicate_merge(tmp_path):
    s1_rows = _good(4)
    s2_rows = _good(4, stage2_accuracy=0.5)
    a = _write(tmp_path / "a.jsonl", s1_rows)
    b = _write(tmp_path / "b.jsonl", s2_rows)
    loaded = read_predictions([a, b])
    assert len(loaded.records) == 4 and loaded.skipped["duplicate"] == 4
    for rec, row in zip(loaded.records, s2_rows):
        assert rec.source == str(a)
        assert rec.stage2_correct == (row["stage2"]["pred"] == row["answer"])
    # a Stage-2 fallback keeps the Stage-1 answer: the final pred stands in for stage2.pred
    fallback = dict(s2_rows[0], stage2=dict(s2_rows[0]["stage2"], pred=None, fallback="too_broad"), pred="A")
    rec = read_prediction_file(_write(tmp_path / "c.jsonl", [fallback])).records[0]
    assert rec.stage2_correct == (fallback["answer"] == "A")


def _records(tmp_path, sizes):
    paths = [
        _write(tmp_path / f"{b}.jsonl", synthetic_prediction_rows(b, n, seed=i))
        for i, (b, n) in enumerate(sizes)
    ]
    return paths, read_predictions(paths).records


def test_split_is_disjoint_stratified_and_reproducible(tmp_path):
    paths, records = _records(tmp_path, [("bench_a", 40), ("bench_b", 21)])
    fit, sel = split_fit_select(records, seed=3)
    assert set(fit).isdisjoint(sel) and len(fit) + len(sel) == len(records)
    bench = np.array([r.benchmark for r in records])
    assert (bench[fit] == "bench_a").sum() == 20 and (bench[fit] == "bench_b").sum() == 10
    again_fit, _ = split_fit_select(records, seed=3)
    np.testing.assert_array_equal(fit, again_fit)
    other_fit, _ = split_fit_select(records, seed=4)
    assert set(other_fit) != set(fit)
    # reading the files in the other order gives the same samples in each half
    reversed_records = read_predictions(paths[::-1]).records
    rev_fit, _ = split_fit_select(reversed_records, seed=3)
    assert {records[i].key for i in fit} == {reversed_records[i].key for i in rev_fit}


def _clustered_rows(bench, videos, per_video, seed=0):
    rows = synthetic_prediction_rows(bench, videos * per_video, seed=seed)
    for i, row in enumerate(rows):
        row["video"] = f"videos/{bench}-{i // per_video}.mp4"
    return rows


def test_video_split_keeps_each_video_on_one_side_stratified_by_benchmark(tmp_path):
    path = _write(tmp_path / "p.jsonl", _clustered_rows("bench_a", 10, 4) + _clustered_rows("bench_b", 5, 3, seed=1))
    records = read_predictions([path]).records
    assert records[5].video == "videos/bench_a-1.mp4" and cluster(records[5]) == ("bench_a", "videos/bench_a-1.mp4")
    fit, sel = split_fit_select(records, seed=3)  # by video is the default
    assert set(fit).isdisjoint(sel) and len(fit) + len(sel) == len(records)
    fit_videos = {cluster(records[i]) for i in fit}
    assert fit_videos.isdisjoint({cluster(records[i]) for i in sel})
    # floor(videos * fraction) videos of each benchmark: 5 of bench_a (20 questions), 2 of bench_b (6 questions)
    assert sum(v[0] == "bench_a" for v in fit_videos) == 5 and sum(v[0] == "bench_b" for v in fit_videos) == 2
    assert len(fit) == 5 * 4 + 2 * 3
    np.testing.assert_array_equal(fit, split_fit_select(records, seed=3)[0])
    # the question-level option mixes a video's questions across both sides
    q_fit, q_sel = split_fit_select(records, seed=3, by="question")
    assert {cluster(records[i]) for i in q_fit} & {cluster(records[i]) for i in q_sel}


def test_one_question_per_video_splits_as_the_question_level_option(tmp_path):
    _, records = _records(tmp_path, [("bench_a", 40), ("bench_b", 21)])
    for seed in range(3):
        by_video, by_question = split_fit_select(records, seed=seed), split_fit_select(records, seed=seed, by="question")
        np.testing.assert_array_equal(by_video[0], by_question[0])


def test_rows_without_video_are_counted_and_split_alone(tmp_path):
    rows = _clustered_rows("bench_a", 3, 2)
    rows[0].pop("video")
    loaded = read_predictions([_write(tmp_path / "p.jsonl", rows)])
    assert loaded.rows_without_video == 1 and loaded.records[0].video is None
    assert cluster(loaded.records[0]) != cluster(loaded.records[1])  # its video-mate cannot be known


def test_a_single_video_falls_back_to_the_question_split_and_says_so(tmp_path, caplog):
    records = read_predictions([_write(tmp_path / "p.jsonl", _clustered_rows("bench_a", 1, 6))]).records
    with caplog.at_level("WARNING", logger="cader.calibrate.videos"):
        fit, sel = split_fit_select(records, seed=2)
    assert "splitting questions instead" in caplog.text
    by_question = split_fit_select(records, seed=2, by="question")
    np.testing.assert_array_equal(fit, by_question[0])
    np.testing.assert_array_equal(sel, by_question[1])
    assert len(fit) == 3
    with pytest.raises(ValueError, match="split unit"):
        split_fit_select(records, by="frame")


def test_rows_without_video_are_counted_once_across_files(tmp_path):
    rows = _clustered_rows("bench_a", 3, 2)
    rows[0].pop("video")
    paths = [_write(tmp_path / "a.jsonl", rows), _write(tmp_path / "b.jsonl", rows)]  # the same samples twice
    loaded = read_predictions(paths)
    assert len(loaded.records) == 6 and loaded.skipped["duplicate"] == 6 and loaded.rows_without_video == 1
