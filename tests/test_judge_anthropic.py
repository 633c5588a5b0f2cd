"""The real anthropic client against the loopback Messages API: the paper's judge path (App. D Table 16), end to end."""

import importlib
import json
import logging
from pathlib import Path

import pytest
from cader.dev.judge_double import LoopbackJudgeServer, reply_text, synthetic_judgment
from cader.dev.judge_inputs import synthetic_benchmark
from cader.evaluate.judge.client import RetryPolicy, judge_one
from cader.evaluate.judge.params import CONTEXT_1M_BETA
from cader.evaluate.judge.pipeline import JudgeRun, judge_predictions, read_judgments
from cader.evaluate.judge.prompt import SYSTEM_PROMPT_WITH_SCHEMA
from cader.evaluate.judge.providers import LOOPBACK_MODEL, ProviderError, make_provider
from cader.evaluate.judge.questions import Question, load_predictions, load_questions

REPO = Path(__file__).resolve().parents[1]
CONFIG = REPO / "configs" / "judge" / "default.yaml"
SECRET = "sk-ant-test-7f3c9e1d-distinctive"
MODEL = "claude-opus-4-7"
FAST = RetryPolicy(max_replies=3, max_api_retries=3, backoff_base=0.001, backoff_max=0.01)


@pytest.fixture(autouse=True)
def _key(monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", SECRET)
    for name in ("ANTHROPIC_BASE_URL", "ANTHROPIC_AUTH_TOKEN", "ANTHROPIC_LOG"):
        monkeypatch.delenv(name, raising=False)


def question():
    return Question(question_id=7, question="How many reps before 'one more'?", options=[str(i) for i in range(26)],
                    answer="D", ecom_required=True,
                    milestones=[{"id": "M1", "type": "temporal_localization", "description": "find the cue"},
                                {"id": "M2", "type": "counting", "description": "count reps"}])


RECORD = {"question_id": 7, "answer": "D", "correct": True, "pred": "D", "response": "I counted three reps."}


def judge_once(script, policy=FAST, timeout=5.0, sleep=None, **server_kwargs):
    with LoopbackJudgeServer(also_answers_as=[MODEL], script=script, **server_kwargs) as server:
        provider = make_provider("anthropic", MODEL, server.anthropic_base_url, timeout=timeout)
        kwargs = {"sleep": sleep} if sleep else {}
        row = judge_one(provider, question(), RECORD, "single-turn", policy=policy, **kwargs)
        return row, server


def write_inputs(root: Path, n: int):
    questions, predictions = synthetic_benchmark(n, seed=3)
    (root / "questions.jsonl").write_text("".join(json.dumps(q) + "\n" for q in questions))
    (root / "predictions.jsonl").write_text("".join(json.dumps(p) + "\n" for p in predictions))
    return load_questions(root / "questions.jsonl")[0], load_predictions(root / "predictions.jsonl")[0]


def run_cli_with_default_config(tmp_path: Path, server: LoopbackJudgeServer, n: int) -> Path:
    """evaluate/judge.py main() with configs/judge/default.yaml, pointed at the loopback Messages API."""
    write_inputs(tmp_path, n)
    entry = importlib.import_module("cader.evaluate.judge.cli")
    out = tmp_path / "out"
    entry.main(["--config", str(CONFIG), "--predictions", str(tmp_path / "predictions.jsonl"),
                "--questions", str(tmp_path / "questions.jsonl"), "--out", str(out),
                "--base_url", server.anthropic_base_url, "--concurrency", "2", "--progress", "false",
                "--backoff_base", "0.001", "--backoff_max", "0.01"])
    return out


def test_default_config_judges_end_to_end_through_the_messages_api(tmp_path, capsys):
    with LoopbackJudgeServer(also_answers_as=[MODEL]) as server:
        out = run_cli_with_default_config(tmp_path, server, 5)
    rows = read_judgments(out / "judgments.jsonl")
    assert sorted(rows) == ["1", "2", "3", "4", "5"] and server.total_calls == 5
    for qid, row in rows.items():
        expected = synthetic_judgment(qid, [m["id"] for m in row["milestones"]], row["sweep_required"])
        assert row["error"] is None and row["judge_model"] == MODEL and row["attempts"] == 1
        assert row["served_model"] == LOOPBACK_MODEL  # who answered, as the reply says
        assert row["scores"]["P1"] == expected["process_scores"]["task_understanding"]
        assert row["scores"]["P3"] == expected["process_scores"]["evidence_grounding"]
    report = json.loads((out / "judge_report.json").read_text())
    assert report["n_judged"] == 5 and report["failed_judgments"] == []
    assert report["real_judge"] is False and "NOT A REAL JUDGE" in (out / "judge_report.md").read_text()
    assert "judged 5" in capsys.readouterr().out
    # Table 16's "1M context enabled", as the official harness's client asks for it: the beta header on every call.
    assert [h.get("anthropic-beta") for h in server.headers] == [CONTEXT_1M_BETA] * 5
    for body in server.requests:
        # App. D Table 16 settings; the system prompt travels as the top-level `system`, never as a message.
        assert body["model"] == MODEL and body["max_tokens"] == 4096
        assert body["system"] == SYSTEM_PROMPT_WITH_SCHEMA
        assert [m["role"] for m in body["messages"]] == ["user"] and "QUESTION_ID: " in body["messages"][0]["content"]
        # Opus 4.7 answers 400 to any sampling parameter, so the "temperature 0" of the OpenAI path is not sent.
        assert not {"temperature", "top_p", "top_k"} & set(body)


@pytest.mark.parametrize("bad", ["malformed", "unknown_tag"])
def test_invalid_reply_is_sent_back_with_the_validation_error(bad):
    row, server = judge_once([bad, "valid"])
    assert row["error"] is None and row["attempts"] == 2 and server.total_calls == 2
    first, second = server.requests
    assert second["system"] == first["system"] == SYSTEM_PROMPT_WITH_SCHEMA
    assert [m["role"] for m in second["messages"]] == ["user", "assistant", "user"]
    assert second["messages"][0] == first["messages"][0]
    assert second["messages"][1]["content"] == reply_text(bad, "7", ["M1", "M2"], "yes")
    feedback = second["messages"][2]["content"]
    assert "rejected by the output validator" in feedback and "M1" in feedback


@pytest.mark.parametrize("script", [["429", "429", "valid"], ["overloaded", "500", "valid"]])
def test_rate_limit_and_overload_are_retried_with_backoff(script):
    sleeps = []
    policy = RetryPolicy(max_replies=3, max_api_retries=3, backoff_base=1.0, backoff_max=30.0)
    row, server = judge_once(script, policy=policy, sleep=sleeps.append)  # recorded, not slept
    assert row["error"] is None and row["attempts"] == 3 and server.total_calls == 3
    assert len(sleeps) == 2 and 0.5 <= sleeps[0] <= 1.0 and 1.0 <= sleeps[1] <= 2.0  # equal-jitter 2**k


def test_overloaded_forever_is_bounded_and_named():
    row, server = judge_once(["overloaded"])
    assert server.total_calls == 1 + FAST.max_api_retries == row["attempts"]
    assert row["scores"] is None and "HTTP 529" in row["error"] and "overloaded_error" in row["error"]


@pytest.mark.parametrize(("action", "status", "kind", "transient"), [
    ("429", 429, "rate_limit_error", True), ("500", 500, "api_error", True),
    ("overloaded", 529, "overloaded_error", True), ("400", 400, "invalid_request_error", False)])
def test_anthropic_error_envelopes_are_classified(action, status, kind, transient):
    with LoopbackJudgeServer(also_answers_as=[MODEL], script=[action]) as server:
        provider = make_provider("anthropic", MODEL, server.anthropic_base_url, timeout=5.0)
        with pytest.raises(ProviderError) as caught:
            provider.complete("system text", [{"role": "user", "content": "QUESTION_ID: 1"}])
    assert caught.value.status == status and caught.value.transient is transient and kind in str(caught.value)


def test_bad_request_is_not_retried_and_becomes_an_error_row(tmp_path):
    questions, predictions = write_inputs(tmp_path, 4)
    with LoopbackJudgeServer(also_answers_as=[MODEL], per_question={"2": ["400", "valid"]}) as server:
        provider = make_provider("anthropic", MODEL, server.anthropic_base_url, timeout=5.0)
        counts = judge_predictions(provider, questions, predictions, tmp_path / "out", framework="cader",
                                   run=JudgeRun(concurrency=2, cache=False, progress=False), policy=FAST)
    assert counts["judged"] == 3 and counts["failed"] == 1 and server.calls["2"] == 1
    row = read_judgments(tmp_path / "out" / "judgments.jsonl")["2"]
    assert row["attempts"] == 1 and row["scores"] is None and row["traj"] is None
    assert "HTTP 400" in row["error"] and "invalid_request_error" in row["error"]


def test_empty_reply_is_retried_without_an_empty_assistant_turn():
    # The real API rejects an empty assistant message, so an empty reply must not go into a repair turn.
    row, server = judge_once(["empty", "valid"])
    assert row["error"] is None and row["attempts"] == 2
    assert [m["role"] for m in server.requests[1]["messages"]] == ["user"]


def test_timeout_then_success():
    row, server = judge_once(["hang", "valid"], timeout=0.3, hang_seconds=1.0)
    assert row["error"] is None and row["attempts"] == 2 and server.total_calls == 2


def test_openai_style_base_url_with_v1_is_accepted():
    # The SDK appends /v1/messages; a trailing /v1 must not double it.
    with LoopbackJudgeServer(also_answers_as=[MODEL]) as server:
        reply = make_provider("anthropic", MODEL, server.base_url, timeout=5.0).complete(
            "system text", [{"role": "user", "content": "QUESTION_ID: 3"}])
    assert json.loads(reply.text)["summary"] == "loopback judgment for question 3"


def test_key_reaches_the_server_but_no_file_or_log_line(tmp_path, caplog, capsys):
    caplog.set_level(logging.DEBUG)  # SDK and httpx debug logging included
    faults = {"1": ["malformed", "valid"], "2": ["400"], "3": ["429", "valid"], "4": ["overloaded", "valid"]}
    with LoopbackJudgeServer(also_answers_as=[MODEL], per_question=faults) as server:
        out = run_cli_with_default_config(tmp_path, server, 5)
    assert server.api_keys and set(server.api_keys) == {SECRET}  # read from the environment
    assert "/v1/messages" in caplog.text  # the request logging was captured, so the next check can fail
    assert SECRET not in caplog.text
    captured = capsys.readouterr()
    assert SECRET not in captured.out + captured.err
    files = [path for path in out.rglob("*") if path.is_file()]
    assert {"judgments.jsonl", "judge_report.json", "judge_report.md"} <= {path.name for path in files}
    assert all(SECRET not in path.read_text(errors="replace") for path in files)
    assert "HTTP 400" in read_judgments(out / "judgments.jsonl")["2"]["error"]


def test_missing_key_without_base_url_names_the_variable(monkeypatch):
    monkeypatch.delenv("ANTHROPIC_API_KEY")
    with pytest.raises(ProviderError, match="ANTHROPIC_API_KEY") as caught:
        make_provider("anthropic", MODEL, None)
    assert caught.value.transient is False
