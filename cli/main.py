"""``cader``: one command for the toolkit, a subcommand per stage, each a table entry naming the function it runs.

    cader sft --config cot_mix_tiny                 # cader.train.sft.main          (python train/sft.py)
    cader plan --config cot_mix                     # the same, with --plan_only true
    cader eval --config configs/eval/cader.yaml ... # cader.evaluate.run.main       (python evaluate/run.py)
    cader merge --out DIR                           # the same, with --merge true
    cader calibrate --predictions P --out DIR       # cader.calibrate.fit.main      (python calibrate/fit.py)
    cader transfer --calibration C --predictions P  # cader.calibrate.transfer.main (python calibrate/transfer.py)
    cader judge --predictions P ...                 # cader.evaluate.judge.cli.main (python evaluate/judge.py)
    cader compare A B                               # the same, subcommand compare
    cader view RUN [RUN ...] [--reference NAME] [--out FILE]  # cader.evaluate.view.main (python evaluate/view.py)
    cader export-lmms RUN --out DIR                 # cader.evaluate.lmms.export.main

Every stage's `main(argv, prog)` parses its own flags: the parameters of the function it runs
(`cader.cli.function_cli`), eval's its run options and every CaderConfig field, sft's LightningCLI's. So `cader <sub> --help` is that stage's help and the documented
script (`python evaluate/run.py ...`) runs the same function. `cader` reads only the subcommand name and imports
only that stage's module: building every stage's parser up front would import Lightning for `cader --help`.
A bare `cader SUB --help` is answered from a cache kept after its first rendering (`cader.cli.help_cache`): sft's
parser imports Lightning and torch (7-28 s), eval's torch, calibrate's scipy (1-5 s on a loaded machine); the kept
text prints in about half a second.
"""

from __future__ import annotations

import importlib
import sys
from dataclasses import dataclass

from jsonargparse import ArgumentParser


@dataclass(frozen=True)
class Command:
    module: str              # the module whose `main(argv, prog)` the subcommand calls
    script: str              # the same entry as a script, as documented (`python <script>`)
    summary: str             # the line `cader --help` shows
    before: tuple = ()       # arguments put before the user's (a subcommand of the stage)
    after: tuple = ()        # arguments put after the user's, so that a config file cannot undo them
    prog: str | None = None  # the program name the stage's usage shows (default: `cader <subcommand>`)


STAGES = {
    "sft": Command("cader.train.sft", "train/sft.py",
                   "fine-tune Qwen3-VL on the CoT mix and write the HF export (train/sft.py)"),
    "plan": Command("cader.train.sft", "train/sft.py",
                    "check the SFT mix and fill its plan cache, with no model or Trainer (train/sft.py "
                    "--plan_only true)", after=("--plan_only", "true")),
    "eval": Command("cader.evaluate.run", "evaluate/run.py",
                    "run CADER on a benchmark: predictions.jsonl and report.json/md (evaluate/run.py)"),
    "merge": Command("cader.evaluate.run", "evaluate/run.py",
                     "join an evaluation's shard files and write its report (evaluate/run.py --merge true)",
                     after=("--merge", "true")),
    "calibrate": Command("cader.calibrate.fit", "calibrate/fit.py",
                         "fit the temperature T and the early-exit threshold tau on held-out predictions "
                         "(calibrate/fit.py)"),
    "audit": Command("cader.calibrate.audit", "calibrate/audit.py",
                     "test a calibration's exit error exactly on a labelled sample of the target run, one question "
                     "per video (calibrate/audit.py)"),
    "frontier": Command("cader.calibrate.frontier", "calibrate/frontier.py",
                        "final accuracy against TFLOPs per sample over tau from a uniform_stage2 run "
                        "(calibrate/frontier.py)"),
    "transfer": Command("cader.calibrate.transfer", "calibrate/transfer.py",
                        "test whether a calibration carries over to another run: two-sample KS test of the Stage-1 "
                        "margins (calibrate/transfer.py)"),
    "judge": Command("cader.evaluate.judge.cli", "evaluate/judge.py",
                     "judge AgentVidBench trajectories: judgments.jsonl and judge_report.json/md "
                     "(evaluate/judge.py)"),
    "compare": Command("cader.evaluate.judge.compare_cli", "evaluate/judge.py",
                       "paired bootstrap, McNemar and rank stability of systems on the same questions "
                       "(evaluate/judge.py compare)"),
}

# Tools over the stages' outputs, dispatched like the stages (kept apart: they are not steps of the pipeline)
TOOLS = {
    "view": Command("cader.evaluate.view", "evaluate/view.py",
                    "write a self-contained HTML viewer of one run or several side by side: trajectories, reports, "
                    "judgments (evaluate/view.py)"),
    "export-lmms": Command("cader.evaluate.lmms.export", "evaluate/lmms/export.py",
                           "write a cader run as lmms-eval's samples_<task>.jsonl and results.json "
                           "(evaluate/lmms/export.py)"),
}
COMMANDS = {**STAGES, **TOOLS}


def overview_parser() -> ArgumentParser:
    """`cader --help`: the subcommands, each with its one line."""
    parser = ArgumentParser(prog="cader", description="One command for the cader toolkit, a subcommand per stage; "
                                                      "`cader SUBCOMMAND --help` shows the flags of that stage.")
    subcommands = parser.add_subcommands(dest="stage")
    for name, command in COMMANDS.items():
        subcommands.add_subcommand(name, ArgumentParser(description=command.summary), help=command.summary)
    return parser


def load_script(command: Command):
    """The module a subcommand runs (imported by name: the stages are modules of the cader package)."""
    return importlib.import_module(command.module)


def run_stage(name: str, args: list[str]) -> int:
    """Run subcommand `name` with the user's `args`: its stage's main, with the subcommand's fixed arguments."""
    command = COMMANDS[name]
    stage = load_script(command)
    return stage.main([*command.before, *args, *command.after], prog=command.prog or f"cader {name}") or 0


def main(argv: list[str] | None = None) -> int:
    """The `cader` command: `argv` (None: the command line, whose bare `SUB --help` may come from the help cache)."""
    from_command_line = argv is None
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in COMMANDS:
        name, args = argv[0], argv[1:]
        command = COMMANDS[name]
        if from_command_line:
            from cader.cli.help_cache import cached_help, is_help_request

            if is_help_request(args):
                return cached_help([name, *command.before, *command.after], lambda: run_stage(name, args))
        return run_stage(name, args)
    overview_parser().parse_args(argv)   # --help, or an error naming the subcommands
    return 2
