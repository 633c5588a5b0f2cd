"""`cader compare` between a cader run and an lmms-eval `--log_samples` run of another model, question by question.

The samples files under tests/fixtures/lmms_eval_samples/ were written by lmms-eval 0.7.3's own code
(make_samples.py there, PROVENANCE.md); no lmms-eval is needed here."""

import importlib
import json
from pathlib import Path

import pytest
from cader.evaluate.judge.compare import CompareInputError, compare_files, format_comparison
from cader.evaluate.lmms.samples import read_samples

REPO = Path(__file__).resolve().parents[1]
BASELINE = REPO / "tests" / "fixtures" / "lmms_eval_samples" / "baseline_vlm"
VIDEOMME = BASELINE / "20261201_120000_samples_videomme_long.jsonl"
LONGVIDEOBENCH = BASELINE / "20261201_120000_samples_longvideobench_val_v.jsonl"
LVBENCH = BASELINE / "20261201_120000_samples_lvbench.jsonl"
MLVU = BASELINE / "20261201_120000_samples_mlvu_dev.jsonl"


def entry_main(argv: list[str]) -> None:
    entry = importlib.import_module("cader.evaluate.judge.cli")
    entry.main(argv)


def record(sample_id: str, gold: str, pred: str | None, benchmark: str = "videomme_long", **extra) -> dict:
    return {"benchmark": benchmark, "sample_id": sample_id, "video": f"{sample_id}.mp4", "duration": None,
            "question": "q", "options": ["a", "b", "c", "d"], "letters": list("ABCD"), "answer": gold, "pred": pred,
            "correct": pred == gold if pred else False, "error": None if pred else "video_unreadable: x", **extra}


def write_run(folder: Path, records: list[dict]) -> Path:
    folder.mkdir(parents=True)
    path = folder / "predictions.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def test_lmms_eval_rows_read_as_the_tasks_own_scorers_read_them():
    # by hand from make_samples.py: Video-MME pred_answer vs answer ("" for the reply with no letter)
    assert read_samples(VIDEOMME).by_question == {
        "001-1": 1, "001-2": 1, "001-3": 0, "002-1": 1, "002-2": 0, "002-3": 1, "003-1": 1, "003-2": 0,
        "003-3": 0, "004-1": 1}
    # LongVideoBench parsed_pred vs chr(65 + correct_choice); lvb_q05's gold is the fifth option, E
    assert read_samples(LONGVIDEOBENCH).by_question == {
        "lvb_q01": 1, "lvb_q02": 1, "lvb_q03": 0, "lvb_q04": 1, "lvb_q05": 0, "lvb_q06": 1}
    lvbench = read_samples(LVBENCH)
    assert lvbench.by_question is None and "bare bool" in lvbench.no_key_why
    assert lvbench.by_doc == {f"lvbench/{i}": float(ok) for i, ok in enumerate([1, 0, 1, 1, 0, 1])}
    assert (lvbench.task, lvbench.metric, lvbench.problems) == ("lvbench", "lvbench_score", [])
    # MLVU dev: pred_answer (lmms-eval's letter extraction of the reply, "" for none) vs answer; known by doc only
    mlvu = read_samples(MLVU)
    assert mlvu.by_question is None and "question text" in mlvu.no_key_why
    assert mlvu.by_doc == {f"mlvu_dev/{i}": float(ok) for i, ok in enumerate([1, 0, 1, 1, 0, 1])}
    assert (mlvu.task, mlvu.metric, mlvu.problems) == ("mlvu_dev", "mlvu_percetion_score", [])


def test_a_cader_run_pairs_with_another_models_lmms_eval_samples(tmp_path):
    # golds of the fixture's ten questions, plus 005-1 that only cader answered; cader has no answer for 004-1
    golds = {"001-1": "A", "001-2": "B", "001-3": "C", "002-1": "D", "002-2": "A", "002-3": "B", "003-1": "C",
             "003-2": "D", "003-3": "A", "005-1": "A"}
    cader_preds = {"001-1": "A", "001-2": "C", "001-3": "C", "002-1": "D", "002-2": "A", "002-3": "B",
                   "003-1": "C", "003-2": "D", "003-3": "B", "005-1": "A"}
    run = write_run(tmp_path / "cader", [record(k, golds[k], cader_preds[k]) for k in golds])
    result = compare_files([str(VIDEOMME), str(run)], n_resamples=500)
    assert result["aligned_by"] == "question" and result["n"] == 11
    baseline, cader = result["systems"]["baseline_vlm"], result["systems"]["cader"]
    assert baseline["missing"] == ["005-1"] and cader["missing"] == ["004-1"]
    assert baseline["source"] == "lmms-eval samples of videomme_long (videomme_perception_score)"
    # baseline right: 001-1 001-2 002-1 002-3 003-1 004-1 (6); cader right: 001-1 001-3 002-1 002-2 002-3 003-1
    # 003-2 005-1 (8). Only cader: 001-3 002-2 003-2 005-1 (4); only the baseline: 001-2 004-1 (2)
    assert baseline["mean"] == pytest.approx(6 / 11) and cader["mean"] == pytest.approx(8 / 11)
    pair = result["pairs"][0]
    assert (pair["a"], pair["b"]) == ("cader", "baseline_vlm")
    assert (pair["mcnemar"]["only_a"], pair["mcnemar"]["only_b"]) == (4, 2)
    assert pair["mcnemar"]["p_value"] == pytest.approx(2 * (1 + 6 + 15) / 64)  # 2 P(Bin(6, 1/2) <= 2)
    assert pair["bootstrap"]["diff"] == pytest.approx(2 / 11)
    text = format_comparison(result)
    assert "McNemar exact: 4 vs 2 discordant" in text and "baseline_vlm: lmms-eval samples of videomme_long" in text


def test_longvideobench_samples_line_up_with_cader_sample_ids(tmp_path):
    run = write_run(tmp_path / "cader", [record(f"lvb_q0{i}", "A", "A" if i % 2 else "B", "longvideobench_val")
                                         for i in range(1, 7)])
    pair = compare_files([str(LONGVIDEOBENCH), str(run)], n_resamples=200)["pairs"][0]
    # cader right on q01 q03 q05; baseline on q01 q02 q04 q06: only cader q03 q05, only baseline q02 q04 q06
    assert (pair["mcnemar"]["only_a"], pair["mcnemar"]["only_b"]) == (2, 3)


def test_mlvu_samples_pair_by_doc_id_with_a_cader_run_through_lmms_eval(tmp_path):
    side = write_run(tmp_path / "cader", [
        record(f"m{i}", "A", "A" if i in (1, 4) else "B", "mlvu_dev", lmms={"task": "mlvu_dev", "doc_id": i})
        for i in range(6)])
    result = compare_files([str(MLVU), str(side)], n_resamples=200)
    assert result["aligned_by"] == "doc" and result["n"] == 6
    # cader right on docs 1 and 4, the baseline on 0 2 3 5: discordant on all six
    m = result["pairs"][0]["mcnemar"]
    assert (m["only_a"], m["only_b"]) == (2, 4)


def test_lvbench_samples_pair_by_doc_id_with_a_cader_run_through_lmms_eval_only(tmp_path):
    side = write_run(tmp_path / "cader", [
        record(f"uid-{i:03d}", "A", "A" if i < 3 else "B", "lvbench", lmms={"task": "lvbench", "doc_id": i})
        for i in range(6)])
    result = compare_files([str(LVBENCH), str(side)], n_resamples=200)
    assert result["aligned_by"] == "doc" and result["systems"]["cader"]["missing"] == []
    # cader right on docs 0 1 2; baseline on 0 2 3 5: only cader doc 1, only the baseline docs 3 and 5
    m = result["pairs"][0]["mcnemar"]
    assert (m["only_a"], m["only_b"]) == (1, 2)
    plain = write_run(tmp_path / "plain", [record(f"uid-{i:03d}", "A", "A", "lvbench") for i in range(6)])
    with pytest.raises(CompareInputError) as caught:
        compare_files([str(LVBENCH), str(plain)])
    assert str(caught.value).startswith(f"{plain}: cannot be lined up with {LVBENCH}: lmms-eval's lvbench")
    renamed = tmp_path / "renamed" / "baseline.jsonl"
    renamed.parent.mkdir()
    renamed.write_text(LVBENCH.read_text())
    with pytest.raises(CompareInputError, match=r"baseline.jsonl: .* file name does not say the task"):
        compare_files([str(renamed), str(side)])


def test_a_metric_that_is_not_correct_or_incorrect_is_a_one_line_error(tmp_path, capsys):
    samples = tmp_path / "other" / "20261201_120000_samples_caption_task.jsonl"
    samples.parent.mkdir()
    samples.write_text("".join(json.dumps({"doc_id": i, "target": "a cat", "filtered_resps": "a dog",
                                           "doc_hash": "h", "rouge_l": 0.25 * i, "input": "describe"}) + "\n"
                               for i in range(1, 3)))
    run = write_run(tmp_path / "cader", [record("001-1", "A", "A")])
    with pytest.raises(CompareInputError) as caught:
        compare_files([str(run), str(samples)])
    message = str(caught.value)
    assert message.startswith(f"{samples}: lmms-eval samples whose metric cannot be read as correct/incorrect")
    assert "rouge_l = 0.25" in message
    with pytest.raises(SystemExit) as exited:
        entry_main(["compare", str(run), str(samples)])
    assert str(exited.value.code) == f"input error: {message}"
    assert "Traceback" not in capsys.readouterr().err


def test_a_file_that_is_neither_is_named(tmp_path):
    other = tmp_path / "other.jsonl"
    other.write_text(json.dumps({"prompt": "x", "output": "B"}) + "\n")
    run = write_run(tmp_path / "cader", [record("001-1", "A", "A")])
    with pytest.raises(CompareInputError, match=rf"^{other}: neither cader predictions .* lmms-eval samples"):
        compare_files([str(run), str(other)])


def test_bad_samples_lines_are_left_out_and_named(tmp_path):
    lines = VIDEOMME.read_text().splitlines()
    broken = json.loads(lines[1])
    del broken["videomme_perception_score"]["pred_answer"]
    samples = tmp_path / "base" / "samples_videomme_long.jsonl"
    samples.parent.mkdir()
    samples.write_text("\n".join([lines[0], json.dumps(broken), *lines[2:], "{torn"]) + "\n")
    run = write_run(tmp_path / "cader", [record("001-1", "A", "A"), record("001-2", "B", "B")])
    result = compare_files([str(run), str(samples)], n_resamples=200)
    problems = result["systems"]["base"]["problems"]
    assert len(problems) == 2 and f"{samples}:2: doc 1: videomme_perception_score" in problems[0]
    assert problems[1].startswith(f"{samples}:{len(lines) + 1}: bad_json")
    assert result["systems"]["base"]["missing"] == ["001-2"]  # the broken row's question scores 0
    assert "2 lines left out" in format_comparison(result)


def test_a_cader_export_compares_equal_to_its_run(tmp_path):
    from cader.dev.viewer_records import synthetic_records
    from cader.evaluate.lmms.export import export_lmms

    records = [r for r in synthetic_records(30, seed=3) if r["benchmark"] == "videomme_long"]
    run = write_run(tmp_path / "run", records)
    export_lmms(str(run), str(tmp_path / "export"))
    result = compare_files([str(run), str(tmp_path / "export" / "samples_videomme_long.jsonl")], n_resamples=200)
    assert result["n"] == len(records) and result["pairs"][0]["mcnemar"]["discordant"] == 0
    assert result["systems"]["export"]["mean"] == result["systems"]["run"]["mean"]
