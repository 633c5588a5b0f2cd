"""Back-pressure through the real openai and anthropic clients: Retry-After (seconds, HTTP-date, capped, within a
time budget), 200 replies whose body is not the API's JSON, and replies holding more than one JSON object.

Waits are recorded by a fake clock, never slept."""

import random
import time
from email.utils import formatdate

import pytest
from cader.dev.judge_double import LoopbackJudgeServer
from cader.evaluate.judge.client import RetryPolicy, judge_one, retry_delay
from cader.evaluate.judge.providers import LOOPBACK_MODEL, make_provider, retry_after_seconds
from cader.evaluate.judge.questions import Question

POLICY = RetryPolicy(max_replies=3, max_api_retries=4, backoff_base=0.001, backoff_max=0.01,
                     retry_after_max=60.0, time_budget=600.0)


@pytest.fixture(autouse=True)
def _keys(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "loopback-dummy")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "loopback-dummy")
    for name in ("ANTHROPIC_BASE_URL", "OPENAI_BASE_URL"):
        monkeypatch.delenv(name, raising=False)


class FakeClock:
    """time.monotonic and time.sleep for judge_one: a sleep moves the clock and is recorded."""

    def __init__(self):
        self.now, self.sleeps = 0.0, []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


def question():
    return Question(question_id=5, question="How many cars pass?", options=[str(i) for i in range(26)],
                    answer="C", ecom_required=True,
                    milestones=[{"id": "M1", "type": "counting", "description": "count the cars"}])


RECORD = {"question_id": 5, "pred": "C", "response": "Three cars pass."}


def judge(api, script, policy=POLICY, **server_kwargs):
    clock = FakeClock()
    with LoopbackJudgeServer(script=script, **server_kwargs) as server:
        url = server.base_url if api == "openai" else server.anthropic_base_url
        provider = make_provider(api, LOOPBACK_MODEL, url, timeout=5.0)
        row = judge_one(provider, question(), RECORD, "cader", policy=policy, sleep=clock.sleep, clock=clock,
                        rng=random.Random(0))
    return row, server, clock


@pytest.mark.parametrize("api", ["openai", "anthropic"])
@pytest.mark.parametrize("status", ["429", "500", "overloaded"])
def test_retry_after_seconds_are_waited_instead_of_the_backoff(api, status):
    row, server, clock = judge(api, [status, status, "valid"], retry_after="3")
    assert row["error"] is None and row["attempts"] == 3 == server.total_calls
    assert clock.sleeps == [3.0, 3.0] and row["waited_s"] == 6.0  # not the 1 ms backoff


def test_retry_after_as_an_http_date():
    row, _, clock = judge("openai", ["429", "valid"], retry_after=formatdate(time.time() + 30, usegmt=True))
    assert row["error"] is None and len(clock.sleeps) == 1 and 27.0 <= clock.sleeps[0] <= 30.0


def test_retry_after_is_capped():
    row, _, clock = judge("anthropic", ["overloaded", "valid"], retry_after="86400")
    assert row["error"] is None and clock.sleeps == [POLICY.retry_after_max]


def test_waits_count_against_the_time_budget_not_just_the_attempts():
    policy = RetryPolicy(max_replies=3, max_api_retries=10, backoff_base=0.001, backoff_max=0.01,
                         retry_after_max=60.0, time_budget=50.0)
    row, server, clock = judge("openai", ["429"], policy=policy, retry_after="20")
    # 20 s + 20 s fit in 50 s; a third wait would end at 60 s, so the question stops after three calls.
    assert clock.sleeps == [20.0, 20.0] and server.total_calls == 3 == row["attempts"]
    assert row["scores"] is None and "HTTP 429" in row["error"] and "50 s time budget" in row["error"]


@pytest.mark.parametrize("api", ["openai", "anthropic"])
@pytest.mark.parametrize("bad_body", ["truncated_body", "text_body"])
def test_unreadable_200_body_is_retried_then_scored(api, bad_body):
    row, server, clock = judge(api, [bad_body, "valid"])
    assert row["error"] is None and row["scores"] is not None
    assert server.total_calls == 2 == row["attempts"] and len(clock.sleeps) == 1
    assert len(server.requests[1]["messages"]) == len(server.requests[0]["messages"])  # a retry, not a repair


def test_unreadable_200_body_forever_ends_as_an_error_row():
    row, server, _ = judge("openai", ["truncated_body"])
    assert row["scores"] is None and server.total_calls == 1 + POLICY.max_api_retries
    assert "HTTP 200 with an unreadable body" in row["error"]


@pytest.mark.parametrize("api", ["openai", "anthropic"])
def test_reply_with_two_json_objects_is_sent_back_like_a_validation_error(api):
    row, server, _ = judge(api, ["two_objects", "valid"])
    assert row["error"] is None and row["attempts"] == 2 == server.total_calls
    assert row["summary"] != "second thoughts"  # scored from the valid reply, not from either object
    messages = server.requests[1]["messages"]
    roles = [m["role"] for m in messages]
    assert roles[-2:] == ["assistant", "user"]
    assert "2 JSON objects; return exactly one" in messages[-1]["content"]


def test_two_json_objects_every_time_is_never_scored():
    row, server, _ = judge("openai", ["two_objects"])
    assert row["scores"] is None and server.total_calls == POLICY.max_replies
    assert "JSON objects" in row["error"]


def test_retry_after_header_forms():
    assert retry_after_seconds({"retry-after": "3"}) == 3.0
    assert retry_after_seconds({"retry-after": "0.5"}) == 0.5
    assert retry_after_seconds({"retry-after-ms": "1500", "retry-after": "9"}) == 1.5
    assert retry_after_seconds({"retry-after": "Wed, 21 Oct 2015 07:28:00 GMT"}, now=1445412470.0) == 10.0
    assert retry_after_seconds({"retry-after": "Wed, 21 Oct 2015 07:28:00 GMT"}, now=1445412490.0) == 0.0
    assert retry_after_seconds({"retry-after": "soon"}) is None
    assert retry_after_seconds({}) is None and retry_after_seconds(None) is None


def test_retry_delay_is_the_longer_of_backoff_and_capped_retry_after():
    policy = RetryPolicy(backoff_base=1.0, backoff_max=30.0, retry_after_max=10.0)
    rng = random.Random(0)
    assert 4.0 <= retry_delay(3, None, policy, rng) <= 8.0
    assert retry_delay(0, 7.0, policy, rng) == 7.0
    assert retry_delay(0, 500.0, policy, rng) == 10.0
    assert 4.0 <= retry_delay(3, 0.1, policy, rng) <= 8.0  # a short Retry-After never shortens our backoff
