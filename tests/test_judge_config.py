import importlib.util
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]


def load_entry():
    spec = importlib.util.spec_from_file_location("judge_entry", REPO / "evaluate" / "judge.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_default_judge_yaml_parses_through_the_cli(tmp_path):
    config = REPO / "configs" / "judge" / "default.yaml"
    raw = yaml.safe_load(config.read_text())
    assert raw["provider"] in ("openai", "anthropic", "hf-local") and raw["max_tokens"] == 4096
    assert not any("key" in name.lower() for name in raw)  # keys come from the environment only
    args = load_entry().judge_parser().parse_args(
        ["--config", str(config), "--predictions", "p.jsonl", "--questions", "q.jsonl", "--out", str(tmp_path),
         "--concurrency", "3"])
    assert args.concurrency == 3 and args.provider == raw["provider"] and args.model == raw["model"]
    assert args.max_replies == raw["max_replies"] and args.cache is True


def test_compare_parser_takes_several_files():
    args = load_entry().compare_parser().parse_args(["a.jsonl", "b.jsonl", "c.jsonl", "--metric", "traj"])
    assert args.files == ["a.jsonl", "b.jsonl", "c.jsonl"] and args.metric == "traj"
