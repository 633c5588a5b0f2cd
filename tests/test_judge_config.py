import importlib
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]


def load_entry():
    module = importlib.import_module("cader.evaluate.judge.cli")
    return module


def test_default_judge_yaml_parses_through_the_cli(tmp_path):
    config = REPO / "configs" / "judge" / "default.yaml"
    raw = yaml.safe_load(config.read_text())
    # AgentVidBench App. D Table 16: the trajectory judge is Claude Opus 4.7 with 4,096 max output tokens (the
    # protocol's default: null in the YAML, so that --protocol official gets the harness's 8,000)
    from cader.evaluate.judge.protocol import OFFICIAL_MAX_TOKENS, PAPER_MAX_TOKENS

    assert (raw["provider"], raw["model"], raw["max_tokens"]) == ("anthropic", "claude-opus-4-7", None)
    assert (PAPER_MAX_TOKENS, OFFICIAL_MAX_TOKENS) == (4096, 8000)
    assert not any("key" in name.lower() for name in raw)  # keys come from the environment only
    inputs = ["--predictions", "p.jsonl", "--questions", "q.jsonl", "--out", str(tmp_path)]
    args = load_entry().judge_parser().parse_args(["--config", str(config), *inputs, "--concurrency", "3"])
    assert args.concurrency == 3 and args.provider == "anthropic" and args.model == "claude-opus-4-7"
    assert args.max_tokens is None and args.max_replies == raw["max_replies"] and args.cache is True


def test_default_judge_yaml_can_be_pointed_at_an_openai_compatible_server(tmp_path):
    config = REPO / "configs" / "judge" / "default.yaml"
    args = load_entry().judge_parser().parse_args(
        ["--config", str(config), "--predictions", "p.jsonl", "--questions", "q.jsonl", "--out", str(tmp_path),
         "--provider", "openai", "--base_url", "http://127.0.0.1:8000/v1", "--model", "served-judge"])
    assert (args.provider, args.base_url, args.model) == ("openai", "http://127.0.0.1:8000/v1", "served-judge")
    assert args.max_tokens is None  # the protocol's own (4,096 under the paper's)


def test_compare_parser_takes_several_files():
    args = load_entry().compare_parser().parse_args(["a.jsonl", "b.jsonl", "c.jsonl", "--metric", "traj"])
    assert args.files == ["a.jsonl", "b.jsonl", "c.jsonl"] and args.metric == "traj"
