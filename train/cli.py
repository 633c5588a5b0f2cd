"""The command line of train/sft.py: one LightningCLI with sft.py's own arguments, the plan-only run, the export."""
from __future__ import annotations

import logging
import os
import re
import sys
from pathlib import Path

import lightning as L
from cader.train.datamodule import SFTDataModule, SourceError
from cader.train.guards import LossGuard
from cader.train.module import SFTModule
from cader.train.preflight import outside_run_dir
from cader.train.progress import ProgressLog, stdout_is_terminal, terminal_bar
from jsonargparse import ActionConfigFile
from lightning.pytorch.cli import LightningCLI

REPO = Path(__file__).resolve().parents[1]
CONFIG_DIR = REPO / "configs" / "train"

USAGE = ("%(prog)s [--config CONFIG] [--print_config] [--plan_only true] [--ckpt_path PATH|last] [--export false]\n"
         "       [--num_threads INT]\n"
         "       [--model.NAME VALUE] [--data.NAME VALUE] [--trainer.NAME VALUE] ...")


def resolve_config(value: str) -> str:
    """A config path as given, or a bare name (`cot_mix`, `cot_mix.yaml`) looked up in configs/train/."""
    if Path(value).exists():
        return value
    for candidate in (CONFIG_DIR / value, CONFIG_DIR / f"{value}.yaml"):
        if candidate.is_file():
            return str(candidate)
    return value   # the parser reports it


def first_sentence(text: str) -> str:
    return re.split(r"(?<=\.)\s+(?=[A-Z`(])", " ".join(text.split()), maxsplit=1)[0]


class TrainConfigFile(ActionConfigFile):
    """`--config`, where a bare name stands for a file of configs/train/."""

    def __call__(self, parser, cfg, values, option_string=None):
        super().__call__(parser, cfg, resolve_config(values), option_string)


class SFTCLI(LightningCLI):
    """LightningCLI plus sft.py's own arguments. Constructing it only parses: `build()` instantiates the Trainer,
    the module and the data module, so that missing inputs or `--plan_only` never build a model or a Trainer."""

    # --help's usage line and description (a subclass with options of its own gives its own)
    usage = USAGE
    description = "Fine-tune Qwen3-VL on the tool-free CoT mix, then write the HF export (CADER paper, supplementary A)."

    def init_parser(self, **kwargs):
        from lightning.pytorch import __version__

        kwargs.setdefault("dump_header", [f"lightning.pytorch=={__version__}"])
        parser = self.parser_class(**kwargs)
        parser.add_argument("-c", "--config", action=TrainConfigFile,
                            help="a YAML config: a path, or the name of a file in configs/train/")
        return parser

    def add_arguments_to_parser(self, parser) -> None:
        # The Trainer's flags keep the first sentence of Lightning's description: whole, they would fill some 360
        # lines of --help (the rest is in Lightning's Trainer documentation).
        for action in parser._actions:
            if action.dest.startswith("trainer.") and action.help:
                action.help = first_sentence(action.help)
        parser.link_arguments("model.model_path", "data.processor_path")
        # callbacks every run gets (configured under --loss_guard.* / --progress_log.*, shown by --print_config)
        parser.add_lightning_class_args(LossGuard, "loss_guard")
        parser.add_lightning_class_args(ProgressLog, "progress_log")
        parser.add_argument("--ckpt_path", type=str | None, default=None, help="checkpoint to resume from, or 'last'")
        parser.add_argument("--export", type=bool, default=True, help="write <default_root_dir>/export at the end")
        parser.add_argument("--make_missing", type=dict | None, default=None,
                            help="{path: command}: inputs this config needs and the command that creates each")
        parser.add_argument("--num_threads", type=int | None, default=None,
                            help="torch's intra-op CPU threads (torch.set_num_threads), set before any torch work "
                                 "and recorded in the export's cader_export.json; null keeps torch's default "
                                 "(OMP_NUM_THREADS, else the cores). Fix it for runs that must give the same losses "
                                 "on machines or environments with different thread counts.")
        parser.add_argument("--plan_only", type=bool, default=False,
                            help="read, filter and budget the mix, fill the plan cache, write data_report.json, and "
                                 "stop (no model, no Trainer: run it on a CPU node before the GPU job)")
        # --help leads with the recipe (its own options, the model's and the data's, the guards), then Lightning's
        # Trainer flags: LightningCLI adds the Trainer's group first
        trainer = [g for g in parser._action_groups if any(a.dest.startswith("trainer") for a in g._group_actions)]
        parser._action_groups = [g for g in parser._action_groups if g not in trainer] + trainer

    def instantiate_classes(self) -> None:
        """Does nothing: LightningCLI calls it right after parsing, and sft.py calls `build()` once it may."""

    def build(self) -> None:
        super().instantiate_classes()

    def _instantiate_trainer(self, config: dict, callbacks: list) -> L.Trainer:
        """The Trainer, with the progress bar fit for where stdout goes: in a terminal Lightning's bar minus its
        meaningless `v_num`; in a file (nohup, SLURM, CI) no bar, whose redraws print nothing until the fit ends:
        ProgressLog's lines take its place (unless `--progress_log.when never`). Logs and checkpoints the config
        leaves unplaced go under `default_root_dir` (`place_run_files`)."""
        from lightning.pytorch.callbacks import ProgressBar

        configured = config.get("callbacks") or []
        configured = configured if isinstance(configured, list) else [configured]
        own_bar = any(isinstance(c, ProgressBar) for c in [*configured, *callbacks])
        if config.get("enable_progress_bar") is not False and not own_bar:
            log_lines = self.config.progress_log.when != "never"
            if not stdout_is_terminal() and log_lines:
                config["enable_progress_bar"] = False
            else:
                callbacks = [*callbacks, terminal_bar()]
        return place_run_files(config, lambda: super(SFTCLI, self)._instantiate_trainer(config, callbacks))


def place_run_files(config: dict, make_trainer) -> L.Trainer:
    """Build the Trainer (`make_trainer()`) so that every file the run writes lands under `default_root_dir`.

    The configs name no log or checkpoint folder of their own: an unset logger becomes a CSVLogger writing
    `<root>/logs/version_N/`, and a ModelCheckpoint without a dirpath (Lightning's default one too) writes
    `<root>/checkpoints/`, not a versioned log folder, so `--ckpt_path last` finds it from the next run. With the
    export (`<root>/export/`) and data_report.json, one `--trainer.default_root_dir` moves the whole run. A
    folder set explicitly elsewhere is kept, with a warning that it does not move with the root.
    """
    from lightning.pytorch.callbacks import ModelCheckpoint
    from lightning.pytorch.loggers import CSVLogger

    root = config.get("default_root_dir") or os.getcwd()
    if config.get("logger") in (None, True):
        config["logger"] = CSVLogger(save_dir=root, name="logs")
    trainer = make_trainer()
    placed = {}
    for callback in trainer.checkpoint_callbacks:
        if isinstance(callback, ModelCheckpoint):
            if callback.dirpath is None:
                callback.dirpath = os.path.realpath(os.path.join(root, "checkpoints"))
            placed["ModelCheckpoint dirpath"] = callback.dirpath
    for logger in trainer.loggers:
        placed[f"{type(logger).__name__} save_dir"] = getattr(logger, "save_dir", None)
    elsewhere = outside_run_dir(placed, root)
    if elsewhere:
        logging.getLogger("cader.train.sft").warning(
            "outside trainer.default_root_dir %s, so not moved by it: %s", root, "; ".join(elsewhere))
    return trainer


def make_cli(argv: list[str] | None = None, prog: str | None = None, cli_class: type[SFTCLI] = SFTCLI) -> SFTCLI:
    """Parse `argv` (None: sys.argv) into an SFTCLI; nothing is instantiated yet.

    argv: the flags.
    prog: the program name the usage shows.
    cli_class: SFTCLI or a subclass adding options of its own (scripts/fill_frame_cache.py's).
    """
    kwargs = {
        "model_class": SFTModule, "datamodule_class": SFTDataModule, "run": False,
        "auto_configure_optimizers": False,   # SFTModule configures its own optimizer and schedule
        "save_config_kwargs": {"overwrite": True},
        "parser_kwargs": {"default_env": False, "usage": cli_class.usage, **({"prog": prog} if prog else {}),
                          "description": cli_class.description},
    }
    if argv is None:
        return cli_class(**kwargs)
    # LightningCLI warns when it is given arguments while sys.argv holds some too (tests, callers in Python); it
    # parses `argv` only, so sys.argv keeps just the program name meanwhile.
    program_args, sys.argv = sys.argv, sys.argv[:1]
    try:
        return cli_class(args=argv, **kwargs)
    finally:
        sys.argv = program_args


def parse_sft_args(argv: list[str]):
    """sft.py's configuration for `argv`, without instantiating anything (config checks)."""
    return make_cli(argv).config


def apply_num_threads(num_threads: int | None) -> int:
    """Set torch's intra-op thread count (None: leave torch's default); returns the count torch now uses.

    Float sums split over a different number of threads add in a different order, so the same run gives losses
    that differ in the last bits between OMP_NUM_THREADS=1 and =2; one fixed count makes them equal.
    """
    import torch

    if num_threads is not None:
        if num_threads < 1:
            raise ValueError(f"--num_threads must be a positive integer or null, got {num_threads}")
        torch.set_num_threads(num_threads)
    return torch.get_num_threads()


def missing_inputs_message(make_missing: dict | None) -> str | None:
    """The commands that create the inputs a config names under `make_missing` and that do not exist yet."""
    commands = [command for path, command in (make_missing or {}).items() if not Path(path).exists()]
    if commands:
        return "missing inputs of this config; create them first:\n  " + "\n  ".join(commands)
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
            f"(hf download {path}) or pass --model.model_path <local folder>")


def plan_data(config) -> int:
    """`--plan_only`: read, filter and budget the mix of `config`, fill the plan cache, print the counts per source.

    Only the data module is built, so the paper recipe's 8-GPU Trainer is not: the mix can be checked and its plan
    cache filled on any machine that sees the data (the ranks' setup then only reads it). The data is read and
    checked before any processor is loaded; a source with nothing trainable exits 2 with the reason.
    """
    from cader.train.plan_cache import cache_line
    from cader.train.source_report import group_totals, loss_warnings, summary_line

    data = config.data.as_dict()
    data["report_dir"] = data.get("report_dir") or config.trainer.default_root_dir or "."
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
        print(f"{summary_line(name, source)}; {cache_line(source.get('plan_cache', {}))}")
    for group, tot in group_totals(module.report).items():
        print(f"group {group}: {tot['rows']} rows, {tot['tool_calls_dropped']} tool-call rows dropped, "
              f"{tot['trainable']} trainable, {tot['train_samples']} to train")
    total = sum(s["train_samples"] for s in module.report.values())
    print(f"total: {total} samples to train from {len(module.report)} sources")
    for message in loss_warnings(module.report, module.max_source_loss):
        print(message, file=sys.stderr)
    print(f"data report: {Path(data['report_dir']) / 'data_report.json'}")
    return 0


def run_export(trainer, module, metadata: dict | None = None) -> Path | None:
    """Consolidate (ZeRO-3 collective on all ranks), then rank 0 writes <default_root_dir>/export with
    `metadata` (e.g. the run's thread setting) in its cader_export.json."""
    from cader.train.export import export_hf, gather_state_dict

    state = gather_state_dict(trainer, module)
    if state is None:
        return None
    trainable = module.settings
    lora = None
    if trainable.lora_r > 0:
        lora = {"r": trainable.lora_r, "lora_alpha": trainable.lora_alpha, "lora_dropout": trainable.lora_dropout,
                "target_modules": trainable.lora_targets, "bias": "none"}
    meta = {"global_step": int(trainer.global_step), **(metadata or {})}
    return export_hf(state, module.hparams.model_path, Path(trainer.default_root_dir) / "export", lora=lora,
                     metadata=meta)
