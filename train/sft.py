"""Supervised fine-tuning of Qwen3-VL on the tool-free CoT mix (paper supplementary A), then the HF export.

    python train/sft.py --config configs/train/cot_mix_tiny.yaml     # tiny model + synthetic mix, CPU, minutes
    python train/sft.py --config configs/train/cot_mix.yaml          # the paper recipe (8 GPUs, DeepSpeed ZeRO-3)

Every option can be overridden with a dotted flag (e.g. `--trainer.max_steps 5 --model.lora_r 8`); a bare config name
is looked up in configs/train/. `--ckpt_path PATH|last` resumes exactly (optimizer, scheduler, data position).
The export lands in `<trainer.default_root_dir>/export/`. `--plan_only true` stops after planning the data (counts per
source, data_report.json, plan cache): check a mix and fill its cache on a CPU node before a GPU job.
"""
import logging
import sys

from cader.train.cli import add_sft_arguments, find_config, missing_inputs_message, plan_only, run_export
from cader.train.datamodule import SFTDataModule, SourceError
from cader.train.module import SFTModule
from lightning.pytorch.cli import LightningCLI


class SFTCLI(LightningCLI):
    def add_arguments_to_parser(self, parser):
        add_sft_arguments(parser)


def main(argv=None):
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    argv = find_config(list(sys.argv[1:] if argv is None else argv))
    message = missing_inputs_message(argv)
    if message:
        print(message, file=sys.stderr)
        return 2
    code = plan_only(argv)   # --plan_only: budget the mix and fill the plan cache, no model or Trainer
    if code is not None:
        return code
    # LightningCLI parses `argv` (the command line with the config name resolved); it warns when sys.argv also holds
    # arguments, so the program name alone is left there while it parses.
    program_args, sys.argv = sys.argv, sys.argv[:1]
    try:
        cli = SFTCLI(SFTModule, SFTDataModule, run=False, args=argv, save_config_kwargs={"overwrite": True},
                     parser_kwargs={"default_env": False})
    finally:
        sys.argv = program_args
    try:
        cli.trainer.fit(cli.model, datamodule=cli.datamodule, ckpt_path=cli.config.ckpt_path)
    except SourceError as err:   # a source of the mix with nothing trainable: say why, exit non-zero
        print(f"sft: {err}", file=sys.stderr)
        return 2
    if cli.config.export:
        out = run_export(cli.trainer, cli.model)
        if out is not None:
            print(f"export: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
