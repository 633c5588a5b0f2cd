"""A cader run as lmms-eval output files: `samples_<task>.jsonl` and `results.json`, for tools that read lmms-eval's.

    cader export-lmms runs/eval/full/videomme_long --out runs/lmms_export
    python evaluate/lmms/export.py runs/lmms/cader_records.jsonl --out DIR

The shapes are lmms-eval 0.7.3's (lmms_eval/loggers/evaluation_tracker.py save_results_samples and
save_results_aggregated; lmms_eval/evaluator.py): one samples line per document with `doc_id`, `target`,
`filtered_resps` (the letter cader answered), `doc_hash`, `input` and the metric, and results.json's `results`,
`n-samples`, `higher_is_better`, `versions`, `n-shot`, `config` and `date`. The metric is `cader_accuracy` (0/1 per
document, the mean x 100 in results): cader scores a letter against the gold one, whatever the benchmark's own
scorer (Video-MME's per-category tables, MLVU's M-Avg) would add. The task is the record's `lmms.task` (records
from `lmms-eval --model cader`) or its benchmark; so are doc_id and doc_hash, else the record's place in the file
and a digest of its sample fields (`cader.doc_id_from` says which, so that `cader compare` never pairs a line
number with lmms-eval's document index). A record that failed is exported with an empty answer (scored 0), as
lmms-eval scores a reply it cannot read; a line that is not a record, or whose task is not a plain file name, is
named on stderr and counted, never exported.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import re
import sys
from collections import defaultdict
from pathlib import Path

from cader.cli.function_cli import call_arguments, function_parser
from cader.contracts.jsonl import check_line, iter_lines
from cader.contracts.records import PredictionRecord
from cader.vlm.files import write_atomic
from jsonargparse import ArgumentParser

METRIC = "cader_accuracy"


def sample_digest(record: dict) -> str:
    """A record's stand-in doc hash when it did not come from lmms-eval: sha256 of its sample fields."""
    fields = {k: record.get(k) for k in ("benchmark", "sample_id", "video", "question", "options", "answer")}
    return hashlib.sha256(json.dumps(fields, indent=2, ensure_ascii=False).encode("utf-8")).hexdigest()


# A task names a file in --out: one path component of ordinary characters, so no record can write elsewhere
TASK_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


class UnsafeTaskName(ValueError):
    """A record's task (lmms.task or benchmark) that cannot name a samples file inside --out."""


def sample_line(record: dict, place: int) -> tuple[str, dict]:
    """(task, the samples_<task>.jsonl line) of one record; UnsafeTaskName when its task is not a plain name."""
    block = record.get("lmms") if isinstance(record.get("lmms"), dict) else {}
    task = str(block.get("task") or record.get("benchmark"))
    if not TASK_NAME.match(task) or ".." in task:
        raise UnsafeTaskName(f"task {task!r} is not a plain name (letters, digits, '_', '-', '.'), so it cannot "
                             "name a samples file")
    reply = record.get("pred") or ""
    score = 1.0 if record.get("answer") is not None and reply == record.get("answer") else 0.0
    options = "\n".join(f"{letter}. {text}" for letter, text in zip(record.get("letters") or [],
                                                                   record.get("options") or []))
    real_doc = block.get("doc_id") is not None
    return task, {
        # lmms-eval writes str(doc_to_target(doc)); a record without a gold letter has none to write
        "doc_id": block["doc_id"] if real_doc else place,
        "target": "" if record.get("answer") is None else str(record["answer"]), "filtered_resps": reply,
        "doc_hash": block.get("doc_hash") or sample_digest(record),
        "input": f"{record.get('question')}\n{options}", METRIC: score,
        "cader": {"sample_id": record.get("sample_id"), "route": record.get("route"), "error": record.get("error"),
                  # a line number is no lmms-eval document index: compare must not pair it with one
                  "doc_id_from": "lmms" if real_doc else "line"},
    }


def export_lmms(run: str, out: str) -> dict:
    """Write lmms-eval's samples and results files for a cader run.

    Args:
        run: a predictions.jsonl file, a side file of `lmms-eval --model cader`, or a run folder holding
            predictions.jsonl
        out: the folder to write samples_<task>.jsonl and results.json into

    Returns:
        results.json's content, with `problems`: the lines that could not be exported.
    """
    path = Path(run)
    if path.is_dir():
        path = path / "predictions.jsonl"
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such predictions file")
    by_task: dict[str, list[dict]] = defaultdict(list)
    problems = []
    place = 0
    for number, value in iter_lines(path):
        problem = check_line(path, number, value, PredictionRecord)
        if problem is not None:
            problems.append(str(problem))
            continue
        try:
            task, line = sample_line(value, place)
        except UnsafeTaskName as error:
            problems.append(f"{path}:{number}: {error}")
            continue
        place += 1
        by_task[task].append(line)
    out_dir = Path(out)
    results = {"results": {}, "n-samples": {}, "higher_is_better": {}, "versions": {}, "n-shot": {}}
    for task, lines in sorted(by_task.items()):
        write_atomic(out_dir / f"samples_{task}.jsonl",
                     "".join(json.dumps(line, ensure_ascii=False) + "\n" for line in lines))
        mean = sum(line[METRIC] for line in lines) / len(lines)
        results["results"][task] = {"alias": task, f"{METRIC},none": 100.0 * mean, f"{METRIC}_stderr,none": "N/A"}
        results["n-samples"][task] = {"original": len(lines), "effective": len(lines)}
        results["higher_is_better"][task] = {METRIC: True}
        results["versions"][task] = "cader"
        results["n-shot"][task] = 0
    results["config"] = {"model": "cader", "source": str(path)}
    # a reader comparing with a benchmark's own headline must know this is not a macro mean (MLVU's M-Avg is
    # the mean of task-type accuracies, lmms-eval's mlvu aggregate the mean over its fixed task list)
    results["metric_definitions"] = {METRIC: "plain mean over documents x 100 (MLVU's official 'Avg', not M-Avg); "
                                             "a failed document scores 0"}
    results["date"] = datetime.datetime.now(datetime.timezone.utc).timestamp()
    results["problems"] = problems
    write_atomic(out_dir / "results.json", json.dumps(results, indent=2, ensure_ascii=False) + "\n")
    return results


def build_parser(prog: str | None = None) -> ArgumentParser:
    """The flags of export-lmms: `export_lmms`'s parameters, the run given without a flag."""
    return function_parser(export_lmms, prog, positional=("run",), description=__doc__.split("\n")[0])


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    """Export, then print each task's sample count and accuracy; exit 2 on a missing run.

    argv: the flags (default: sys.argv[1:]).
    prog: the program name the usage shows.
    """
    args = call_arguments(build_parser(prog), argv)
    try:
        results = export_lmms(**args)
    except FileNotFoundError as exc:
        print(f"export-lmms: error: {exc}", file=sys.stderr)
        return 2
    for problem in results["problems"]:
        print(f"export-lmms: skipped {problem}", file=sys.stderr)
    for task, row in results["results"].items():
        print(f"{task}: {results['n-samples'][task]['original']} samples, {METRIC} {row[f'{METRIC},none']:.2f}")
    print(f"{len(results['problems'])} lines skipped; wrote {args['out']}/results.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
