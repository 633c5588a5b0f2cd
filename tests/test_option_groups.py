"""Each stage takes its options as a few dataclasses, filled from the same flat flags and YAML keys as before
(`--alpha`, `alpha:`, `--model.lr`, `--data.max_length`): calibrate/fit.py, the judge,
scripts/make_synthetic_data.py and the SFT module and data module. --help shows each group under its own heading; --print_config keeps the flat
keys (the shipped configs and the documented command lines use them)."""

import dataclasses
from dataclasses import dataclass

import pytest
import yaml
from cader.cli.function_cli import call_arguments, function_parser, grouped_arguments


@dataclass(frozen=True)
class Pace:
    """How fast it goes.

    Args:
        speed: how fast
        steps: how many steps
    """

    speed: float = 1.0
    steps: int = 3


def walk(out: str, pace: Pace | None = None) -> tuple:
    """Walk somewhere.

    Args:
        out: where
        pace: how fast and how far
    """
    return out, pace


def test_a_group_is_flat_flags_that_build_its_dataclass(tmp_path, capsys):
    parser = function_parser(walk, "walk", groups=("pace",))
    args = call_arguments(parser, ["--out", "x", "--speed", "2.5"])
    assert args == {"out": "x", "speed": 2.5, "steps": 3}
    assert walk(**grouped_arguments(walk, args, ("pace",))) == ("x", Pace(speed=2.5, steps=3))
    config = tmp_path / "walk.yaml"
    config.write_text("out: y\nsteps: 7\n")
    assert call_arguments(parser, ["--config", str(config)]) == {"out": "y", "speed": 1.0, "steps": 7}
    help_text = parser.format_help()
    assert help_text.index("How fast it goes:") < help_text.index("\n  --speed")
    with pytest.raises(SystemExit):
        parser.parse_args(["--out", "x", "--pace.speed", "2"])   # no nested spelling: one flag per setting
    with pytest.raises(TypeError, match="not a dataclass"):
        function_parser(walk, groups=("out",))


def test_calibrate_fit_flags_fill_the_rule_fit_split_and_output_groups(capsys):
    from cader.calibrate import fit
    from cader.calibrate.options import FitOptions, OutputOptions, Rule, SplitOptions
    from cader.calibrate.pipeline import calibrate_predictions

    flags = ["--config", "configs/calibrate/default.yaml", "--predictions", "p.jsonl", "--out", "o", "--mode",
             "budget", "--budget", "0.5", "--seed", "3", "--temperature", "2.0", "--figures", "false"]
    args = call_arguments(fit.build_parser(), flags)
    kwargs = grouped_arguments(calibrate_predictions, args, fit.GROUPS)
    assert kwargs["rule"] == Rule(mode="budget", budget=0.5)
    assert kwargs["fit"] == FitOptions(temperature=2.0) and kwargs["split"] == SplitOptions(seed=3)
    assert kwargs["output"] == OutputOptions(figures=False)
    assert set(kwargs) == {"predictions", "out", "rule", "fit", "split", "output"}
    with pytest.raises(SystemExit):
        fit.build_parser().parse_args(["--predictions", "p", "--out", "o", "--print_config"])
    printed = yaml.safe_load(capsys.readouterr().out)
    assert printed["alpha"] == 0.05 and printed["split_by"] == "video" and "rule" not in printed


def test_judge_flags_fill_the_api_protocol_retry_and_run_groups():
    from cader.evaluate.judge import cli
    from cader.evaluate.judge.client import RetryPolicy
    from cader.evaluate.judge.pipeline import JudgeRun

    args = cli.judge_parser().parse_args(
        ["--config", "configs/judge/default.yaml", "--predictions", "p", "--questions", "q", "--out", "o",
         "--provider", "openai", "--model", "m", "--max_replies", "2", "--concurrency", "4", "--force", "true"])
    options = {k: v for k, v in args.as_dict().items() if k not in ("config", "command", "compare")}
    kwargs = grouped_arguments(cli.judge, options, cli.GROUPS)
    assert (kwargs["api"].provider, kwargs["api"].model, kwargs["api"].max_tokens) == ("openai", "m", None)
    assert kwargs["protocol_options"] == cli.ProtocolOptions("paper", None)
    assert kwargs["policy"] == RetryPolicy(max_replies=2)
    assert kwargs["run"] == JudgeRun(concurrency=4, cache=True, force=True, progress=True)


def test_judging_without_a_model_names_the_missing_flag(capsys):
    from cader.evaluate.judge import cli

    with pytest.raises(SystemExit):
        cli.main(["--predictions", "p", "--questions", "q", "--out", "o"])
    assert "judging needs --model" in capsys.readouterr().err


def test_the_synthetic_data_flags_fill_counts_frames_and_durations(monkeypatch):
    from cader.dev.synthetic.dataset import Counts, Frames, Timeline
    from cader.scripts import make_synthetic_data as script

    seen = {}
    monkeypatch.setattr(script, "make_synthetic_data", lambda out, seed, *groups: seen.update(groups=groups) or {})
    script.main(["--out", "d", "--n_train", "5", "--width", "64", "--event_max_s", "3"])
    counts, frames, timeline = seen["groups"]
    assert counts == Counts(n_train=5, n_test=96)   # the quickstart's test split, not the library's n_eval
    assert frames == Frames(width=64)
    assert timeline == Timeline(event_len=(1, 3))


def test_the_sft_module_and_data_module_take_their_flat_keys_as_groups():
    from cader.train.budget import BudgetConfig
    from cader.train.cli import parse_sft_args
    from cader.train.datamodule import SFTDataModule
    from cader.train.module import ModuleSettings, SFTModule

    cfg = parse_sft_args(["--config", "cot_mix_tiny.yaml", "--model.lr", "0.5", "--model.lora_r", "4",
                          "--data.max_length", "1024", "--data.batch_size", "2"])
    module = SFTModule(**cfg.model.as_dict())
    assert (module.settings.lr, module.settings.lora_r, module.settings.warmup_ratio) == (0.5, 4, 0.1)
    assert set(module.hparams) >= {f.name for f in dataclasses.fields(ModuleSettings)}   # defaults included
    data = SFTDataModule(**{**cfg.data.as_dict(), "processor_path": "p"})
    assert (data.batch_size, data.budget.max_length, data.budget.max_frames) == (2, 1024, 32)
    assert type(data.budget) is BudgetConfig and data.budget.timestamp_tokens == BudgetConfig().timestamp_tokens
    with pytest.raises(TypeError, match="lrr"):
        SFTModule("m", lrr=1.0)   # a misspelt setting is an error, not ignored
