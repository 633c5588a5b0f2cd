"""Request parameters per model family, from the config, checked on the wire through the real openai and anthropic
clients: reasoning models get max_completion_tokens and no temperature, Claude Opus 4.7 gets the 1M-context beta
header when configured, and an unknown parameter is a config error."""

import importlib
import json
from pathlib import Path
from typing import get_args

import pytest
import yaml
from cader.dev.judge_double import LoopbackJudgeServer
from cader.evaluate.judge.client import RetryPolicy, judge_one
from cader.evaluate.judge.params import CONTEXT_1M_BETA, JudgeConfigError, family_for
from cader.evaluate.judge.providers import (
    DEFAULT_FAMILIES,
    PROVIDERS,
    AnthropicProvider,
    OpenAICompatibleProvider,
    ProviderName,
    families_of_the_registry,
    judge_config,
    make_provider,
    parse_families,
)
from cader.evaluate.judge.questions import Question

REPO = Path(__file__).resolve().parents[1]
CONFIG = REPO / "configs" / "judge" / "default.yaml"
FAST = RetryPolicy(max_replies=2, max_api_retries=1, backoff_base=0.001, backoff_max=0.01)


@pytest.fixture(autouse=True)
def _keys(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "loopback-dummy")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "loopback-dummy")
    for name in ("ANTHROPIC_BASE_URL", "OPENAI_BASE_URL"):
        monkeypatch.delenv(name, raising=False)


def question():
    return Question(question_id=11, question="Which sign appears first?", options=["a", "b", "c"], answer="B",
                    ecom_required=False, milestones=[{"id": "M1", "type": "ocr_text_reading", "description": "sign"}])


def judge_as(api, model, families=None, max_tokens=4096):
    """One judgment by `model` against a loopback server that applies that model's request rules."""
    with LoopbackJudgeServer(also_answers_as=[model]) as server:
        url = server.base_url if api == "openai" else server.anthropic_base_url
        provider = make_provider(api, model, url, timeout=5.0, families=families, max_tokens=max_tokens)
        row = judge_one(provider, question(), {"question_id": 11, "pred": "B"}, "cader", policy=FAST)
    return row, server


@pytest.mark.parametrize("model", ["gpt-5", "gpt-5-mini", "o1", "o3-mini", "o4-mini"])
def test_reasoning_models_get_max_completion_tokens_and_no_temperature(model):
    row, server = judge_as("openai", model, max_tokens=16384)
    assert row["error"] is None and row["attempts"] == 1
    body = server.requests[0]
    assert body["model"] == model and body["max_completion_tokens"] == 16384
    assert "max_tokens" not in body and "temperature" not in body
    assert row["judge_config"]["family"] == "openai-reasoning"


def test_a_reasoning_model_out_of_tokens_before_any_text_is_an_error_naming_the_limit():
    with LoopbackJudgeServer(also_answers_as=["gpt-5"], script=["out_of_tokens", "valid"]) as server:
        provider = make_provider("openai", "gpt-5", server.base_url, timeout=5.0, max_tokens=512)
        row = judge_one(provider, question(), {"question_id": 11, "pred": "B"}, "cader", policy=FAST)
    # Asking again would spend the same budget the same way: one call, no repair turn with an empty reply.
    assert server.total_calls == 1 and row["scores"] is None
    assert "max_completion_tokens=512" in row["error"] and "raise --max_tokens" in row["error"]


def test_the_loopback_rejects_the_old_request_shape_for_gpt5():
    # The request every model used to get (temperature 0, max_tokens): the API's 400, not retried, no score.
    old_shape = [{"name": "everything", "providers": ["openai"], "models": ["*"], "temperature": 0.0}]
    row, server = judge_as("openai", "gpt-5", families=old_shape)
    assert len(server.requests) == 1 and row["scores"] is None and "HTTP 400" in row["error"]
    assert row["attempts"] == 1 and "invalid_request_error" in row["error"]


def test_other_openai_compatible_models_decode_greedily_with_max_tokens():
    row, server = judge_as("openai", "Qwen/Qwen3-32B")
    body = server.requests[0]
    assert row["error"] is None and body["temperature"] == 0 and body["max_tokens"] == 4096
    assert "max_completion_tokens" not in body


def test_reasoning_effort_comes_from_the_family():
    families = [{"name": "gpt5-medium", "providers": ["openai"], "models": ["gpt-5*"],
                 "token_limit_param": "max_completion_tokens", "reasoning_effort": "medium"}]
    row, server = judge_as("openai", "gpt-5", families=families)
    assert row["error"] is None and server.requests[0]["reasoning_effort"] == "medium"
    assert row["judge_config"]["reasoning_effort"] == "medium"


def test_opus_4_7_gets_the_1m_context_beta_and_other_claude_models_do_not():
    row, server = judge_as("anthropic", "claude-opus-4-7")
    assert row["error"] is None and server.headers[0]["anthropic-beta"] == CONTEXT_1M_BETA
    assert not {"temperature", "top_p", "top_k"} & set(server.requests[0])
    row, server = judge_as("anthropic", "claude-custom-judge")
    assert row["error"] is None and "anthropic-beta" not in server.headers[0]


def test_default_yaml_uses_the_built_in_families():
    raw = yaml.safe_load(CONFIG.read_text())
    assert raw["families"] is None  # the registry's table, so a new provider needs no YAML entry
    assert parse_families(raw["families"]) == parse_families(DEFAULT_FAMILIES)
    assert family_for("anthropic", raw["model"], parse_families(raw["families"])).anthropic_beta == [CONTEXT_1M_BETA]


def test_every_registered_provider_is_a_choice_and_has_a_catch_all_family():
    assert get_args(ProviderName) == tuple(sorted(PROVIDERS))
    families = parse_families(None)
    for name, cls in PROVIDERS.items():
        assert cls.FAMILIES[-1]["models"] == ["*"], f"{cls.__name__}: its last family is not a catch-all"
        assert family_for(name, "a-model-no-specific-family-names", families).name == cls.FAMILIES[-1]["name"]


def test_the_family_table_comes_from_the_registry_with_every_name_of_a_class():
    # a fifth name for the Chat Completions class: every one of its families lists it; specific families first
    registry = {"anthropic": AnthropicProvider, "openai": OpenAICompatibleProvider, "vllm": OpenAICompatibleProvider}
    table = families_of_the_registry(registry)
    assert [(f["name"], f["providers"]) for f in table] == [
        ("claude-opus-4-7", ["anthropic"]),
        ("openai-reasoning", ["openai", "vllm"]),
        ("anthropic", ["anthropic"]),
        ("openai-compatible", ["openai", "vllm"]),
    ]
    assert table[1]["token_limit_param"] == "max_completion_tokens" and table[3]["temperature"] == 0.0


def test_a_family_naming_an_unregistered_provider_is_a_config_error():
    family = {"name": "mine", "providers": ["openia"], "models": ["*"]}
    with pytest.raises(JudgeConfigError, match=r"families\[0\] \(mine\).*unknown provider\(s\) \['openia'\]"):
        parse_families([family])


def test_one_class_under_two_names_judges_alike():
    family = family_for("openai-compatible", "gpt-5", parse_families(None))
    assert family.name == "openai-reasoning"
    assert judge_config("openai-compatible", "gpt-5", 10, family) == judge_config("openai", "gpt-5", 10, family)
    assert judge_config("openai-compatible", "gpt-5", 10, family)["provider"] == OpenAICompatibleProvider.NAME


@pytest.mark.parametrize(("entry", "message"), [
    ({"temprature": 0}, "unknown parameter 'temprature'"),
    ({"max_tokens": 10}, "unknown parameter 'max_tokens'"),
    ({"anthropic_beta": ["x"]}, "anthropic_beta is an Anthropic header"),
    ({"token_limit_param": "max_output_tokens"}, "token_limit_param"),
    ({"temperature": 5}, "temperature"),
])
def test_bad_family_entries_are_config_errors_naming_entry_and_parameter(entry, message):
    family = {"name": "mine", "providers": ["openai"], "models": ["*"], **entry}
    with pytest.raises(JudgeConfigError, match=message) as caught:
        parse_families([DEFAULT_FAMILIES[0], family])
    assert "families[1] (mine)" in str(caught.value)


def test_a_model_no_family_matches_is_a_config_error():
    only_gpt = [{"name": "gpt", "providers": ["openai"], "models": ["gpt-*"]}]
    with pytest.raises(JudgeConfigError, match="no entry of families matches provider 'openai' and model 'qwen3'"):
        make_provider("openai", "qwen3", "http://127.0.0.1:9/v1", families=only_gpt)


def test_cli_stops_on_an_unknown_parameter_before_any_call(tmp_path):
    raw = yaml.safe_load(CONFIG.read_text())
    raw["families"] = [{**DEFAULT_FAMILIES[0], "temprature": 0}]
    config = tmp_path / "judge.yaml"
    config.write_text(yaml.safe_dump(raw))
    entry = importlib.import_module("cader.evaluate.judge.cli")
    with pytest.raises(SystemExit) as caught:
        entry.main(["--config", str(config), "--predictions", "p.jsonl", "--questions", "q.jsonl",
                    "--out", str(tmp_path / "out")])
    assert "config error" in str(caught.value) and "unknown parameter 'temprature'" in str(caught.value)
    assert not (tmp_path / "out").exists()


def test_default_config_pointed_at_gpt5_sends_the_reasoning_shape(tmp_path):
    # configs/judge/default.yaml with the paper's second judge, as the README shows it: --provider openai --model gpt-5
    rows = [{"question_id": 11, "question": "Which sign appears first?", "options": ["a", "b", "c"], "answer": "B",
             "ecom_required": False, "milestones": [{"id": "M1", "type": "ocr_text_reading", "description": "sign"}]}]
    (tmp_path / "q.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "p.jsonl").write_text(json.dumps({"question_id": 11, "pred": "B", "response": "The bakery."}) + "\n")
    entry = importlib.import_module("cader.evaluate.judge.cli")
    with LoopbackJudgeServer(also_answers_as=["gpt-5"]) as server:
        entry.main(["--config", str(CONFIG), "--predictions", str(tmp_path / "p.jsonl"), "--questions",
                    str(tmp_path / "q.jsonl"), "--out", str(tmp_path / "out"), "--provider", "openai",
                    "--base_url", server.base_url, "--model", "gpt-5", "--progress", "false"])
    (body,) = server.requests
    assert body["max_completion_tokens"] == 4096 and not {"max_tokens", "temperature"} & set(body)
    report = json.loads((tmp_path / "out" / "judge_report.json").read_text())
    assert report["n_judged"] == 1 and report["real_judge"] is False
