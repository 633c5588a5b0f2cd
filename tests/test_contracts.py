"""The file contracts (cader.contracts): the generated doc is current, valid records pass, a bad record is named by
field, unknown keys survive, readers report what they skip, and every file the pipeline writes validates."""

import importlib.util
import json
import logging
from concurrent.futures import Future
from pathlib import Path

import pytest
from cader.contracts.jsonl import iter_lines, read_validated
from cader.contracts.records import (
    CalibrationFile,
    JudgmentRecord,
    PredictionRecord,
    TimingRecord,
    build_record,
    describe_validation_error,
    split_timing,
)
from contract_files import contract_for, file_problems
from pydantic import ValidationError

REPO = Path(__file__).resolve().parents[1]
LETTERS = ["A", "B", "C", "D"]


def load_doc_script():
    module = importlib.import_module("cader.scripts.make_contracts_doc")
    return module


def test_committed_doc_equals_a_regeneration():
    doc = load_doc_script()
    assert (REPO / "docs" / "contracts.md").read_text(encoding="utf-8") == doc.render(), (
        "docs/contracts.md is stale: run python scripts/make_contracts_doc.py"
    )
    assert doc.main(check=True) == 0


def test_doc_lists_every_field_of_every_model():
    doc = load_doc_script()
    text = doc.render()
    for root in (PredictionRecord, CalibrationFile, JudgmentRecord):
        for model in doc.nested_models(root):
            assert f"### {model.__name__}" in text
            for name, info in model.model_fields.items():
                assert f"| `{name}` |" in text and info.description, (model.__name__, name)


# ---- hand-written records ------------------------------------------------------------------------------------------


def prediction() -> dict:
    """A predictions.jsonl record through Stage 2 with every kind of step, as the runner writes it."""
    window = {"window": [20.0, 30.0], "raw": [20.0, 30.0], "how": "keyed", "swapped": False, "clipped": False,
              "reason": None, "n_windows": 1}
    steps = [
        {"phase": "propose", "iteration": 0, "context": "F1", "n_frames": 8, "tried": [], "raw_output": "[20, 30]",
         "parsed": window, "window": [20.0, 30.0], "too_broad": False},
        {"phase": "verify", "iteration": 0, "window": [20.0, 30.0], "crop": [20.0, 30.0], "r2": 8.0, "n_frames": 8,
         "p_yes": 0.1, "p_yes_vocab": 0.1, "p_no_vocab": 0.9, "f": 0.5, "accepted": False},
        {"phase": "resample", "iteration": 1, "mode": "rgr", "fps_map": [[20.0, 30.0, 0.5]],
         "unexplored": [[0.0, 20.0], [30.0, 60.0]], "n_frames_planned": 55, "n_frames": 8},
        {"phase": "propose", "iteration": 1, "context": "rgr", "n_frames": 8, "tried": [[20.0, 30.0]],
         "raw_output": "[40, 45]", "parsed": dict(window, window=[40.0, 45.0], raw=[40.0, 45.0]),
         "window": [40.0, 45.0], "too_broad": False},
        {"phase": "verify", "iteration": 1, "window": [40.0, 45.0], "crop": [37.5, 47.5], "r2": 8.0, "n_frames": 8,
         "p_yes": 0.9, "p_yes_vocab": 0.9, "p_no_vocab": 0.1, "f": 1.0, "accepted": True},
        {"phase": "answer", "window": [37.5, 47.5], "n_frames": 8, "raw_output": "<answer>B</answer>",
         "parsed": {"letter": "B", "how": "answer_tag/alone", "reason": None}, "pred": "B",
         "fallback_to_stage1": False},
    ]
    return {
        "benchmark": "bench", "sample_id": "s1", "video": "v.mp4", "duration": 60.0, "question": "q?",
        "options": ["a", "b", "c", "d"], "letters": LETTERS, "answer": "B", "question_id": 7, "meta": {"task": "t"},
        "stage1": {"logits": [0.0, 0.1, 0.0, 0.0], "pred": "B", "margin": 0.01, "temperature": 2.0, "n_frames": 8,
                   "fps": 1.0, "tau": 0.97,
                   "fingerprint": {"model": None, "frames": {"r1": 1.0, "max_frames": 8, "max_pixels": 2048},
                                   "sample": "abc"}},
        "route": "stage2",
        "stage2": {"pred": "B", "accepted": [40.0, 45.0], "cycles": 2, "fallback": None, "steps": steps},
        "pred": "B", "correct": True,
        "cost": {"forwards": 6, "frames_decoded": 32, "prompt_tokens": 50, "completion_tokens": 9, "seconds": 1.5},
        "error": None,
    }


def calibration(**changes) -> dict:
    return {
        "temperature": 1.7, "tau": 0.96, "mode": "precision", "alpha": 0.05, "delta": 0.1,
        "fit": {"temperature": 1.7, "n": 100, "nll_before": 0.9, "nll_after": 0.8, "ece_before": 0.1,
                "ece_after": 0.05, "nll_paper": 0.85, "ece_paper": 0.07, "at_bound": False, "bounds": [0.05, 50.0],
                "ece_bins": 15},
        "select": {"tau": 0.96, "n": 100, "n_exits": 40, "exit_rate": 0.4, "exit_accuracy": 0.99,
                   "upper_bound_error": 0.04, "no_exit": False, "min_exits": 50, "candidates": 30, "tested": 4,
                   "stopped_at": 0.9},
        "sources": ["runs/heldout/predictions.jsonl"], "seed": 0,
        "paper_point": {"temperature": 2.0, "tau": 0.97, "n": 100, "n_exits": 30, "exit_rate": 0.3,
                        "exit_accuracy": 1.0, "upper_bound_error": 0.07, "meets_alpha": False},
        "budget": None, "min_exits": 50, "fit_fraction": 0.5, "n_samples": 200, "n_benchmarks": 1, "skipped": {},
        "table4_counts": {"fitted_T": {">=0.995": 3}, "paper_T": {">=0.995": 2}}, "figures": ["figures/a.png"],
        **changes,
    }


def judgment() -> dict:
    return {
        "question_id": 3, "system": "cader", "judge_model": "gpt-x", "served_model": "gpt-x-2026",
        "scores": {"P1": 2, "P2": 1, "P3": 2, "P4": None, "P5": 1}, "traj": 0.75, "mc_rate": 0.5,
        "milestones": [{"id": "M1", "status": "covered", "evidence": "at 0:12"},
                       {"id": "M2", "status": "missing", "evidence": ""}],
        "failure_tags": ["counting_error"], "summary": "counts one too few", "axis_rationales": {"P1": "ok"},
        "sweep_required": "no", "sweep_applied": "no", "attempts": 1, "waited_s": 0.0, "cached": False,
        "prompt_hash": "h", "judge_config": {"model": "gpt-x"}, "judge_config_hash": "c", "error": None,
        "trajectory_hash": "t", "judged_because": "new",
    }


FIXED_T = {"temperature": 2.0, "n": 0, "fixed": True, "nll_before": 0.9, "ece_before": 0.1, "nll_after": 0.8,
           "ece_after": 0.05}
FAILED_JUDGMENT = {"question_id": "q9", "system": "cader", "judge_model": "gpt-x", "scores": None, "traj": None,
                   "mc_rate": None, "milestones": [], "failure_tags": [], "summary": "", "attempts": 0,
                   "error": "judging crashed: RuntimeError: boom"}


@pytest.mark.parametrize(
    "model, record",
    [
        (PredictionRecord, prediction()),
        (PredictionRecord, {**prediction(), "stage1": None, "route": None, "stage2": None, "pred": None,
                            "correct": False, "error": "video_unreadable: v.mp4: no such file"}),
        (CalibrationFile, calibration()),
        (CalibrationFile, calibration(fit=FIXED_T, mode="budget", budget=0.3)),
        (JudgmentRecord, judgment()),
        (JudgmentRecord, FAILED_JUDGMENT),
    ],
)
def test_a_valid_record_validates_and_dumps_back_unchanged(model, record):
    assert build_record(model, record) == record
    assert list(build_record(model, record)) == list(record)  # same keys, same order


@pytest.mark.parametrize(
    "model, record, field",
    [
        (PredictionRecord, {**prediction(), "route": "stage3"}, "route"),
        (PredictionRecord, {**prediction(), "duration": "60"}, "duration"),
        (PredictionRecord, {**prediction(), "correct": 1}, "correct"),
        (PredictionRecord, {k: v for k, v in prediction().items() if k != "cost"}, "cost"),
        (PredictionRecord, {**prediction(), "stage1": {**prediction()["stage1"], "logits": [0.0, "x"]}},
         "stage1.logits.1"),
        (PredictionRecord, {**prediction(), "stage2": {**prediction()["stage2"], "steps": [{"phase": "zoom"}]}},
         "stage2.steps.0"),
        (PredictionRecord, {**prediction(), "stage2": {**prediction()["stage2"], "accepted": [1.0]}},
         "stage2.accepted"),
        (CalibrationFile, calibration(tau=2.0), "tau must be a number in [0, 1]"),
        (CalibrationFile, calibration(fit={**FIXED_T, "n": "0"}), "fit.fixed.n"),
        (CalibrationFile, calibration(select={"n_exits": 1.5}), "select.n_exits"),
        (JudgmentRecord, {**judgment(), "scores": {**judgment()["scores"], "P1": 3}}, "scores.P1"),
        (JudgmentRecord, {**judgment(), "milestones": [{"id": "M1", "status": "done", "evidence": ""}]},
         "milestones.0.status"),
        (JudgmentRecord, {**judgment(), "failure_tags": ["made_up_tag"]}, "failure_tags.0"),
    ],
)
def test_a_bad_record_is_refused_naming_the_field(model, record, field):
    with pytest.raises(ValidationError) as info:
        build_record(model, record)
    assert field in describe_validation_error(info.value)


@pytest.mark.parametrize(
    "key, value, field, shown",
    [
        ("logits", [0.0, float("nan"), 0.0, 0.0], "stage1.logits", "NaN at position 1"),
        ("logits", [float("inf"), 0.0, 0.0, float("-inf")], "stage1.logits", "Infinity at position 0"),
        ("margin", float("nan"), "stage1.margin", "NaN"),
        ("margin", float("-inf"), "stage1.margin", "-Infinity"),
    ],
)
def test_a_non_finite_logit_or_margin_breaks_the_contract_naming_the_field(key, value, field, shown):
    from cader.contracts.records import present_field_problem

    record = {**prediction(), "stage1": {**prediction()["stage1"], key: value}}
    with pytest.raises(ValidationError) as info:
        build_record(PredictionRecord, record)
    assert [e["type"] for e in info.value.errors()] == ["non_finite"]
    text = describe_validation_error(info.value)
    assert text.startswith(f"{field}: ") and "finite" in text and shown in text
    # what a reader of some fields only (calibration, audit, frontier) is told: the same words, and why
    assert present_field_problem(PredictionRecord, record) == ("non_finite", text)
    assert present_field_problem(PredictionRecord, {"stage1": {key: value}}) == ("non_finite", text)
    assert present_field_problem(PredictionRecord, {"stage1": {"pred": 1}})[0] == "invalid_record"
    assert present_field_problem(PredictionRecord, prediction()) is None


def test_unknown_keys_survive_a_round_trip(tmp_path):
    record = prediction()
    record["added_later"] = {"by": "a newer writer"}
    record["stage1"]["calibrated"] = True
    record["stage2"]["steps"][0]["note"] = "kept"
    line = json.dumps(build_record(PredictionRecord, record), ensure_ascii=False)
    again = json.loads(line)
    assert again["added_later"] == {"by": "a newer writer"} and again["stage1"]["calibrated"] is True
    assert again["stage2"]["steps"][0]["note"] == "kept"
    (tmp_path / "predictions.jsonl").write_text(line + "\n")
    assert read_validated(tmp_path / "predictions.jsonl", PredictionRecord).records == [record]
    extra = calibration(fit={**FIXED_T, "why": "given"}, note="by hand")
    assert build_record(CalibrationFile, extra) == extra
    assert build_record(JudgmentRecord, {**judgment(), "rubric": "v2"})["rubric"] == "v2"


def test_numbers_stay_as_written_and_only_json_types_pass():
    record = {
        **prediction(),
        "duration": 60,
    }  # a benchmark's integer duration is written back as 60, not 60.0
    assert json.dumps(build_record(PredictionRecord, record)["duration"]) == "60"
    for bad in ({"duration": True}, {"cost": {**prediction()["cost"], "forwards": 1.0}}, {"letters": "ABCD"}):
        with pytest.raises(ValidationError):
            build_record(PredictionRecord, {**prediction(), **bad})


# ---- readers -------------------------------------------------------------------------------------------------------


def write_lines(path: Path, lines) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        "".join((x if isinstance(x, str) else json.dumps(x)) + "\n" for x in lines), encoding="utf-8"
    )
    return path


def test_validated_reading_names_file_line_and_field(tmp_path):
    bad = {**prediction(), "route": "stage3"}
    path = write_lines(tmp_path / "predictions.jsonl", [prediction(), bad, "", "[1, 2]", '{"torn'])
    read = read_validated(path, PredictionRecord)
    assert read.lines == [1] and read.records == [prediction()]
    assert [(p.line, p.reason) for p in read.problems] == [(2, "invalid_record"), (4, "not_an_object"),
                                                           (5, "bad_json")]
    assert str(read.problems[0]).startswith(f"{path}:2: route: ")
    assert [number for number, _ in iter_lines(path, keep_blank=True)] == [1, 2, 3, 4, 5]
    assert file_problems(path) == [str(p) for p in read.problems]


def test_a_non_utf8_byte_costs_its_line_in_every_reader_named_by_file_and_line(tmp_path, caplog):
    from cader.calibrate.records import read_prediction_file
    from cader.evaluate.judge.questions import load_predictions
    from cader.evaluate.runner import read_records

    second = {**prediction(), "sample_id": "s2", "question": "caf\u00e9 au lait?"}
    lines = [prediction(), json.dumps(second, ensure_ascii=False), {**prediction(), "sample_id": "s3"}]
    path = write_lines(tmp_path / "predictions.jsonl", lines)
    # the second line as a Latin-1 editor would save it: one byte 0xe9 where UTF-8 has two
    path.write_bytes(path.read_bytes().replace("\u00e9".encode(), b"\xe9"))
    column = path.read_bytes().splitlines()[1].index(b"\xe9") + 1
    read = read_validated(path, PredictionRecord)
    assert read.lines == [1, 3]
    assert [(p.line, p.reason) for p in read.problems] == [(2, "bad_encoding")]
    assert str(read.problems[0]) == f"{path}:2: not valid UTF-8 (byte 0xe9 at column {column})"
    assert file_problems(path) == [str(read.problems[0])]
    with caplog.at_level(logging.WARNING):  # a resumed run: the sample counts as not done and runs again
        assert [r["sample_id"] for r in read_records(path)] == [prediction()["sample_id"], "s3"]
    assert f"{path}:2: not valid UTF-8" in caplog.text
    loaded = read_prediction_file(path)  # calibrate: counted by reason
    assert len(loaded.records) == 2 and dict(loaded.skipped) == {"bad_encoding": 1}
    rows, errors = load_predictions(path)  # the judge's predictions reader
    assert rows and len(errors) == 1 and f"{path}:2" in str(errors[0]) and "0xe9" in str(errors[0])


def test_a_byte_order_mark_opening_a_file_is_not_a_bad_line(tmp_path):
    path = write_lines(tmp_path / "predictions.jsonl", [prediction()])
    path.write_bytes(b"\xef\xbb\xbf" + path.read_bytes())
    assert read_validated(path, PredictionRecord).records == [prediction()]


def test_readers_report_and_skip_a_record_that_breaks_the_contract(tmp_path, caplog):
    from cader.calibrate.calibration_file import CalibrationFileError, read_calibration
    from cader.calibrate.records import read_prediction_file
    from cader.evaluate.judge.pipeline import read_judgments
    from cader.evaluate.judge.questions import load_predictions
    from cader.evaluate.runner import read_records

    bad = {**prediction(), "sample_id": "s2", "stage1": {**prediction()["stage1"], "temperature": "2"}}
    predictions = write_lines(tmp_path / "predictions.jsonl", [prediction(), bad])
    with caplog.at_level(logging.WARNING):
        assert read_records(predictions) == [prediction()]
    assert f"{predictions}:2: stage1.temperature" in caplog.text
    loaded = read_prediction_file(predictions)
    assert len(loaded.records) == 1 and dict(loaded.skipped) == {"invalid_record": 1}
    assert "stage1.temperature" in str(loaded.problems[0]) and "(sample bench/s2)" in str(loaded.problems[0])
    rows, errors = load_predictions(predictions)
    assert list(rows) == ["7"] and len(errors) == 1 and "stage1.temperature" in str(errors[0])

    judgments = write_lines(
        tmp_path / "judgments.jsonl", [judgment(), {**judgment(), "question_id": 4, "traj": "1"}]
    )
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        assert list(read_judgments(judgments)) == ["3"]
    assert f"{judgments}:2: traj" in caplog.text

    (tmp_path / "calibration.json").write_text(json.dumps(calibration(select={"no_exit": "no"})))
    with pytest.raises(CalibrationFileError, match=r"calibration\.json: select\.no_exit"):
        read_calibration(tmp_path / "calibration.json")


def test_a_judgment_row_breaking_the_contract_is_written_as_a_failed_row():
    from cader.evaluate.judge.pipeline import judgment_row
    from cader.evaluate.judge.questions import Question

    question = Question(
        question_id=5, question="q", options=["a", "b"], answer="A", milestones=[{"id": "M1"}]
    )
    broken, crashed = Future(), Future()
    broken.set_result({**judgment(), "traj": "high"})
    crashed.set_exception(RuntimeError("boom"))
    row = judgment_row(broken, question, "cader", "gpt-x", "new")
    assert row["scores"] is None and "breaks the judgments contract: traj" in row["error"]
    assert (
        judgment_row(crashed, question, "cader", "gpt-x", "new")["error"]
        == "judging crashed: RuntimeError: boom"
    )


def test_the_wall_clock_time_splits_off_a_record_into_its_timings_line():
    record = build_record(PredictionRecord, prediction())
    kept, timing = split_timing(record)
    assert timing == {"benchmark": "bench", "sample_id": "s1", "seconds": 1.5}
    assert TimingRecord.model_validate(timing) and build_record(PredictionRecord, kept) == kept
    assert "seconds" not in kept["cost"] and {**kept, "cost": record["cost"]} == record
    assert list(kept["cost"]) == ["forwards", "frames_decoded", "prompt_tokens", "completion_tokens"]
    assert split_timing(kept) == (kept, None)   # nothing to split: written after the split, or never timed


def test_contract_for_names_the_pipeline_files():
    assert contract_for("runs/x/predictions.jsonl") is PredictionRecord
    assert contract_for("runs/x/predictions.shard-0-of-4.jsonl") is PredictionRecord
    assert contract_for("runs/judge/judgments.jsonl") is JudgmentRecord
    assert contract_for("runs/calibration/calibration.json") is CalibrationFile
    assert contract_for("runs/x/report.json") is None


# ---- every file the pipeline writes --------------------------------------------------------------------------------


def run_pipeline(root: Path, video: Path) -> None:
    """predictions (every route, fallback, failure, reuse, shards), calibration.json, judgments.jsonl."""
    from cader.calibrate.options import FitOptions, OutputOptions
    from cader.calibrate.pipeline import calibrate_predictions
    from cader.dev.judge_double import LoopbackJudgeServer
    from cader.dev.judge_inputs import synthetic_benchmark
    from cader.dev.scripted import ScriptedBackend
    from cader.evaluate.benchmarks.base import Sample
    from cader.evaluate.judge.client import RetryPolicy
    from cader.evaluate.judge.pipeline import JudgeRun, judge_predictions
    from cader.evaluate.judge.providers import make_provider
    from cader.evaluate.judge.questions import load_predictions, load_questions
    from cader.evaluate.method.config import CaderConfig
    from cader.evaluate.runner import load_stage1_priors, merge_shards, run_samples

    logits = {f"q{i}": [0.0, 40.0, 0.0, 0.0] if i % 2 == 0 else [0.0, 0.1, 0.0, 0.0] for i in range(8)}
    # four videos (one file under four names): calibration splits fit/select by video, so it needs several
    names = [f"v{k}_{video.name}" for k in range(4)]
    for name in names:
        (video.parent / name).symlink_to(video)
    samples = [Sample("bench", f"s{i}", names[i % 4], f"q{i}", ["a", "b", "c", "d"], LETTERS, "B", 60.0,
                      {"question_id": i}) for i in range(8)]
    samples += [Sample("bench", "missing", "missing.mp4", "q0", ["a", "b"], ["A", "B"], "A", 10, {}),
                Sample("bench", "bad", video.name, "q0", ["a"], ["A", "B"], None, None, {})]
    runs = {  # name: (variant, proposal, answer, p_yes, questions whose verifier call fails)
        "full": ("full", '"relevant_windows": [[20, 30]]', "<answer>B</answer>", 0.95, ("q5",)),
        "rejected": ("full", '"relevant_windows": [[20, 30]]', "<answer>B</answer>", 0.01, ()),
        "no_rgr": ("no_rgr", '"relevant_windows": [[20, 30]]', "no letter", 0.01, ()),
        "no_verifier": ("no_verifier", '"relevant_windows": [[20, 21]]', "C", 0.5, ()),
        "unparseable": ("uniform_stage2", "no idea", "B", 0.9, ()),
        "too_broad": ("no_reflection", '"relevant_windows": [[0, 59]]', "B", 0.9, ()),
        "no_stage2": ("no_stage2", "", "", 0.9, ()),
    }
    for name, (variant, proposal, answer, p_yes, fail_on) in runs.items():
        backend = ScriptedBackend(logits, proposal, answer, p_yes, fail_on)
        cfg = CaderConfig(max_frames=8, max_pixels=2048, variant=variant)
        priors = load_stage1_priors(root / "full" / "predictions.jsonl") if name == "rejected" else None
        for shard in [0, 1] if name == "no_rgr" else [None]:
            out = (
                root
                / name
                / ("predictions.jsonl" if shard is None else f"predictions.shard-{shard}-of-2.jsonl")
            )
            chosen = samples if shard is None else samples[shard::2]
            run_samples(chosen, video.parent, out, backend, backend, cfg, video_path=lambda s, r: r / s.video,
                        progress=False, stage1_priors=priors)
    merge_shards(root / "no_rgr")

    calibrate_predictions([str(root / "full" / "predictions.jsonl")], str(root / "calibration"),
                          output=OutputOptions(figures=False))
    calibrate_predictions([str(root / "full" / "predictions.jsonl")], str(root / "calibration_fixed"),
                          fit=FitOptions(temperature=2.0), output=OutputOptions(figures=False))

    questions, rows = synthetic_benchmark(6, seed=0)
    write_lines(root / "questions.jsonl", questions)
    write_lines(root / "judge_input" / "predictions.jsonl", rows)
    policy = RetryPolicy(max_replies=2, max_api_retries=1, backoff_base=0.001, backoff_max=0.01)
    with LoopbackJudgeServer(per_question={"2": ["500"], "3": ["malformed", "bad_score"]}) as server:
        provider = make_provider("openai", "loopback-judge", server.base_url, timeout=5.0)
        judge_predictions(provider, load_questions(root / "questions.jsonl")[0],
                          load_predictions(root / "judge_input" / "predictions.jsonl")[0], root / "judge",
                          framework="cader", run=JudgeRun(concurrency=2, cache=False, progress=False), policy=policy)


def test_every_file_the_pipeline_writes_validates(tmp_path, barcode_video, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "loopback-dummy")
    (tmp_path / "videos").mkdir()
    video = tmp_path / "videos" / barcode_video.name
    video.symlink_to(barcode_video)
    run_pipeline(tmp_path / "runs", video)

    written = sorted(p for p in (tmp_path / "runs").rglob("*") if contract_for(p) is not None)
    names = {p.name for p in written}
    assert {
        "predictions.jsonl",
        "predictions.shard-0-of-2.jsonl",
        "calibration.json",
        "judgments.jsonl",
    } <= names
    for path in written:
        assert file_problems(path) == [], path
    records = [
        r
        for p in written
        if p.name == "predictions.jsonl"
        for r in read_validated(p, PredictionRecord).records
    ]
    steps = {s["phase"] + ("/" + s["mode"] if "mode" in s else "") for r in records for s in (r["stage2"] or {})
             .get("steps", [])}
    assert steps == {"propose", "verify", "answer", "resample/rgr", "resample/uniform_f1"}
    assert {r["stage2"]["fallback"] for r in records if r["stage2"]} == {
        None, "not_accepted", "unparseable_proposal", "too_broad"}
    errors = {r["error"].split(":")[0] for r in records if r["error"]}
    assert errors == {"video_unreadable", "bad_sample", "stage2_failed"}
    assert any(r["stage1"] and r["stage1"].get("reused") for r in records)
    judged = read_validated(tmp_path / "runs" / "judge" / "judgments.jsonl", JudgmentRecord).records
    assert len(judged) == 6 and any(r["error"] for r in judged) and any(r["scores"] for r in judged)
