"""Every YAML shipped under configs/ parses with the parser of the entry point that reads it.

Required flags that a config cannot sensibly hold (output folders, input files) are supplied on the command line, as a
user would; an unknown key in any config makes its parser fail.
"""

import importlib.util
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
CONFIGS = sorted((REPO / "configs").rglob("*.yaml"))


def _entry(relpath: str):
    """The module a documented script runs, imported through the `cader` command table (one name per script)."""
    from cader.cli.main import COMMANDS

    modules = {}
    for command in COMMANDS.values():  # the script's own stage first (`cader compare` is a subcommand of judge.py)
        modules.setdefault(command.script, command.module)
    return importlib.import_module(modules[relpath])


def parse(config: Path):
    stage = config.relative_to(REPO / "configs").parts[0]
    if stage == "train":
        import yaml
        from cader.train.cli import parse_sft_args

        if "model_path" not in (yaml.safe_load(config.read_text()).get("model") or {}):
            # an overlay (cpu.yaml: the CPU route) is stacked after a recipe, as documented
            return parse_sft_args(["--config", str(REPO / "configs" / "train" / "cot_mix.yaml"), "--config", str(config)])
        return parse_sft_args(["--config", str(config)])
    if stage == "eval":
        return _entry("evaluate/run.py").build_parser().parse_args(["--config", str(config), "--out", "x"])
    if stage == "calibrate":
        return _entry("calibrate/fit.py").build_parser().parse_args(
            ["--config", str(config), "--predictions", "p.jsonl", "--out", "x"]
        )
    if stage == "judge":
        return _entry("evaluate/judge.py").judge_parser().parse_args(
            ["--config", str(config), "--predictions", "p", "--questions", "q", "--out", "x"]
        )
    raise AssertionError(f"{config}: no entry point is known to read configs/{stage}/; add it to this test")


def test_there_are_configs_for_every_stage():
    stages = {c.relative_to(REPO / "configs").parts[0] for c in CONFIGS}
    assert {"train", "eval", "calibrate", "judge"} <= stages


@pytest.mark.parametrize("config", CONFIGS, ids=lambda p: str(p.relative_to(REPO / "configs")))
def test_shipped_yaml_parses(config):
    assert parse(config) is not None


def test_unknown_key_is_rejected(tmp_path):
    bad = tmp_path / "eval" / "bad.yaml"
    bad.parent.mkdir()
    bad.write_text((REPO / "configs" / "eval" / "cader.yaml").read_text() + "\nnot_a_real_option: 1\n")
    with pytest.raises(SystemExit):
        _entry("evaluate/run.py").build_parser().parse_args(["--config", str(bad), "--out", "x"])


def test_paper_recipe_reads_the_five_tool_free_longvt_files_under_one_release_root():
    """cot_mix.yaml: the release's file names under `data.release_root`, media under `data.media_root`, nothing
    per file; the LongVT files with tool calls are not in the mix."""
    cfg = parse(REPO / "configs" / "train" / "cot_mix.yaml")
    sources = [s if isinstance(s, dict) else vars(s) for s in cfg.data.sources]
    assert sorted(s["path"] for s in sources) == sorted([
        "longvt_sft_videor1_165k5.parquet", "longvt_sft_longvideoreason_5k2.parquet",
        "longvt_sft_llavacot_54k5.parquet", "longvt_sft_openvlthinker_2k8.parquet", "longvt_sft_wemath_602.parquet"])
    assert {s["format"] for s in sources} == {"longvt"} and not any(s["media_root"] for s in sources)
    assert cfg.data.release_root and cfg.data.media_root
    assert cfg.model.lr_scheduler_type == "cosine"


def test_the_cpu_route_keeps_the_recipes_zero_settings_and_changes_only_the_device():
    """configs/train/cpu.yaml after cot_mix.yaml: the recipe's ZeRO config through CPUDeepSpeedStrategy, one fp32
    process; the data, model and schedule stay the recipe's."""
    from cader.train.cli import parse_sft_args

    recipe = parse_sft_args(["--config", "cot_mix.yaml"])
    cpu = parse_sft_args(["--config", "cot_mix.yaml", "--config", "cpu.yaml"])
    assert cpu.trainer.strategy.class_path == "cader.train.strategies.CPUDeepSpeedStrategy"
    assert cpu.trainer.strategy.init_args.zero_config == recipe.trainer.strategy.init_args.zero_config == "zero3"
    assert (cpu.trainer.accelerator, cpu.trainer.devices, cpu.trainer.precision, cpu.model.dtype) == (
        "cpu", 1, "32-true", "float32")
    assert cpu.data == recipe.data and cpu.model.lr == recipe.model.lr
    assert cpu.trainer.accumulate_grad_batches == recipe.trainer.accumulate_grad_batches
