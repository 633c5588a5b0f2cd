"""Supervised fine-tuning of Qwen3-VL on the tool-free CoT mix (paper supplementary A), then the HF export.

    python train/sft.py --config configs/train/cot_mix_tiny.yaml     # tiny model + synthetic mix, CPU, minutes
    python train/sft.py --config configs/train/cot_mix.yaml          # the paper recipe (8 GPUs, DeepSpeed ZeRO-3)

Every option can be overridden with a dotted flag (e.g. `--trainer.max_steps 5 --model.lora_r 8`); a bare config name
is looked up in configs/train/. `--ckpt_path PATH|last` resumes exactly (optimizer, scheduler, data position).
The export lands in `<trainer.default_root_dir>/export/` (with cader_export.json: what made it).
`--num_threads N` fixes torch's CPU threads so that runs under different OMP_NUM_THREADS give the same losses.
`--plan_only true` stops after planning the data (counts per source, data_report.json, plan cache): check a mix and
fill its cache on a CPU node before a GPU job. With stdout in a file, progress comes as lines (`--progress_log.*`).

Every file a run writes (logs/, checkpoints/, export/, data_report.json) lands under `--trainer.default_root_dir`.
On a machine without CUDA a GPU recipe runs through `--config configs/train/cpu.yaml` stacked after it.

Exit status: 0 trained and exported; 2 bad input or configuration (missing inputs, an unreadable or empty mix, a GPU
config without a GPU, a missing, empty, cut-short or foreign checkpoint to resume, no optimizer step taken); 3
training stopped by a fault (a non-finite or exploding loss, `--loss_guard.*`): no export.
"""
import logging
import sys
from pathlib import Path

from cader.train.cli import (
    apply_num_threads,
    local_processor_problem,
    make_cli,
    missing_inputs_message,
    plan_data,
    run_export,
)
from cader.train.datamodule import SourceError
from cader.train.guards import TrainingStopped, finite_state
from cader.train.notices import silence_third_party_notices
from cader.train.preflight import device_problem, machine_cuda_devices, resume_problem, state_dict_mismatch


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    """Train and export as the flags in `argv` say (None: the command line); `prog` names the program in its usage."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    silence_third_party_notices()
    cli = make_cli(argv, prog)   # parses the command line once; builds nothing yet
    try:   # before any torch work: the thread count fixes the order of float sums, hence the exact losses
        threads = apply_num_threads(cli.config.num_threads)
    except ValueError as err:
        print(f"sft: {err}", file=sys.stderr)
        return 2
    logging.getLogger("cader.train.sft").info("torch intra-op threads: %d", threads)
    message = missing_inputs_message(cli.config.make_missing)
    if message:
        print(message, file=sys.stderr)
        return 2
    if cli.config.plan_only:   # budget the mix and fill the plan cache: no model, no Trainer
        return plan_data(cli.config)
    # the same check as --plan_only's, before anything is built: one line naming the model, not a hub traceback
    problem = local_processor_problem(cli.config.model.model_path)
    if problem:
        print(f"sft: {problem}", file=sys.stderr)
        return 2
    # a GPU recipe on a machine without CUDA fails deep in Lightning or DeepSpeed: say so, and name the CPU route
    trainer_config = cli.config.trainer
    problem = device_problem(trainer_config.accelerator, trainer_config.strategy, trainer_config.devices,
                             machine_cuda_devices())
    if problem:
        print(f"sft: {problem}", file=sys.stderr)
        return 2
    cli.build()
    folders = [Path(cb.dirpath) for cb in cli.trainer.checkpoint_callbacks if getattr(cb, "dirpath", None)]
    ckpt_path, problem = resume_problem(cli.config.ckpt_path, folders)
    if problem:   # an empty or cut-short checkpoint fails in torch's unpickler with a traceback
        print(f"sft: {problem}", file=sys.stderr)
        return 2
    try:
        cli.trainer.fit(cli.model, datamodule=cli.datamodule, ckpt_path=ckpt_path)
    except SourceError as err:   # a source of the mix with nothing trainable: say why, exit non-zero
        print(f"sft: {err}", file=sys.stderr)
        return 2
    except TrainingStopped as err:   # a non-finite or exploding loss: the weights are not worth exporting
        print(f"sft: {err}", file=sys.stderr)
        return 3
    except RuntimeError as err:   # a checkpoint of another run (LoRA vs full SFT): one line, not the key lists
        mismatch = state_dict_mismatch(err, ckpt_path)
        if mismatch is None:
            raise
        print(f"sft: {mismatch}", file=sys.stderr)
        return 2
    if cli.trainer.global_step == 0:   # e.g. max_steps 0: the "fine-tuned" export would be the base model
        print("sft: no optimizer step was taken; nothing exported (the export would be the untouched base model)",
              file=sys.stderr)
        return 2
    broken = finite_state(cli.model)
    if broken:
        print(f"sft: parameter {broken} holds NaN or infinity after training; nothing exported", file=sys.stderr)
        return 3
    if cli.config.export:
        out = run_export(cli.trainer, cli.model, metadata={"num_threads": cli.config.num_threads})
        if out is not None:
            print(f"export: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
