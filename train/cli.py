"""Helpers of train/sft.py kept out of the entry script: config lookup, missing-input message, the final export."""
from __future__ import annotations

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
