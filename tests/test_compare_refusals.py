"""`cader compare` refuses alignments it cannot justify, and export-lmms writes nothing compare would misread.

Each case failed silently before: a plain run's exported line numbers paired with lmms-eval's document indices, a
multi-task side file's per-task sample ids collided, two files with nothing in common gave a "significant" McNemar.
"""

import json
from pathlib import Path

import pytest
from cader.evaluate.judge.compare import (
    CompareInputError,
    compare_files,
    format_comparison,
    overlap_warnings,
    read_system,
)
from cader.evaluate.lmms.export import export_lmms
from cader.evaluate.lmms.samples import SamplesFileError, read_samples

REPO = Path(__file__).resolve().parents[1]
MLVU = REPO / "tests" / "fixtures" / "lmms_eval_samples" / "baseline_vlm" / "20261201_120000_samples_mlvu_dev.jsonl"


def record(sample_id: str, gold: str | None, pred: str | None, benchmark: str = "mlvu_dev", **extra) -> dict:
    return {"benchmark": benchmark, "sample_id": sample_id, "video": f"{sample_id}.mp4", "duration": None,
            "question": "q", "options": ["a", "b", "c", "d"], "letters": list("ABCD"), "answer": gold, "pred": pred,
            "correct": bool(pred) and pred == gold, "error": None if pred else "video_unreadable: x", **extra}


def full_record(sample_id: str, gold: str | None, pred: str | None, benchmark: str = "mlvu_dev") -> dict:
    """A record with every field of the predictions contract (export-lmms checks them)."""
    from cader.dev.viewer_records import synthetic_records

    template = synthetic_records(1, seed=0)[0]
    return template | record(sample_id, gold, pred, benchmark)


def write(path: Path, rows: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_an_export_of_a_plain_run_never_pairs_its_line_numbers_with_lmms_eval_documents(tmp_path):
    # the plain run answers in another order than lmms-eval's documents: its line numbers are not their indices
    run = write(tmp_path / "run" / "predictions.jsonl", [full_record(f"mlvu-{i}", "A", "A") for i in (5, 3, 1, 0, 2, 4)])
    export_lmms(str(run), str(tmp_path / "export"))
    exported = tmp_path / "export" / "samples_mlvu_dev.jsonl"
    samples = read_samples(exported)
    assert samples.by_doc is None and "line numbers" in samples.no_doc_why
    with pytest.raises(CompareInputError, match="line numbers"):
        compare_files([str(MLVU), str(exported)])


def test_a_multi_task_side_file_lines_up_by_document_within_the_shared_task(tmp_path):
    # `lmms-eval --model cader` over two tasks: sample ids are per-task document numbers, so "0".."5" repeat
    rows = [record(str(i), "A", "A" if i in (1, 4) else "B", "mlvu_dev", lmms={"task": "mlvu_dev", "doc_id": i})
            for i in range(6)]
    rows += [record(str(i), "A", "A", "videomme_long", lmms={"task": "videomme_long", "doc_id": i}) for i in range(6)]
    side = write(tmp_path / "cader" / "predictions.jsonl", rows)
    result = compare_files([str(MLVU), str(side)], n_resamples=200)
    assert result["aligned_by"] == "doc" and result["n"] == 6 and result["warnings"] == []
    # the MLVU fixture is right on docs 0 2 3 5; cader on 1 and 4 (its videomme rows are another comparison)
    m = result["pairs"][0]["mcnemar"]
    assert (m["only_a"], m["only_b"]) == (2, 4)


def test_colliding_ids_without_documents_are_an_error_naming_the_id(tmp_path):
    rows = [record("7", "A", "A", "mlvu_dev"), record("7", "B", "B", "lvbench")]
    side = write(tmp_path / "cader" / "predictions.jsonl", rows)
    other = write(tmp_path / "other" / "predictions.jsonl", [record("7", "A", "A", "mlvu_dev")])
    with pytest.raises(CompareInputError, match=r"sample id '7' belongs to two benchmarks"):
        compare_files([str(other), str(side)])


def test_files_with_no_question_in_common_are_refused(tmp_path):
    a = write(tmp_path / "a" / "predictions.jsonl", [record(f"a{i}", "A", "A") for i in range(20)])
    b = write(tmp_path / "b" / "predictions.jsonl", [record(f"b{i}", "A", "B") for i in range(20)])
    with pytest.raises(CompareInputError, match="no question is answered by every file"):
        compare_files([str(a), str(b)])


def test_a_small_overlap_is_warned_with_its_counts(tmp_path):
    a = write(tmp_path / "a" / "predictions.jsonl", [record(f"q{i}", "A", "A") for i in range(10)])
    b = write(tmp_path / "b" / "predictions.jsonl", [record(f"q{i}", "A", "A") for i in range(5, 20)])
    result = compare_files([str(a), str(b)], n_resamples=100)
    assert result["n"] == 20
    assert result["warnings"] == [
        f"{a} answers 10 of the 20 compared questions (5 answered by every file); its missing answers score 0",
        f"{b} answers 15 of the 20 compared questions (5 answered by every file); its missing answers score 0"]
    assert format_comparison(result).splitlines()[2].startswith("WARNING: ")


def test_overlap_rule_by_hand():
    # 10 questions: 9 answered by the first file (>= 0.9 of them: no warning), 8 by the second (warned)
    ids = [str(i) for i in range(10)]
    first, second = {k: 1.0 for k in ids[:9]}, {k: 1.0 for k in ids[2:]}
    assert overlap_warnings(["a", "b"], [first, second], ids) == [
        "b answers 8 of the 10 compared questions (7 answered by every file); its missing answers score 0"]


@pytest.mark.parametrize("change, message", [
    (lambda lines: lines[1].update(doc_id=None), "line 2: doc_id None is not a document index"),
    (lambda lines: lines[3].update(doc_id=lines[2]["doc_id"]), "is on lines 3 and 4"),
])
def test_samples_with_a_null_or_repeated_doc_id_are_refused_naming_the_lines(tmp_path, change, message):
    lines = [json.loads(x) for x in MLVU.read_text().splitlines()]
    change(lines)
    path = write(tmp_path / "base" / "samples_mlvu_dev.jsonl", lines)
    with pytest.raises(SamplesFileError, match=message):
        read_samples(path)


@pytest.mark.parametrize("doc_ids, message", [
    ([0, None], "line 2: lmms.doc_id None is not a document index"),
    ([0, 0], "lmms-eval document mlvu_dev/0 is on lines 1 and 2"),
])
def test_cader_records_with_a_null_or_repeated_lmms_doc_id_are_refused(tmp_path, doc_ids, message):
    rows = [{**full_record(str(i + 1), "A", "A"), "lmms": {"task": "mlvu_dev", "doc_id": d}}
            for i, d in enumerate(doc_ids)]
    run = write(tmp_path / "run" / "predictions.jsonl", rows)
    with pytest.raises(CompareInputError, match=message):
        read_system(run, "accuracy", None)


def test_export_names_a_task_that_is_no_plain_file_name_and_writes_inside_out_only(tmp_path):
    rows = [full_record("1", "A", "A", "x/../../victim/predictions"), full_record("2", "A", "A", "mlvu_dev"),
            full_record("3", "A", "A", "..")]
    run = write(tmp_path / "run" / "predictions.jsonl", rows)
    results = export_lmms(str(run), str(tmp_path / "out" / "export"))
    assert len(results["problems"]) == 2 and all("is not a plain name" in p for p in results["problems"])
    assert sorted(p.name for p in (tmp_path / "out").rglob("*")) == ["export", "results.json",
                                                                      "samples_mlvu_dev.jsonl"]


def test_a_failed_document_without_a_gold_letter_has_an_empty_target(tmp_path):
    run = write(tmp_path / "run" / "predictions.jsonl", [full_record("1", None, None), full_record("2", "B", "B")])
    export_lmms(str(run), str(tmp_path / "out"))
    lines = [json.loads(x) for x in (tmp_path / "out" / "samples_mlvu_dev.jsonl").read_text().splitlines()]
    assert [line["target"] for line in lines] == ["", "B"]
    assert [line["cader"]["doc_id_from"] for line in lines] == ["line", "line"]


def test_export_results_say_which_mean_they_are(tmp_path):
    run = write(tmp_path / "run" / "predictions.jsonl", [full_record("1", "A", "A"), full_record("2", "A", "B")])
    results = export_lmms(str(run), str(tmp_path / "out"))
    assert results["results"]["mlvu_dev"]["cader_accuracy,none"] == 50.0
    assert "not M-Avg" in results["metric_definitions"]["cader_accuracy"]
