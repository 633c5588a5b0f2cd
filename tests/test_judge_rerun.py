"""Rerun semantics against a scripted server: a question is judged again when what the judge reads changed or the
judge configuration changed; the report says how many and why; --force redoes everything."""

import importlib
import json
from pathlib import Path

import pytest
from cader.dev.judge_double import LoopbackJudgeServer
from cader.dev.judge_inputs import synthetic_benchmark
from cader.evaluate.judge.aggregate import build_report
from cader.evaluate.judge.client import RetryPolicy
from cader.evaluate.judge.pipeline import (
    JudgeRun,
    current_prompt_hashes,
    judge_predictions,
    read_judgments,
    rejudge_reason,
)
from cader.evaluate.judge.providers import LOOPBACK_MODEL, make_provider
from cader.evaluate.judge.questions import load_predictions, load_questions

REPO = Path(__file__).resolve().parents[1]
FAST = RetryPolicy(max_replies=2, max_api_retries=1, backoff_base=0.001, backoff_max=0.01)


@pytest.fixture(autouse=True)
def _key(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "loopback-dummy")


def write_inputs(root: Path, n: int = 4):
    questions, predictions = synthetic_benchmark(n, seed=5)
    (root / "questions.jsonl").write_text("".join(json.dumps(q) + "\n" for q in questions))
    (root / "predictions.jsonl").write_text("".join(json.dumps(p) + "\n" for p in predictions))
    return predictions


def load(root: Path):
    return load_questions(root / "questions.jsonl")[0], load_predictions(root / "predictions.jsonl")[0]


def judge(server, root, max_tokens=4096, force=False):
    questions, predictions = load(root)
    provider = make_provider("openai", LOOPBACK_MODEL, server.base_url, timeout=5.0, max_tokens=max_tokens)
    return judge_predictions(provider, questions, predictions, root / "out", framework="cader", policy=FAST,
                             run=JudgeRun(force=force, progress=False))


def append_corrected_prediction(root: Path, rows: list[dict], index: int) -> dict:
    corrected = json.loads(json.dumps(rows[index]))
    corrected["pred"] = "Z" if corrected["pred"] != "Z" else "Y"
    corrected["stage2"]["steps"][-1]["raw_output"] = "On a second look the count is different."
    with open(root / "predictions.jsonl", "a") as handle:  # a rerun of the system appends; the last row wins
        handle.write(json.dumps(corrected) + "\n")
    return corrected


def test_a_corrected_prediction_is_rejudged_and_only_it(tmp_path):
    rows = write_inputs(tmp_path)
    with LoopbackJudgeServer() as server:
        first = judge(server, tmp_path)
    assert first["reasons"] == {"new": 4} and first["judged"] == 4
    before = read_judgments(tmp_path / "out" / "judgments.jsonl")
    corrected = append_corrected_prediction(tmp_path, rows, 1)
    with LoopbackJudgeServer() as server:
        second = judge(server, tmp_path)
    qid = str(corrected["question_id"])
    assert set(server.calls) == {qid}  # the cache holds the old prompt's reply, not this one
    assert second["reasons"] == {"prediction_changed": 1} and second["up_to_date"] == 3
    after = read_judgments(tmp_path / "out" / "judgments.jsonl")
    assert after[qid]["prompt_hash"] != before[qid]["prompt_hash"]
    assert after[qid]["judged_because"] == "prediction_changed"
    questions, predictions = load(tmp_path)
    assert after[qid]["prompt_hash"] == current_prompt_hashes(questions, predictions, "cader")[qid]


def test_an_unchanged_rerun_calls_nothing_and_a_new_judge_config_rejudges_all(tmp_path):
    write_inputs(tmp_path)
    with LoopbackJudgeServer() as server:
        judge(server, tmp_path)
        again = judge(server, tmp_path)
        assert server.total_calls == 4 and again["pending"] == 0 and again["up_to_date"] == 4
        changed = judge(server, tmp_path, max_tokens=2048)
    assert changed["reasons"] == {"judge_config_changed": 4} and changed["cached"] == 0
    assert server.total_calls == 8  # replies cached under the old configuration are not reused
    rows = read_judgments(tmp_path / "out" / "judgments.jsonl")
    assert {r["judge_config"]["max_tokens"] for r in rows.values()} == {2048}


def test_force_rejudges_everything_without_reading_the_cache(tmp_path):
    write_inputs(tmp_path)
    with LoopbackJudgeServer() as server:
        judge(server, tmp_path)
        forced = judge(server, tmp_path, force=True)
    assert forced["reasons"] == {"forced": 4} and forced["cached"] == 0 and server.total_calls == 8


def test_an_edited_question_is_told_apart_from_a_changed_prediction(tmp_path):
    write_inputs(tmp_path, 2)
    with LoopbackJudgeServer() as server:
        judge(server, tmp_path)
    rows = [json.loads(line) for line in (tmp_path / "questions.jsonl").read_text().splitlines()]
    rows[0]["question_text"] += " (typo fixed)"
    (tmp_path / "questions.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    with LoopbackJudgeServer() as server:
        counts = judge(server, tmp_path)
    assert counts["reasons"] == {"prompt_changed": 1} and set(server.calls) == {str(rows[0]["question_id"])}


def test_rejudge_reason_cases():
    good = {"error": None, "scores": {"P1": 1}, "prompt_hash": "p", "trajectory_hash": "t", "judge_config_hash": "c"}
    assert rejudge_reason(None, "p", "t", "c") == "new"
    assert rejudge_reason(good, "p", "t", "c") is None
    assert rejudge_reason(good, "p", "t", "c", force=True) == "forced"
    assert rejudge_reason({**good, "error": "HTTP 500"}, "p", "t", "c") == "failed_before"
    assert rejudge_reason(good, "p2", "t2", "c") == "prediction_changed"
    assert rejudge_reason(good, "p2", "t", "c") == "prompt_changed"
    assert rejudge_reason(good, "p", "t", "c2") == "judge_config_changed"
    old_row = {k: v for k, v in good.items() if k != "judge_config_hash"}  # judged before configs were recorded
    assert rejudge_reason(old_row, "p", "t", "c") == "judge_config_changed"


def test_report_never_pairs_a_changed_prediction_with_its_old_scores(tmp_path):
    rows = write_inputs(tmp_path, 3)
    with LoopbackJudgeServer() as server:
        judge(server, tmp_path)
    corrected = append_corrected_prediction(tmp_path, rows, 0)
    questions, predictions = load(tmp_path)
    judgments = read_judgments(tmp_path / "out" / "judgments.jsonl")  # not re-judged yet
    report = build_report(questions, predictions, judgments,
                          prompt_hashes=current_prompt_hashes(questions, predictions, "cader"))
    assert report["stale_judgments"] == [corrected["question_id"]] and report["n_judged"] == 2
    assert report["failed_judgments"] == []


def test_cli_report_says_how_many_were_rejudged_and_why(tmp_path, capsys):
    rows = write_inputs(tmp_path)
    entry = importlib.import_module("cader.evaluate.judge.cli")
    with LoopbackJudgeServer() as server:
        args = ["--predictions", str(tmp_path / "predictions.jsonl"), "--questions", str(tmp_path / "questions.jsonl"),
                "--out", str(tmp_path / "out"), "--model", LOOPBACK_MODEL, "--base_url", server.base_url,
                "--progress", "false", "--backoff_base", "0.001"]
        entry.main(args)
        append_corrected_prediction(tmp_path, rows, 2)
        entry.main(args)
        report = json.loads((tmp_path / "out" / "judge_report.json").read_text())
        assert report["rerun"]["reasons"] == {"prediction_changed": 1} and report["rerun"]["up_to_date"] == 3
        text = (tmp_path / "out" / "judge_report.md").read_text()
        assert "0 judged for the first time, 1 re-judged (1 because the prediction's rendered trajectory changed)" \
            in text
        entry.main([*args, "--force", "true"])
    report = json.loads((tmp_path / "out" / "judge_report.json").read_text())
    assert report["rerun"]["reasons"] == {"forced": 4} and report["n_judged"] == 4
    assert "4 re-judged (4 because --force)" in capsys.readouterr().out

