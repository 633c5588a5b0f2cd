"""`judge.py compare`: paired statistics for several systems' predictions (or judgments) on the same questions."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from cader.contracts.jsonl import iter_lines, read_jsonl
from cader.evaluate.judge.aggregate import is_correct
from cader.evaluate.judge.pipeline import read_judgments
from cader.evaluate.judge.questions import InputFileError, load_predictions, load_questions, prediction_key
from cader.evaluate.lmms.samples import SamplesFileError, is_samples_row, read_samples
from cader.evaluate.stats import mcnemar_exact, paired_bootstrap_diff, rank_stability


class CompareInputError(InputFileError):
    """A file compare cannot read as a system's answers; the one-line message names it."""

    def __init__(self, path: str | Path, why: str):
        OSError.__init__(self, f"{path}: {why}")
        self.path = Path(path)


@dataclass
class System:
    """One system's answers: `by_question` keyed by the benchmark's question id (None when the file cannot say it),
    `by_doc` by lmms-eval's `<task>/<doc_id>` (None when it has none); `problems` lists the lines left out."""

    source: str
    by_question: dict[str, float] | None
    by_doc: dict[str, float] | None = None
    no_key_why: str = ""
    no_doc_why: str = "its records carry no lmms.task/lmms.doc_id (records of `lmms-eval --model cader` do)"
    problems: list[str] = field(default_factory=list)


def _system_name(path: Path, taken: set[str]) -> str:
    name = path.parent.name or path.stem
    return name if name not in taken else str(path)


def file_kind(path: str | Path) -> str:
    """"lmms" for an lmms-eval samples file, "cader" for cader predictions/judgments (or an empty file), told
    apart by the first JSON object in it."""
    for _, value in iter_lines(path):
        if not isinstance(value, dict):
            continue
        if is_samples_row(value):
            return "lmms"
        if prediction_key(value) is not None or "sample_id" in value:
            return "cader"
        raise CompareInputError(path, "neither cader predictions (rows with sample_id or question_id) nor an "
                                      "lmms-eval samples file (rows with doc_id and filtered_resps); first row's "
                                      f"keys: {sorted(value)[:8]}")
    return "cader"


def _record_correct(row: dict) -> float:
    return float(bool(row.get("correct")) and not row.get("error"))


def read_system(path: str | Path, metric: str, questions: dict | None) -> System:
    """One file's per-question scores: 1/0 correctness ("accuracy", from cader predictions or lmms-eval samples)
    or the Traj score ("traj", judgments)."""
    if file_kind(path) == "lmms":
        if metric != "accuracy":
            raise CompareInputError(path, f"an lmms-eval samples file has no {metric} score; compare it on accuracy")
        try:
            samples = read_samples(path)
        except SamplesFileError as error:
            raise CompareInputError(path, str(error).removeprefix(f"{path}: ")) from None
        by_question = samples.by_question
        if by_question is not None and questions is not None:
            by_question = {k: v for k, v in by_question.items() if k in questions}
        return System(source=f"lmms-eval samples of {samples.task or '?'} ({samples.metric})", by_question=by_question,
                      by_doc=samples.by_doc, no_key_why=samples.no_key_why, problems=samples.problems,
                      no_doc_why=samples.no_doc_why)
    if metric == "traj":
        return System("cader judgments", {k: float(r["traj"]) for k, r in read_judgments(path).items()
                                          if not r.get("error") and r.get("traj") is not None})
    if questions is not None:
        rows = load_predictions(path)[0]
        by_question = {k: float(is_correct(questions[k], rows[k])) for k in rows if k in questions}
        return System("cader predictions", by_question)
    rows, collision = _rows_by_any_id(path)
    by_question = {k: _record_correct(r) for k, r in rows.items()} if not collision else None
    return System("cader predictions", by_question, _by_lmms_doc(path) or None, no_key_why=collision)


def _by_lmms_doc(path: str | Path) -> dict[str, float]:
    """`<task>/<doc_id>` -> correctness for records of `lmms-eval --model cader` (they know their lmms-eval
    document); a record naming no document, or one named twice, is an error naming the lines: pairing by document
    must never rest on a guess."""
    by_doc, first_line = {}, {}
    for number, row in iter_lines(path):
        lmms = row.get("lmms") if isinstance(row, dict) else None
        if not isinstance(lmms, dict) or lmms.get("task") is None:
            continue
        doc_id = lmms.get("doc_id")
        if isinstance(doc_id, bool) or not isinstance(doc_id, int):
            raise CompareInputError(path, f"line {number}: lmms.doc_id {doc_id!r} is not a document index")
        key = f"{lmms['task']}/{doc_id}"
        if key in first_line:
            raise CompareInputError(path, f"lmms-eval document {key} is on lines {first_line[key]} and {number}")
        first_line[key] = number
        by_doc[key] = _record_correct(row)
    return by_doc


def _all_rows(path: str | Path) -> list[dict]:
    return [row for row in read_jsonl(path) if isinstance(row, dict)]


def _rows_by_any_id(path: str | Path) -> tuple[dict[str, dict], str]:
    """(rows by question id, "" or why the ids do not name one question each): a rerun's later row replaces the
    earlier one, but one id under two benchmarks (a multi-task side file of `lmms-eval --model cader`, whose
    sample ids are per-task document numbers) names two questions, and keying by it would pair the wrong ones."""
    rows, benchmark_of = {}, {}
    for row in _all_rows(path):
        key = prediction_key(row) or (str(row["sample_id"]) if "sample_id" in row else None)
        if key is None:
            continue
        benchmark = row.get("benchmark")
        if key in benchmark_of and benchmark_of[key] != benchmark:
            return {}, (f"its sample id {key!r} belongs to two benchmarks ({benchmark_of[key]}, {benchmark}), so "
                        "its ids do not name one question each")
        benchmark_of[key] = benchmark
        rows[key] = row
    return rows, ""


def _aligned(files: Sequence[str], systems: list[System], questions: dict | None) -> tuple[str, list[dict]]:
    """("question" or "doc", each system's scores): by the benchmark's question id when every file has it, else
    by lmms-eval's `<task>/<doc_id>`, which every file then must have."""
    if all(s.by_question is not None for s in systems):
        return "question", [s.by_question for s in systems]
    keyless = next(f"{path}: {s.no_key_why}" for path, s in zip(files, systems) if s.by_question is None)
    lacking = [(path, s.no_doc_why) for path, s in zip(files, systems) if s.by_doc is None]
    if questions is not None or lacking:
        path, why = lacking[0] if lacking and questions is None else (files[0], "--questions aligns by question id")
        raise CompareInputError(path, f"cannot be lined up with {keyless}, so documents line up by lmms-eval task "
                                      f"and doc_id only, and {why}")
    return "doc", _common_tasks([s.by_doc for s in systems])


def _common_tasks(per_system: list[dict]) -> list[dict]:
    """Documents of the tasks every file has: a samples file holds one task, a side file of `lmms-eval --model
    cader` all of its run's, and the other tasks' documents are not missing answers but another comparison."""
    tasks = [{doc.rsplit("/", 1)[0] for doc in scores} for scores in per_system]
    shared = set.intersection(*tasks) if tasks else set()
    return [{doc: v for doc, v in scores.items() if doc.rsplit("/", 1)[0] in shared} for scores in per_system]


# A comparison whose files answer fewer than this share of its questions in common is mostly missing answers
# scored 0, not a comparison of the systems: it is warned about, with the counts.
SMALL_OVERLAP = 0.9


def overlap_warnings(files: Sequence[str], per_system: list[dict], ids: list[str]) -> list[str]:
    """CompareInputError when no question is answered by every file; a warning per file that misses more than
    1 - SMALL_OVERLAP of the compared questions."""
    common = set(ids).intersection(*per_system) if per_system else set()
    if ids and not common:
        counts = ", ".join(f"{path}: {len(scores)}" for path, scores in zip(files, per_system))
        raise CompareInputError(files[0], f"no question is answered by every file ({counts} answers; {len(ids)} "
                                          "questions in all): there is nothing to pair")
    return [f"{path} answers {len(set(ids) & set(scores))} of the {len(ids)} compared questions "
            f"({len(common)} answered by every file); its missing answers score 0"
            for path, scores in zip(files, per_system) if len(set(ids) & set(scores)) < SMALL_OVERLAP * len(ids)]


def compare_files(files: Sequence[str], *, questions_path: str | None = None, metric: str = "accuracy",
                  n_resamples: int = 10_000, seed: int = 0) -> dict:
    """Align systems on the same question ids (a missing answer scores 0; no question in common is an error, a
    small overlap a warning with the counts) and compute App. G statistics,
    each system against the first. A file is cader predictions (or judgments) or an lmms-eval samples file of any
    model (`cader.evaluate.lmms.samples`), told apart by content."""
    if len(files) < 2:
        raise ValueError("compare needs at least two files")
    for path in [*files, *([questions_path] if questions_path else [])]:
        if not Path(path).is_file():
            raise InputFileError(path)
    questions = load_questions(questions_path)[0] if questions_path else None
    names, systems = [], []
    for path in files:
        names.append(_system_name(Path(path), set(names)))
        systems.append(read_system(path, metric, questions))
    aligned_by, per_system = _aligned(files, systems, questions)
    if questions is not None:
        ids = list(questions)
    else:
        ids = sorted(set().union(*per_system), key=lambda k: (len(k), k))
    warnings = overlap_warnings(files, per_system, ids)
    matrix = np.array([[scores.get(k, 0.0) for k in ids] for scores in per_system])
    result = {"metric": metric, "n": len(ids), "aligned_by": aligned_by, "systems": {}, "pairs": [],
              "warnings": warnings}
    for name, system, scores, row in zip(names, systems, per_system, matrix):
        result["systems"][name] = {"mean": float(row.mean()) if ids else None, "source": system.source,
                                   "missing": [k for k in ids if k not in scores], "problems": system.problems}
    for i in range(1, len(names)):
        pair = {"a": names[i], "b": names[0],
                "bootstrap": paired_bootstrap_diff(matrix[i], matrix[0], n_resamples=n_resamples, seed=seed)}
        if metric == "accuracy":
            pair["mcnemar"] = mcnemar_exact(matrix[i] > 0.5, matrix[0] > 0.5)
        result["pairs"].append(pair)
    if len(names) >= 3:
        result["rank_stability"] = rank_stability(matrix, names, n_resamples=n_resamples, seed=seed)
    return result


def format_comparison(result: dict) -> str:
    lines = [f"metric: {result['metric']}   questions: {result['n']}", ""]
    lines += [f"WARNING: {warning}" for warning in result.get("warnings", [])]
    lines += ([""] if result.get("warnings") else []) + ["system | mean | missing"]
    for name, info in result["systems"].items():
        lines.append(f"{name} | {info['mean']:.4f} | {len(info['missing'])}")
    lines.append("")
    foreign = {name: info for name, info in result["systems"].items()
               if info.get("source", "cader").startswith("lmms-eval") or info.get("problems")}
    for name, info in foreign.items():
        lines.append(f"{name}: {info['source']}, {len(info.get('problems', []))} lines left out")
        lines += [f"  {problem}" for problem in info.get("problems", [])[:5]]
    if result.get("aligned_by") == "doc":
        lines.append("aligned by lmms-eval task/doc_id (a file has no question ids)")
    if foreign or result.get("aligned_by") == "doc":
        lines.append("")
    for pair in result["pairs"]:
        b = pair["bootstrap"]
        line = (f"{pair['a']} - {pair['b']}: {b['diff']:+.4f}  {int(b['confidence'] * 100)}% CI "
                f"[{b['low']:+.4f}, {b['high']:+.4f}] ({b['n_resamples']} paired resamples)")
        if "mcnemar" in pair:
            m = pair["mcnemar"]
            line += f"; McNemar exact: {m['only_a']} vs {m['only_b']} discordant, p = {m['p_value']:.4g}"
        lines.append(line)
    if "rank_stability" in result:
        rs = result["rank_stability"]
        lines += ["", f"rank stability (Kendall tau-b vs full-sample ranking: {rs['kendall_tau_b']:.3f})",
                  "system | rank | 95% rank interval | P(rank 1) | P(top 3)"]
        for name, s in rs["systems"].items():
            lines.append(f"{name} | {s['rank']} | [{s['rank_interval'][0]}, {s['rank_interval'][1]}] | "
                         f"{s['p_rank1']:.3f} | {s['p_top3']:.3f}")
    return "\n".join(lines)
