"""The real openai client against the loopback chat-completions server, through every failure path."""

import json

import pytest
from cader.dev.judge_double import LoopbackJudgeServer, synthetic_judgment
from cader.evaluate.judge.client import RetryPolicy, backoff_delay, judge_one
from cader.evaluate.judge.providers import ProviderError, make_provider
from cader.evaluate.judge.questions import Question
from cader.evaluate.judge.scoring import traj_score

SECRET = "sk-test-secret-value-1234"
FAST = RetryPolicy(max_replies=3, max_api_retries=3, backoff_base=0.001, backoff_max=0.01)


@pytest.fixture(autouse=True)
def _key(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)


def question(ecom=True):
    return Question(question_id=42, question="How many reps before 'one more'?", options=[str(i) for i in range(26)],
                    answer="D", ecom_required=ecom,
                    milestones=[{"id": "M1", "type": "temporal_localization", "description": "find the cue"},
                                {"id": "M2", "type": "counting", "description": "count reps"}])


RECORD = {"question_id": 42, "answer": "D", "correct": True, "pred": "D", "response": "I counted three reps."}


def run(script, ecom=True, policy=FAST, timeout=5.0, **server_kwargs):
    with LoopbackJudgeServer(script=script, **server_kwargs) as server:
        provider = make_provider("openai", "loopback-judge", server.base_url, timeout=timeout)
        row = judge_one(provider, question(ecom), RECORD, "single-turn", policy=policy)
        return row, server


@pytest.mark.parametrize("action", ["valid", "fenced", "prose"])
def test_valid_replies_parse_in_one_call(action):
    row, server = run([action])
    expected = synthetic_judgment("42", ["M1", "M2"], "yes")
    assert row["error"] is None and row["attempts"] == 1 and server.total_calls == 1
    assert row["scores"]["P1"] == expected["process_scores"]["task_understanding"]
    assert [m["id"] for m in row["milestones"]] == ["M1", "M2"]
    assert row["traj"] == pytest.approx(traj_score(row["scores"]))
    request = server.requests[0]
    assert request["temperature"] == 0 and request["messages"][0]["role"] == "system"
    user = request["messages"][1]["content"]
    assert '"answer"' not in user and "correct" not in user and "FINAL ANSWER: D" in user


@pytest.mark.parametrize("bad", ["malformed", "wrong_milestones", "bad_score", "unknown_tag", "p4_null"])
def test_invalid_reply_is_repaired_with_the_validation_error(bad):
    row, server = run([bad, "valid"])
    assert row["error"] is None and row["attempts"] == 2 and server.total_calls == 2
    second = server.requests[1]["messages"]
    assert second[2]["role"] == "assistant" and second[3]["role"] == "user"
    assert "rejected by the output validator" in second[3]["content"]


def test_always_invalid_ends_with_error_and_no_scores():
    row, server = run(["malformed"])
    assert server.total_calls == FAST.max_replies == row["attempts"]
    assert row["scores"] is None and row["traj"] is None and row["mc_rate"] is None
    assert "no valid judgment" in row["error"] and "invalid judge output" in row["error"]


def test_429_then_success():
    row, server = run(["429", "429", "valid"])
    assert row["error"] is None and row["attempts"] == 3 and server.total_calls == 3


def test_500_forever_is_bounded_and_recorded():
    row, server = run(["500"])
    assert server.total_calls == 1 + FAST.max_api_retries == row["attempts"]
    assert row["scores"] is None and "HTTP 500" in row["error"]


def test_timeout_then_success():
    row, server = run(["hang", "valid"], timeout=0.3, hang_seconds=1.0)
    assert row["error"] is None and row["attempts"] == 2 and server.total_calls == 2


def test_p4_forced_null_when_not_required_even_if_scored():
    row, _ = run(["valid"], ecom=False)
    assert row["scores"]["P4"] is None and row["sweep_required"] == "no"


def test_key_from_environment_never_written(monkeypatch):
    row, _ = run(["500"])
    assert SECRET not in json.dumps(row)
    monkeypatch.delenv("OPENAI_API_KEY")
    with pytest.raises(ProviderError, match="OPENAI_API_KEY"):
        make_provider("openai", "gpt-x", None)


def test_backoff_grows_with_jitter_and_cap():
    import random
    rng = random.Random(0)
    delays = [backoff_delay(k, 1.0, 8.0, rng) for k in range(6)]
    assert all(2 ** k / 2 <= d <= 2 ** k for k, d in enumerate(delays[:4]))
    assert all(4.0 <= d <= 8.0 for d in delays[3:])


@pytest.mark.slow
def test_hf_local_provider_garbage_is_recorded_as_error_not_scored(tiny_model_dir):
    # The tiny random model cannot write a judgment: every reply fails validation and the row keeps no score.
    provider = make_provider("hf-local", str(tiny_model_dir), max_tokens=8)
    row = judge_one(provider, question(), RECORD, "single-turn", policy=RetryPolicy(max_replies=2))
    assert row["attempts"] == 2 and row["scores"] is None and "invalid judge output" in row["error"]
