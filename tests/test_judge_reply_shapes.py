"""The loopback test double answers in the shapes the real APIs use (tests/fixtures/judge_replies/, PROVENANCE.md):
the SDKs' own response models accept both the fixtures and the loopback's replies."""

import json
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from anthropic.types import Message
from cader.dev.judge_double import LoopbackJudgeServer
from cader.evaluate.judge.providers import LOOPBACK_MODEL
from openai.types.chat import ChatCompletion

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "judge_replies"
PROMPT = ("QUESTION_ID: 3\nSWEEP_REQUIRED: no\n"
          "Reminder: milestone_coverage MUST contain exactly 1 entries with IDs M1 in this order.")


def fixture(name: str) -> dict:
    return json.loads((FIXTURES / name).read_text())


def post(server: LoopbackJudgeServer, api: str) -> tuple[int, dict, dict]:
    """(status, headers with lower-cased names, JSON body) of one request, as the API's client would send it."""
    body = {"model": LOOPBACK_MODEL, "max_tokens": 64, "messages": [{"role": "user", "content": PROMPT}]}
    if api == "openai":
        url, headers = f"{server.base_url}/chat/completions", {}
    else:
        url, headers = f"{server.anthropic_base_url}/v1/messages", {"anthropic-version": "2023-06-01"}
    request = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                     headers={"Content-Type": "application/json", **headers})
    try:
        with urllib.request.urlopen(request, timeout=5.0) as reply:
            return reply.status, {k.lower(): v for k, v in reply.headers.items()}, json.loads(reply.read())
    except urllib.error.HTTPError as error:
        return error.code, {k.lower(): v for k, v in error.headers.items()}, json.loads(error.read())


def keys(value) -> object:
    """The nested key structure of a JSON value (lists by their first item)."""
    if isinstance(value, dict):
        return {k: keys(v) for k, v in value.items()}
    if isinstance(value, list):
        return [keys(value[0])] if value else []
    return None


@pytest.mark.parametrize(("api", "name", "model"), [("openai", "openai_chat_completion.json", ChatCompletion),
                                                    ("anthropic", "anthropic_message.json", Message)])
def test_replies_validate_through_the_sdk_models(api, name, model):
    model.model_validate(fixture(name))  # the fixture is a real shape
    with LoopbackJudgeServer() as server:
        status, headers, body = post(server, api)
    assert status == 200 and headers["content-type"] == "application/json"
    parsed = model.model_validate(body)
    assert parsed.model == LOOPBACK_MODEL  # who answered, whatever was asked for
    assert set(body) <= set(fixture(name))  # nothing the API does not send


@pytest.mark.parametrize(("api", "action", "name"), [("openai", "429", "openai_error_429.json"),
                                                     ("anthropic", "overloaded", "anthropic_error_529.json")])
def test_error_envelopes_have_the_apis_nesting(api, action, name):
    with LoopbackJudgeServer(script=[action], retry_after="3") as server:
        status, headers, body = post(server, api)
    assert status == {"429": 429, "overloaded": 529}[action] and headers["retry-after"] == "3"
    assert keys(body) == keys(fixture(name))
