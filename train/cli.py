"""Helpers of train/sft.py kept out of the entry script: config lookup, missing-input message, the final export."""
from __future__ import annotations

import os
import sys
from pathlib import Path

import yaml
from cader.train.export import export_hf, gather_state_dict

REPO = Path(__file__).resolve().parents[1]
CONFIG_DIR = REPO / "configs" / "train"


def add_sft_arguments(parser) -> None:
    """Arguments sft.py adds to LightningCLI's (shared with make_parser so tests validate the same schema)."""
    parser.link_arguments("model.model_path", "data.processor_path")
    parser.add_argument("--ckpt_path", type=str | None, default=None, help="checkpoint to resume from, or 'last'")
    parser.add_argument("--export", type=bool, default=True, help="write <default_root_dir>/export at the end")
    parser.add_argument("--make_missing", type=dict | None, default=None,
                        help="{path: command}: inputs this config needs and the command that creates each")
    parser.add_argument("--plan_only", type=bool, default=False,
                        help="read, filter and budget the mix, fill the plan cache, write data_report.json, and stop "
                             "(no model, no Trainer: run it on a CPU node before the GPU job)")


def make_parser():
    """The sft.py argument schema without instantiating anything (config validation)."""
    from cader.train.datamodule import SFTDataModule
    from cader.train.module import SFTModule
    from jsonargparse import ActionConfigFile
    from lightning.pytorch import Trainer
    from lightning.pytorch.cli import LightningArgumentParser

    parser = LightningArgumentParser(default_env=False)
    parser.add_argument("--config", action=ActionConfigFile)
    parser.add_argument("--seed_everything", type=bool | int, default=True)
    parser.add_lightning_class_args(Trainer, "trainer")
    parser.add_lightning_class_args(SFTModule, "model")
    parser.add_lightning_class_args(SFTDataModule, "data")
    add_sft_arguments(parser)
    return parser


def find_config(argv: list[str]) -> list[str]:
    """Replace a bare `--config cot_mix.yaml` (or `cot_mix`) by its path under configs/train/."""
    out = list(argv)
    for i, arg in enumerate(out):
        value, eq = (arg.split("=", 1)[1], True) if arg.startswith("--config=") else (None, False)
        if arg == "--config" and i + 1 < len(out):
            value = out[i + 1]
        if value is None or Path(value).exists():
            continue
        for cand in (CONFIG_DIR / value, CONFIG_DIR / f"{value}.yaml"):
            if cand.is_file():
                if eq:
                    out[i] = f"--config={cand}"
                else:
                    out[i + 1] = str(cand)
                break
    return out


def missing_inputs_message(argv: list[str]) -> str | None:
    """If the config names the tiny default's model/data and they do not exist yet, the commands that make them."""
    configs = [argv[i + 1] for i, a in enumerate(argv[:-1]) if a == "--config"]
    configs += [a.split("=", 1)[1] for a in argv if a.startswith("--config=")]
    for cfg in configs:
        try:
            data = yaml.safe_load(Path(cfg).read_text()) or {}
        except (OSError, yaml.YAMLError):
            return None   # let the CLI report it
        hints = data.get("make_missing") or {}
        cmds = [cmd for path, cmd in hints.items() if not Path(path).exists()]
        if cmds:
            return "missing inputs of this config; create them first:\n  " + "\n  ".join(cmds)
    return None


def local_processor_problem(path: str) -> str | None:
    """Why ``path`` cannot be loaded without the network (None if it can): planning runs on CPU nodes that may
    have no hub access, so a hub id is used only when it is already in the local Hugging Face cache."""
    if not path:
        return "no processor: set --model.model_path (a local folder or a hub id already downloaded)"
    if Path(path).is_dir():
        return None
    try:
        from huggingface_hub import try_to_load_from_cache

        for name in ("preprocessor_config.json", "processor_config.json", "tokenizer_config.json"):
            if isinstance(try_to_load_from_cache(path, name), str):
                return None
    except (ImportError, ValueError) as err:  # an id the hub client rejects is reported like a missing one
        return f"processor {path!r}: {err}; pass --model.model_path <local folder>"
    return (f"processor {path!r} is neither a local folder nor in the Hugging Face cache; download it first "
            f"(huggingface-cli download {path}) or pass --model.model_path <local folder>")


def plan_only(argv: list[str]) -> int | None:
    """If the arguments ask for `--plan_only`, plan the data of the config and return the exit code; else None.

    Only the data section is instantiated, so the paper recipe's 8-GPU Trainer is never built: the mix can be
    checked and its plan cache filled on any machine that sees the data (the ranks' setup then only reads it).
    The data is read and checked before any processor is loaded; a source with nothing trainable exits 2 with
    the reason.
    """
    from cader.train.datamodule import SFTDataModule, SourceError
    from cader.train.source_report import group_totals, loss_warnings, summary_line

    cfg = make_parser().parse_args(argv)
    if not cfg.plan_only:
        return None
    data = cfg.data.as_dict()
    data["report_dir"] = data.get("report_dir") or cfg.trainer.default_root_dir or "."
    module = SFTDataModule(**data)
    try:
        module.read_all()
        problem = local_processor_problem(module.processor_path)
        if problem:
            print(f"plan_only: {problem}", file=sys.stderr)
            return 2
        if not Path(module.processor_path).is_dir():
            os.environ.setdefault("HF_HUB_OFFLINE", "1")   # in the cache: never reach for the network
        module.prepare_data()
        module.setup("fit")
    except SourceError as err:  # a missing or unreadable source file, a source with nothing trainable
        print(f"plan_only: {err}", file=sys.stderr)
        return 2
    for name, source in module.report.items():
        cache = source.get("plan_cache", {})
        filled = cache.get("prepare_data", cache)  # what filling the cache did; setup then only reads it
        print(f"{summary_line(name, source)}; plan cache: {filled.get('hits', 0)} hits, "
              f"{filled.get('misses', 0)} misses")
    for group, tot in group_totals(module.report).items():
        print(f"group {group}: {tot['rows']} rows, {tot['tool_calls_dropped']} tool-call rows dropped, "
              f"{tot['trainable']} trainable, {tot['train_samples']} to train")
    total = sum(s["train_samples"] for s in module.report.values())
    print(f"total: {total} samples to train from {len(module.report)} sources")
    for message in loss_warnings(module.report, module.max_source_loss):
        print(message, file=sys.stderr)
    print(f"data report: {Path(data['report_dir']) / 'data_report.json'}")
    return 0


def run_export(trainer, module) -> Path | None:
    """Consolidate (ZeRO-3 collective on all ranks), then rank 0 writes <default_root_dir>/export."""
    state = gather_state_dict(trainer, module)
    if state is None:
        return None
    hp = module.hparams
    lora = None
    if hp.lora_r > 0:
        lora = {"r": hp.lora_r, "lora_alpha": hp.lora_alpha, "lora_dropout": hp.lora_dropout,
                "target_modules": hp.lora_targets, "bias": "none"}
    return export_hf(state, hp.model_path, Path(trainer.default_root_dir) / "export", lora=lora)
