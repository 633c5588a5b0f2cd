"""Credentials inside a URL never reach a report's provenance: a judge --base_url may carry user:password@ or a key
in its query (Azure's `api-key`), and the command line is written into judge_report.json and report.json. The whole
userinfo and every query value are hidden (tests/test_url_redaction.py has the rule by property)."""

import json

from cader.contracts.provenance import collect_provenance, redact_argv, redact_url


def test_url_credentials_are_hidden_and_the_rest_kept():
    assert redact_url("https://judge:hunter2@api.example.org/v1") == "https://***@api.example.org/v1"
    assert redact_url("https://tok123@api.example.org/v1") == "https://***@api.example.org/v1"
    assert (redact_url("https://h.example.org/v1?api-key=SECRET&deployment=gpt&token=T2")
            == "https://h.example.org/v1?api-key=***&deployment=***&token=***")
    assert redact_url("http://127.0.0.1:8000/v1") == "http://127.0.0.1:8000/v1"
    assert redact_url("runs/x/predictions.jsonl") == "runs/x/predictions.jsonl"


def test_the_command_in_provenance_carries_no_credential():
    argv = ["evaluate/judge.py", "--base_url", "https://u:pw-XYZ@h.example.org/v1?api-key=KEY-XYZ",
            "--model_urls=http://a:SECRET-XYZ@127.0.0.1:9/v1", "--api_key", "sk-XYZ", "--model", "m"]
    assert redact_argv(argv) == ["evaluate/judge.py", "--base_url", "https://***@h.example.org/v1?api-key=***",
                                 "--model_urls=http://***@127.0.0.1:9/v1", "--api_key", "***", "--model", "m"]
    text = json.dumps(collect_provenance(argv))
    assert "XYZ" not in text and "--model m" in text
