"""AgentVidBench trajectory judge (AgentVidBench paper §3.4, App. D) and paired statistics (App. G).

Judge a predictions file:
    python evaluate/judge.py --predictions runs/x/predictions.jsonl --questions DATA/eval/agentvidbench/questions.jsonl
        --out runs/x/judge --provider openai --base_url http://127.0.0.1:8000/v1 --model NAME [--concurrency 16]
    writes <out>/judgments.jsonl (appended as each finishes), <out>/judge_report.json and <out>/judge_report.md.
    A rerun judges what is new, what failed, and what changed since (the prediction or question text, or the judge
    configuration); `--force true` re-judges everything. Request parameters per model family come from `families`
    (configs/judge/default.yaml). Keys come from OPENAI_API_KEY / ANTHROPIC_API_KEY only.
    Another framework's output goes through an adapter: --prediction_format agentvidbench_run --predictions RUN_DIR
Compare systems on the same questions:
    python evaluate/judge.py compare A/predictions.jsonl B/predictions.jsonl [...] [--questions questions.jsonl]
"""

from __future__ import annotations

import json
import sys

from cader.evaluate.judge.adapters import PREDICTION_FORMATS, load_prediction_source
from cader.evaluate.judge.aggregate import build_report, write_report
from cader.evaluate.judge.client import RetryPolicy
from cader.evaluate.judge.compare import compare_files, format_comparison
from cader.evaluate.judge.params import JudgeConfigError
from cader.evaluate.judge.pipeline import (
    JUDGMENTS_FILE,
    current_prompt_hashes,
    describe_rejudging,
    judge_predictions,
    read_judgments,
)
from cader.evaluate.judge.providers import PROVIDERS, make_provider
from cader.evaluate.judge.questions import load_questions
from jsonargparse import ActionConfigFile, ArgumentParser


def judge_parser() -> ArgumentParser:
    parser = ArgumentParser(description="Judge AgentVidBench trajectories and write judge_report.json/md.")
    parser.add_argument("--config", action=ActionConfigFile)
    parser.add_argument("--predictions", type=str, required=True,
                        help="predictions.jsonl of one system (a run folder for --prediction_format agentvidbench_run)")
    parser.add_argument("--prediction_format", type=str, default="cader", choices=sorted(PREDICTION_FORMATS),
                        help="how to read --predictions: our predictions.jsonl, or another framework's via its adapter")
    parser.add_argument("--questions", type=str, required=True, help="AgentVidBench questions.jsonl")
    parser.add_argument("--out", type=str, required=True, help="output folder")
    parser.add_argument("--provider", type=str, default="openai", choices=sorted(PROVIDERS))
    parser.add_argument("--base_url", type=str | None, default=None, help="OpenAI-compatible …/v1, or Anthropic root")
    parser.add_argument("--model", type=str, required=True, help="judge model name (or local path for hf-local)")
    parser.add_argument("--system", type=str, default="cader", help="FRAMEWORK name shown to the judge")
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--max_replies", type=int, default=3, help="judge replies per question incl. repairs")
    parser.add_argument("--max_api_retries", type=int, default=5, help="retries after 429/5xx/timeouts")
    parser.add_argument("--backoff_base", type=float, default=1.0)
    parser.add_argument("--backoff_max", type=float, default=30.0)
    parser.add_argument("--retry_after_max", type=float, default=120.0,
                        help="longest server Retry-After honoured (seconds); a longer one waits this long")
    parser.add_argument("--time_budget", type=float, default=900.0,
                        help="seconds one question may take in all, calls and retry waits together")
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds per judge call")
    parser.add_argument("--max_tokens", type=int, default=4096, help="App. D.5 Table 16: 4,096 output tokens")
    parser.add_argument("--families", type=list[dict] | None, default=None,
                        help="request parameters per model family (see configs/judge/default.yaml); null: built-in")
    parser.add_argument("--cache", type=bool, default=True, help="reuse replies keyed by (prompt, judge config)")
    parser.add_argument("--force", type=bool, default=False,
                        help="re-judge every question, even unchanged ones, without reading the cache")
    parser.add_argument("--progress", type=bool, default=True)
    return parser


def compare_parser() -> ArgumentParser:
    parser = ArgumentParser(prog="judge.py compare", description="Paired bootstrap CI, McNemar and rank stability.")
    parser.add_argument("--config", action=ActionConfigFile)
    parser.add_argument("files", nargs="+", help="predictions.jsonl (accuracy) or judgments.jsonl (traj) files")
    parser.add_argument("--questions", type=str | None, default=None, help="questions.jsonl (gold from here)")
    parser.add_argument("--metric", type=str, default="accuracy", choices=["accuracy", "traj"])
    parser.add_argument("--n_resamples", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json_out", type=str | None, default=None, help="also write the result here as JSON")
    return parser


def run_compare(argv: list[str]) -> None:
    args = compare_parser().parse_args(argv)
    result = compare_files(args.files, questions_path=args.questions, metric=args.metric,
                           n_resamples=args.n_resamples, seed=args.seed)
    print(format_comparison(result))
    if args.json_out:
        with open(args.json_out, "w", encoding="utf-8") as handle:
            json.dump(result, handle, indent=2)


def run_judge(argv: list[str]) -> None:
    args = judge_parser().parse_args(argv)
    try:
        provider = make_provider(args.provider, args.model, args.base_url, timeout=args.timeout,
                                 max_tokens=args.max_tokens, families=args.families)
    except JudgeConfigError as error:
        sys.exit(f"config error: {error}")
    questions, question_errors = load_questions(args.questions)
    predictions, prediction_errors = load_prediction_source(args.predictions, args.prediction_format)
    for error in [*question_errors, *prediction_errors]:
        print(f"input error: {error}", file=sys.stderr)
    policy = RetryPolicy(max_replies=args.max_replies, max_api_retries=args.max_api_retries,
                         backoff_base=args.backoff_base, backoff_max=args.backoff_max,
                         retry_after_max=args.retry_after_max, time_budget=args.time_budget)
    counts = judge_predictions(provider, questions, predictions, args.out, framework=args.system,
                               concurrency=args.concurrency, policy=policy, use_cache=args.cache,
                               progress=args.progress, force=args.force)
    judgments = read_judgments(f"{args.out}/{JUDGMENTS_FILE}")
    report = build_report(questions, predictions, judgments, input_errors=[*question_errors, *prediction_errors],
                          prompt_hashes=current_prompt_hashes(questions, predictions, args.system), run_counts=counts)
    json_path, md_path = write_report(args.out, report)
    if report["warning"]:
        print(f"WARNING: {report['warning']}", file=sys.stderr)
    print(f"judged {counts['judged']} (cached {counts['cached']}), failed {counts['failed']}: "
          f"{describe_rejudging(counts)}; accuracy {report['accuracy']}, traj {report['traj']}, "
          f"mc_rate {report['mc_rate']}; wrote {json_path} and {md_path}")


def main(argv: list[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "compare":
        run_compare(argv[1:])
    else:
        run_judge(argv)


if __name__ == "__main__":
    main()
