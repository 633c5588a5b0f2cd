"""Judging whole prediction files: concurrency, append-as-finished, resume after a kill, cache, CLI, compare."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from cader.dev.judge_double import LoopbackJudgeServer
from cader.dev.judge_inputs import synthetic_benchmark
from cader.evaluate.judge.client import RetryPolicy
from cader.evaluate.judge.pipeline import JudgeRun, judge_predictions, read_judgments
from cader.evaluate.judge.providers import make_provider
from cader.evaluate.judge.questions import load_predictions, load_questions

REPO = Path(__file__).resolve().parents[1]
FAST = RetryPolicy(max_replies=2, max_api_retries=1, backoff_base=0.001, backoff_max=0.01)


@pytest.fixture(autouse=True)
def _key(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "loopback-dummy")


def write_inputs(root: Path, n: int, seed: int = 0):
    questions, predictions = synthetic_benchmark(n, seed=seed)
    (root / "questions.jsonl").write_text("".join(json.dumps(q) + "\n" for q in questions))
    (root / "predictions.jsonl").write_text("".join(json.dumps(p) + "\n" for p in predictions))
    return load_questions(root / "questions.jsonl")[0], load_predictions(root / "predictions.jsonl")[0]


def judge(server, questions, predictions, out, concurrency=4, use_cache=True):
    provider = make_provider("openai", "loopback-judge", server.base_url, timeout=5.0)
    return judge_predictions(provider, questions, predictions, out, framework="cader", policy=FAST,
                             run=JudgeRun(concurrency=concurrency, cache=use_cache, progress=False))


def test_concurrent_run_appends_one_row_per_question(tmp_path):
    questions, predictions = write_inputs(tmp_path, 12)
    with LoopbackJudgeServer(delay=0.02) as server:
        counts = judge(server, questions, predictions, tmp_path / "out", concurrency=4)
    lines = (tmp_path / "out" / "judgments.jsonl").read_text().splitlines()
    assert counts["judged"] == 12 and len(lines) == 12
    assert sorted(json.loads(line)["question_id"] for line in lines) == list(range(1, 13))
    assert 2 <= server.max_in_flight <= 4


def test_rerun_judges_only_missing_and_retries_failed(tmp_path):
    questions, predictions = write_inputs(tmp_path, 6)
    out = tmp_path / "out"
    with LoopbackJudgeServer(per_question={"2": ["500"]}) as server:
        first = judge(server, questions, predictions, out, use_cache=False)
    assert first["judged"] == 5 and first["failed"] == 1
    rows = (out / "judgments.jsonl").read_text().splitlines()
    (out / "judgments.jsonl").write_text("\n".join(rows[:3]) + "\n" + rows[3][:25])  # drop some, tear one line
    done_before = {k for k, r in read_judgments(out / "judgments.jsonl").items() if not r["error"]}
    with LoopbackJudgeServer() as server:
        second = judge(server, questions, predictions, out, use_cache=False)
    assert set(server.calls) == set(questions) - done_before
    assert second["pending"] == 6 - len(done_before) and second["failed"] == 0
    final = read_judgments(out / "judgments.jsonl")
    assert set(final) == set(questions) and all(r["error"] is None for r in final.values())


def test_cache_avoids_paying_twice(tmp_path):
    questions, predictions = write_inputs(tmp_path, 5)
    out = tmp_path / "out"
    with LoopbackJudgeServer() as server:
        judge(server, questions, predictions, out)
        (out / "judgments.jsonl").unlink()
        counts = judge(server, questions, predictions, out)
    assert server.total_calls == 5 and counts["cached"] == 5
    with LoopbackJudgeServer(also_answers_as=["other-judge"]) as server:  # another judge: another cache key
        provider = make_provider("openai", "other-judge", server.base_url)
        judge_predictions(provider, questions, predictions, out, framework="cader", policy=FAST)
    assert server.total_calls == 5


def run_cli(*args, **kwargs):
    env = {**os.environ, "OPENAI_API_KEY": "loopback-dummy"}
    return subprocess.Popen([sys.executable, str(REPO / "evaluate" / "judge.py"), *map(str, args)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kwargs)


@pytest.mark.slow
def test_cli_killed_mid_run_then_resumed_writes_report(tmp_path):
    questions, predictions = write_inputs(tmp_path, 8)
    out = tmp_path / "out"
    args = ["--predictions", tmp_path / "predictions.jsonl", "--questions", tmp_path / "questions.jsonl",
            "--out", out, "--model", "loopback-judge", "--concurrency", "1", "--progress", "false"]
    with LoopbackJudgeServer(delay=0.3) as server:
        proc = run_cli(*args, "--base_url", server.base_url)
        path = out / "judgments.jsonl"
        deadline = time.monotonic() + 60
        while not (path.exists() and len(path.read_text().splitlines()) >= 2):
            assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read() if proc.stderr else ""
            time.sleep(0.05)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    judged_before = set(read_judgments(out / "judgments.jsonl"))
    assert 2 <= len(judged_before) < 8 and not (out / "judge_report.json").exists()
    with LoopbackJudgeServer() as server:
        proc = run_cli(*args, "--base_url", server.base_url)
        stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 0, stderr
    assert set(server.calls) == set(questions) - judged_before
    report = json.loads((out / "judge_report.json").read_text())
    assert report["n"] == 8 and report["n_judged"] == 8 and report["failed_judgments"] == []
    expected_acc = sum(p["pred"] == questions[k].answer for k, p in predictions.items()) / 8
    assert report["accuracy"] == pytest.approx(expected_acc)
    assert (out / "judge_report.md").read_text().startswith("# AgentVidBench judge report: cader")
    assert "loopback-dummy" not in (out / "judgments.jsonl").read_text() + stdout + stderr


def test_compare_cli_prints_statistics(tmp_path):
    rows_a = [{"question_id": i, "correct": i % 4 != 0} for i in range(40)]
    rows_b = [{"question_id": i, "correct": i % 2 == 0} for i in range(40)]
    rows_c = [{"question_id": i, "correct": i % 8 == 0} for i in range(40)]
    files = []
    for name, rows in (("single", rows_b), ("cader", rows_a), ("weak", rows_c)):
        (tmp_path / name).mkdir()
        files.append(tmp_path / name / "predictions.jsonl")
        files[-1].write_text("".join(json.dumps(r) + "\n" for r in rows))
    proc = run_cli("compare", *files, "--n_resamples", "2000", "--json_out", tmp_path / "cmp.json")
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 0, stderr
    result = json.loads((tmp_path / "cmp.json").read_text())
    cader = result["pairs"][0]
    assert cader["a"] == "cader" and cader["b"] == "single"
    assert cader["bootstrap"]["diff"] == pytest.approx(0.75 - 0.5)
    # only cader right: i % 4 in {1, 3} (20 questions); only single right: i % 4 == 0 (10 questions)
    assert cader["mcnemar"]["only_a"] == 20 and cader["mcnemar"]["only_b"] == 10
    assert "McNemar exact: 20 vs 10" in stdout and "rank stability" in stdout
