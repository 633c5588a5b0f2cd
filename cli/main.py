"""``cader``: one command for the toolkit, with a subcommand per stage.

    cader sft --config cot_mix_tiny                 # python train/sft.py --config cot_mix_tiny
    cader plan --config cot_mix                     # python train/sft.py --config cot_mix --plan_only true
    cader eval --config configs/eval/cader.yaml ... # python evaluate/run.py --config configs/eval/cader.yaml ...
    cader merge --out DIR                           # python evaluate/run.py --out DIR --merge true
    cader calibrate --predictions P --out DIR       # python calibrate/fit.py --predictions P --out DIR
    cader judge --predictions P ...                 # python evaluate/judge.py --predictions P ...
    cader compare A B                               # python evaluate/judge.py compare A B
    cader view RUN [--out FILE]                     # python evaluate/view.py RUN [--out FILE]
    cader export-lmms RUN --out DIR                 # python evaluate/lmms/export.py RUN --out DIR

A subcommand runs the main() of its stage's script with the same flags, so `cader <sub> --help` is that script's
help. `cader` itself reads only the subcommand name: each stage parses its own flags, and building every stage's
parser up front would import Lightning for `cader --help`.
"""

from __future__ import annotations

import importlib.util
import sys
from dataclasses import dataclass
from pathlib import Path

from jsonargparse import ArgumentParser


@dataclass(frozen=True)
class Stage:
    package: str            # the stage's package, whose folder holds the script
    script: str             # the entry script, as documented (`python <folder>/<script>`)
    summary: str            # the line `cader --help` shows
    before: tuple = ()      # arguments put before the user's (a subcommand of the script)
    after: tuple = ()       # arguments put after the user's, so that a config file cannot undo them
    prog: str | None = None  # the program name the script's usage shows (default: `cader <subcommand>`)


STAGES = {
    "sft": Stage("cader.train", "sft.py",
                 "fine-tune Qwen3-VL on the CoT mix and write the HF export (train/sft.py)"),
    "plan": Stage("cader.train", "sft.py",
                  "check the SFT mix and fill its plan cache, with no model or Trainer (train/sft.py --plan_only true)",
                  after=("--plan_only", "true")),
    "eval": Stage("cader.evaluate", "run.py",
                  "run CADER on a benchmark: predictions.jsonl and report.json/md (evaluate/run.py)"),
    "merge": Stage("cader.evaluate", "run.py",
                   "join an evaluation's shard files and write its report (evaluate/run.py --merge true)",
                   after=("--merge", "true")),
    "calibrate": Stage("cader.calibrate", "fit.py",
                       "fit the temperature T and the early-exit threshold tau on held-out predictions "
                       "(calibrate/fit.py)"),
    "judge": Stage("cader.evaluate", "judge.py",
                   "judge AgentVidBench trajectories: judgments.jsonl and judge_report.json/md (evaluate/judge.py)"),
    "compare": Stage("cader.evaluate", "judge.py",
                     "paired bootstrap, McNemar and rank stability of systems on the same questions "
                     "(evaluate/judge.py compare)",
                     before=("compare",), prog="cader judge"),
}

# Tools over the stages' outputs, dispatched like the stages (kept apart: they are not steps of the pipeline)
TOOLS = {
    "view": Stage("cader.evaluate", "view.py",
                  "write a self-contained HTML viewer of a run's trajectories, reports and judgments "
                  "(evaluate/view.py)"),
    "export-lmms": Stage("cader.evaluate.lmms", "export.py",
                         "write a cader run as lmms-eval's samples_<task>.jsonl and results.json "
                         "(evaluate/lmms/export.py)"),
}


def overview_parser() -> ArgumentParser:
    """`cader --help`: the subcommands, each with its one line."""
    parser = ArgumentParser(prog="cader", description="One command for the cader toolkit, a subcommand per stage; "
                                                      "`cader SUBCOMMAND --help` shows the flags of that stage.")
    subcommands = parser.add_subcommands(dest="stage")
    for name, stage in {**STAGES, **TOOLS}.items():
        subcommands.add_subcommand(name, ArgumentParser(description=stage.summary), help=stage.summary)
    return parser


def load_script(stage: Stage):
    """The stage's script as a module. Loaded from its file, since evaluate/judge.py shares its module name with
    the cader.evaluate.judge package."""
    folder = importlib.util.find_spec(stage.package).submodule_search_locations[0]
    path = Path(folder) / stage.script
    # a name without dots (`evaluate_judge`): jsonargparse imports a dotted module name to resolve a signature
    spec = importlib.util.spec_from_file_location(f"{path.parent.name}_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module   # where jsonargparse looks up the names in the signatures' annotations
    spec.loader.exec_module(module)
    return module


def run_stage(name: str, args: list[str]) -> int:
    """Run one stage as its script would run with `args`: the script parses sys.argv, as from the shell."""
    stage = {**STAGES, **TOOLS}[name]
    script = load_script(stage)
    program_args = sys.argv
    sys.argv = [stage.prog or f"cader {name}", *stage.before, *args, *stage.after]
    try:
        return script.main() or 0
    finally:
        sys.argv = program_args


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and (argv[0] in STAGES or argv[0] in TOOLS):
        return run_stage(argv[0], argv[1:])
    overview_parser().parse_args(argv)   # --help, or an error naming the subcommands
    return 2
