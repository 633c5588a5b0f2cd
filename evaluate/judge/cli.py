"""AgentVidBench trajectory judge (AgentVidBench paper §3.4, App. D) and paired statistics (App. G).

Judge a predictions file:
    python evaluate/judge.py --predictions runs/x/predictions.jsonl --questions DATA/eval/agentvidbench/questions.jsonl
        --out runs/x/judge --provider openai --base_url http://127.0.0.1:8000/v1 --model NAME [--concurrency 16]
    writes <out>/judgments.jsonl (appended as each finishes), <out>/judge_report.json and <out>/judge_report.md.
    A rerun judges what is new, what failed, and what changed since (the prediction or question text, or the judge
    configuration); `--force true` re-judges everything. Request parameters per model family come from `families`
    (configs/judge/default.yaml). Keys come from OPENAI_API_KEY / ANTHROPIC_API_KEY only.
    Another framework's output goes through an adapter: --prediction_format agentvidbench_run --predictions RUN_DIR
    The official harness's judge prompt and denominators instead of the paper's: --protocol official
        --harness_root DIR (your checkout of github.com/krafton-ai/agentvidbench); the report names the protocol.
Compare systems on the same questions (the `compare` subcommand):
    python evaluate/judge.py compare A/predictions.jsonl B/predictions.jsonl [...] [--questions questions.jsonl]

The flags are the parameters of `judge` and `compare` below and the fields of judge's option groups (JudgeApi,
ProtocolOptions, RetryPolicy, JudgeRun), with their help taken from the docstrings.
"""

# The annotations stay objects (no `from __future__ import annotations`): jsonargparse builds the flags from them.

import json
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from cader.cli.function_cli import function_parser, grouped_arguments
from cader.contracts.jsonl import FileInUse
from cader.contracts.provenance import collect_provenance
from cader.evaluate.judge.adapters import load_prediction_source, run_framework
from cader.evaluate.judge.aggregate import build_report, write_report
from cader.evaluate.judge.client import RetryPolicy
from cader.evaluate.judge.compare import compare_files, format_comparison
from cader.evaluate.judge.params import JudgeConfigError
from cader.evaluate.judge.pipeline import (
    JUDGMENTS_FILE,
    JudgeRun,
    current_prompt_hashes,
    describe_rejudging,
    judge_predictions,
    read_judgments,
)
from cader.evaluate.judge.protocol import (
    OFFICIAL_MAX_TOKENS,
    PAPER_MAX_TOKENS,
    make_protocol,
    official_families,
)
from cader.evaluate.judge.providers import (
    DEFAULT_FAMILIES,
    PROVIDERS,
    ProviderError,
    ProviderName,
    make_provider,
)
from cader.evaluate.judge.questions import InputFileError, load_questions
from jsonargparse import ArgumentParser

# The names of cader.evaluate.judge.adapters.PREDICTION_FORMATS
PredictionFormat = Literal["agentvidbench_run", "cader"]
Provider = ProviderName  # the names of the provider registry, cader.evaluate.judge.providers.PROVIDERS
Metric = Literal["accuracy", "traj"]
Protocol = Literal["paper", "official"]  # cader.evaluate.judge.protocol.PROTOCOLS

# What judging needs and `compare` does not: optional to the parser (argparse would demand them of `compare` too),
# checked in main (with the judge's --model).
JUDGE_INPUTS = ("predictions", "questions", "out")
# judge's option groups, each field a flag of its own name (cader.cli.function_cli)
GROUPS = ("api", "protocol_options", "policy", "run")


@dataclass(frozen=True)
class JudgeApi:
    """The judge model and the API that serves it.

    Args:
        provider: judge API, a name of the provider registry (cader.evaluate.judge.providers.PROVIDERS; each
            class there says which API it speaks)
        model: judge model name as the API serves it (a local path for hf-local); required to judge
        base_url: the API's address: an OpenAI-compatible .../v1, or the Anthropic root (null: the provider's own)
        timeout: seconds per judge call
        max_tokens: output tokens per judge reply (default: 4,096 under --protocol paper, App. D.5 Table 16;
            8,000 under official, as its Anthropic call sends; its OpenAI call sends no limit)
        families: request parameters per model family (see configs/judge/default.yaml; null: the built-in table,
            or under --protocol official the harness's settings: temperature 0 with a fallback, and for OpenAI
            json output and seed 42)
    """

    provider: Provider = "openai"
    model: str | None = None
    base_url: str | None = None
    timeout: float = 120.0
    max_tokens: int | None = None
    families: list[dict] | None = None


@dataclass(frozen=True)
class ProtocolOptions:
    """What the judge is sent and how accuracy is counted.

    Args:
        protocol: paper (App. D.5 text; every question in the denominator) or official (the official harness's
            prompt files read from --harness_root, a run folder's trajectories/question<N>.txt verbatim, unanswered
            and errored questions left out of the denominator as its evaluate.py does)
        harness_root: a checkout of the official AgentVidBench harness (needed by --protocol official; its
            evaluation/prompts/judge_system.md and evaluation/judge.py USER_TEMPLATE are read, never shipped)
    """

    protocol: Protocol = "paper"
    harness_root: str | None = None


def judge(predictions: str, questions: str, out: str, prediction_format: PredictionFormat = "cader",
          system: str | None = None, api: JudgeApi | None = None, protocol_options: ProtocolOptions | None = None,
          policy: RetryPolicy | None = None, run: JudgeRun | None = None) -> dict:
    """Judge one system's AgentVidBench trajectories and write judgments.jsonl and judge_report.json/md.

    Args:
        predictions: predictions.jsonl of one system (a run folder for --prediction_format agentvidbench_run)
        questions: the AgentVidBench questions.jsonl, as the release publishes it
        out: output folder for judgments.jsonl and judge_report.json/md
        prediction_format: how to read --predictions: cader's predictions.jsonl, or another framework's output
            through its adapter
        system: the FRAMEWORK name the judge prompt shows (default: a harness run folder's experiment, as
            its summary.json names it, else cader)
        api: the judge model and its API (JudgeApi; its model is required)
        protocol_options: what the judge is sent and how accuracy is counted
        policy: how each question is retried
        run: how many questions are judged at once, and what is reused

    Returns:
        The judge report (also written as judge_report.json).
    """
    api, policy, run = api or JudgeApi(), policy or RetryPolicy(), run or JudgeRun()
    options = protocol_options or ProtocolOptions()
    judge_protocol = make_protocol(options.protocol, options.harness_root)
    official = judge_protocol.name == "official"
    max_tokens = api.max_tokens if api.max_tokens is not None else OFFICIAL_MAX_TOKENS if official else PAPER_MAX_TOKENS
    families = official_families(PROVIDERS, DEFAULT_FAMILIES) if api.families is None and official else api.families
    if system is None:
        system = (run_framework(predictions) if prediction_format == "agentvidbench_run" else None) or "cader"
    judge_model = make_provider(api.provider, api.model, api.base_url, timeout=api.timeout, max_tokens=max_tokens,
                                families=families)
    for path in (questions, predictions):  # a path that is not there ends the run in one line naming it
        if not Path(path).exists():
            raise InputFileError(path)
    question_rows, question_errors = load_questions(questions)
    prediction_rows, prediction_errors = load_prediction_source(predictions, prediction_format)
    input_errors = [*question_errors, *prediction_errors]
    for error in input_errors:
        print(f"input error: {error}", file=sys.stderr)
    # The official evaluate.py judges only the run's results that did not error; the paper judges every one.
    to_judge = prediction_rows if not judge_protocol.drops_unanswered else \
        {k: r for k, r in prediction_rows.items() if not r.get("error")}
    counts = judge_predictions(judge_model, question_rows, to_judge, out, framework=system, run=run, policy=policy,
                               protocol=judge_protocol)
    judgments = read_judgments(f"{out}/{JUDGMENTS_FILE}")
    report = build_report(question_rows, prediction_rows, judgments, input_errors=input_errors,
                          prompt_hashes=current_prompt_hashes(question_rows, to_judge, system, judge_protocol),
                          run_counts=counts, protocol=judge_protocol.name, protocol_source=judge_protocol.source,
                          provenance=collect_provenance())
    json_path, md_path = write_report(out, report)
    if report["warning"]:
        print(f"WARNING: {report['warning']}", file=sys.stderr)
    print(f"judged {counts['judged']} (cached {counts['cached']}), failed {counts['failed']}: "
          f"{describe_rejudging(counts)}; {judge_protocol.name} protocol: accuracy {report['accuracy']} "
          f"over {report['n']}, traj {report['traj']}, "
          f"mc_rate {report['mc_rate']}; wrote {json_path} and {md_path}")
    for reason, n in judge_error_reasons(judgments).items():
        print(f"judge error ({n} question{'s' if n > 1 else ''}): {reason}", file=sys.stderr)
    return report


def judge_error_reasons(judgments: dict[str, dict]) -> dict[str, int]:
    """Each distinct reason judgments failed, with its count: the provider's reason without the per-question
    attempt counts, so a wrong model name reads as one line, not one per question."""
    reasons = Counter()
    for row in judgments.values():
        if row.get("error"):
            reason = str(row["error"])
            if reason.startswith("no valid judgment after") and "): " in reason:
                reason = reason.split("): ", 1)[1]
            reasons[reason] += 1
    return dict(reasons.most_common())


def all_failed(report: dict) -> bool:
    """Whether this run judged questions and every one of them failed (a wrong model name, a dead endpoint)."""
    counts = report.get("rerun") or {}
    return counts.get("failed", 0) > 0 and counts.get("judged", 0) == 0


def compare(
    files: list[str],
    questions: str | None = None,
    metric: Metric = "accuracy",
    n_resamples: int = 10_000,
    seed: int = 0,
    json_out: str | None = None,
) -> dict:
    """Paired bootstrap CI, McNemar test and rank stability of several systems on the same questions (App. G).

    Args:
        files: predictions.jsonl or lmms-eval `<date>_samples_<task>.jsonl` files of any model (for accuracy), or
            judgments.jsonl (for traj), one per system; the first is compared with each of the others
        questions: questions.jsonl to score accuracy against (default: each record's own `correct` field)
        metric: accuracy (multiple-choice answers) or traj (the judge's trajectory score)
        n_resamples: bootstrap resamples
        seed: seed of the bootstrap
        json_out: also write the result to this file as JSON

    Returns:
        The comparison, as printed.
    """
    result = compare_files(files, questions_path=questions, metric=metric, n_resamples=n_resamples, seed=seed)
    print(format_comparison(result))
    if json_out:
        with open(json_out, "w", encoding="utf-8") as handle:
            json.dump(result, handle, indent=2)
    return result


def run_compare(options: dict) -> None:
    """Compare with parsed options; a file that cannot be read ends the run in one line naming it."""
    options.pop("config", None)
    try:
        compare(**options)
    except InputFileError as error:
        sys.exit(f"input error: {error}")


def compare_main(argv: list[str] | None = None, prog: str | None = None) -> None:
    """`cader compare FILES...`: the compare subcommand with a usage line naming the command typed."""
    run_compare(compare_parser(prog).parse_args(argv).as_dict())


def compare_parser(prog: str | None = None) -> ArgumentParser:
    """`compare`'s parameters, the files given after the subcommand."""
    return function_parser(compare, prog, positional=("files",), description=compare.__doc__.split("\n")[0])


def judge_parser(prog: str | None = None) -> ArgumentParser:
    """The whole command line: judge's parameters, and `compare` as a subcommand."""
    # the inputs are required to judge but not to compare: optional flags, checked in main()
    parser = function_parser(judge, prog, optional=JUDGE_INPUTS, groups=GROUPS,
                             description=judge.__doc__.split("\n")[0])
    subcommands = parser.add_subcommands(required=False, dest="command")
    subcommands.add_subcommand("compare", compare_parser(), help=compare.__doc__.split("\n")[0])
    return parser


def main(argv: list[str] | None = None, prog: str | None = None) -> None:
    """`evaluate/judge.py [compare] ARGS` (None: the command line); `prog` names the program in its usage.

    Exits non-zero with one line on bad input or configuration (a missing key included, before any file is read),
    and with status 1 when every question this run judged failed."""
    parser = judge_parser(prog)
    args = parser.parse_args(argv)
    if args.command == "compare":
        run_compare(args.compare.as_dict())
        return
    options = {key: value for key, value in args.as_dict().items() if key not in ("config", "command", "compare")}
    missing = [f"--{name}" for name in (*JUDGE_INPUTS, "model") if options[name] is None]
    if missing:
        parser.error(f"judging needs {', '.join(missing)}")
    try:
        report = judge(**grouped_arguments(judge, options, GROUPS))
    except (JudgeConfigError, ProviderError) as error:  # ProviderError here: no key in the environment
        sys.exit(f"config error: {error}")
    except InputFileError as error:
        sys.exit(f"input error: {error}")
    except FileInUse as error:   # another judge run writes this --out
        sys.exit(f"error: {error}")
    if all_failed(report):
        sys.exit(f"error: every judged question failed ({report['rerun']['failed']}); the reasons are above and "
                 "in judgments.jsonl")


if __name__ == "__main__":
    main()
