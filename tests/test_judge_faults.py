"""The judge's faults: a byte that is not UTF-8 in the questions file, a reply dripping a byte at a time,
a huge invalid reply in repair turns, and a missing input file. One test each, against the loopback double."""

import importlib
import json
import time
from pathlib import Path

import pytest
from cader.dev.judge_double import LoopbackJudgeServer
from cader.evaluate.judge.client import RetryPolicy, judge_one
from cader.evaluate.judge.providers import LOOPBACK_MODEL, make_provider
from cader.evaluate.judge.questions import Question, load_questions

REPO = Path(__file__).resolve().parents[1]
QUESTIONS = REPO / "tests" / "fixtures" / "agentvidbench" / "questions.jsonl"


@pytest.fixture(autouse=True)
def _keys(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "loopback-dummy")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "loopback-dummy")
    for name in ("ANTHROPIC_BASE_URL", "OPENAI_BASE_URL"):
        monkeypatch.delenv(name, raising=False)


def entry_main(argv: list[str]) -> None:
    entry = importlib.import_module("cader.evaluate.judge.cli")
    entry.main(argv)


def question() -> Question:
    return Question(question_id=3, question="How many products?", options=[str(i) for i in range(26)], answer="D",
                    ecom_required=True, milestones=[{"id": "M1", "type": "counting", "description": "count them"}])


RECORD = {"question_id": 3, "pred": "D", "response": "Three products."}


def test_a_byte_that_is_not_utf8_is_a_row_error_naming_file_and_line(tmp_path):
    lines = QUESTIONS.read_bytes().splitlines(keepends=True)
    broken = tmp_path / "questions.jsonl"
    broken.write_bytes(lines[0] + lines[1].replace(b"push-ups", b"push\xff-ups") + b"".join(lines[2:]))
    questions, errors = load_questions(broken)
    assert sorted(questions) == ["1", "3", "4"]
    column = lines[1].index(b"push-ups") + len(b"push") + 1
    assert [str(e) for e in errors] == [f"{broken}:2: not UTF-8 (byte 0xff at column {column})"]
    predictions = tmp_path / "predictions.jsonl"
    predictions.write_text("".join(json.dumps({"question_id": i, "pred": "A", "response": "r"}) + "\n"
                                   for i in (1, 3)))
    with LoopbackJudgeServer() as server:
        entry_main(["--predictions", str(predictions), "--questions", str(broken), "--out", str(tmp_path / "out"),
                    "--model", LOOPBACK_MODEL, "--base_url", server.base_url, "--progress", "false"])
    report = json.loads((tmp_path / "out" / "judge_report.json").read_text())
    assert report["input_errors"] == [str(errors[0])] and report["n_judged"] == 2


@pytest.mark.parametrize("api", ["openai", "anthropic"])
def test_a_dripping_reply_cannot_outlast_the_time_budget(api):
    # --timeout 0.4 --time_budget 1.0 (the 5/10 s, scaled): the whole reply would take ~30 s.
    policy = RetryPolicy(max_replies=3, max_api_retries=5, backoff_base=0.01, backoff_max=0.02, time_budget=1.0)
    with LoopbackJudgeServer(script=["drip"], drip_seconds=0.05) as server:
        url = server.base_url if api == "openai" else server.anthropic_base_url
        provider = make_provider(api, LOOPBACK_MODEL, url, timeout=0.4)
        started = time.monotonic()
        row = judge_one(provider, question(), RECORD, "cader", policy=policy)
        took = time.monotonic() - started
    assert row["error"] is not None and "timeout" in row["error"] and row["scores"] is None
    assert took < policy.time_budget + 0.5, took
    assert 2 <= row["attempts"] <= 3  # each call cut at its 0.4 s, the last at the budget's end


def test_a_huge_invalid_reply_goes_back_as_a_bounded_excerpt():
    policy = RetryPolicy(max_replies=3, max_api_retries=0)
    with LoopbackJudgeServer(script=["huge_invalid"]) as server:
        provider = make_provider("openai", LOOPBACK_MODEL, server.base_url, timeout=30.0)
        row = judge_one(provider, question(), RECORD, "cader", policy=policy)
    assert row["error"] is not None and row["attempts"] == 3 and len(server.requests) == 3
    first = len(json.dumps(server.requests[0]))
    for body in server.requests[1:]:
        assert len(json.dumps(body)) < first + 3 * 8_000  # not + 5 MB per repair turn
        replies = [m["content"] for m in body["messages"] if m["role"] == "assistant"]
        assert replies and all("characters left out" in r and len(r) < 5_000 for r in replies)
        assert replies[0].startswith("The trajectory is long.") and replies[0].endswith('{"process_scores": {"P1": 2')


def test_a_missing_input_file_is_one_line_naming_it(tmp_path, capsys):
    predictions = tmp_path / "predictions.jsonl"
    predictions.write_text(json.dumps({"question_id": 1, "pred": "A"}) + "\n")
    base = ["--out", str(tmp_path / "out"), "--model", LOOPBACK_MODEL, "--base_url", "http://127.0.0.1:9/v1"]
    cases = [(["--predictions", str(predictions), "--questions", str(tmp_path / "nope.jsonl")], "nope.jsonl"),
             (["--predictions", str(tmp_path / "gone.jsonl"), "--questions", str(QUESTIONS)], "gone.jsonl"),
             (["--predictions", str(tmp_path / "run"), "--prediction_format", "agentvidbench_run",
               "--questions", str(QUESTIONS)], "run")]
    for argv, name in cases:
        with pytest.raises(SystemExit) as caught:
            entry_main(argv + base)
        message = str(caught.value.code)
        assert message == f"input error: {tmp_path / name}: no such file", message
    with pytest.raises(SystemExit) as caught:
        entry_main(["compare", str(predictions), str(tmp_path / "b.jsonl")])
    assert str(caught.value.code) == f"input error: {tmp_path / 'b.jsonl'}: no such file"
    assert not (tmp_path / "out").exists() and "Traceback" not in capsys.readouterr().err


def test_a_second_judge_run_on_one_out_is_refused_in_one_line(tmp_path):
    from cader.contracts.jsonl import exclusive_writer

    qid = json.loads(QUESTIONS.read_text().splitlines()[0])["question_id"]
    predictions = tmp_path / "predictions.jsonl"
    predictions.write_text(json.dumps({"question_id": qid, "pred": "A"}) + "\n")
    out = tmp_path / "out"
    argv = ["--predictions", str(predictions), "--questions", str(QUESTIONS), "--out", str(out),
            "--model", LOOPBACK_MODEL, "--base_url", "http://127.0.0.1:9/v1"]
    # another process would hold the lock; the lock is re-entrant within a process, so hold it from a child
    import subprocess
    import sys

    holder = subprocess.Popen([sys.executable, "-c", (
        "import sys, time; from cader.contracts.jsonl import exclusive_writer\n"
        f"with exclusive_writer({str(out / 'judgments.jsonl')!r}):\n"
        "    print('held', flush=True); time.sleep(60)")], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(SystemExit) as caught:
            entry_main(argv)
        message = str(caught.value.code)
        assert message.startswith("error: ") and f"pid {holder.pid}" in message and "judgments.jsonl" in message
        assert not (out / "judgments.jsonl").exists()
    finally:
        holder.kill()
        holder.wait()
    with exclusive_writer(out / "judgments.jsonl"):   # released when its holder is gone
        pass
