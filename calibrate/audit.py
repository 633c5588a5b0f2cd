"""Audit a calibration on its target: is the exit error at the certified tau within alpha where it is used?

calibrate/fit.py certifies tau on a held-out split; calibrate/transfer.py compares margins only (it never sees
whether an exit was right). The audit labels a small sample of the target run and tests the exit error exactly:

1. Plan (no labels needed): the samples of the target run that exit at the calibration's T and tau, one drawn at
   random per video, the videos in random order (``audit_plan.jsonl``), and the number of labels needed: the
   fewest videos n for which the test below shows exit error <= alpha with the asked power when the true exit
   error is ``true_error`` (default alpha / 2), from the exact binomial (scipy.stats.binom).
2. Test: label the plan's first n rows (any prefix of it is a random sample of videos), then the audit counts the
   errors k among the n labelled rows, one per video, and bounds the exit error by the one-sided (1 - delta)
   Clopper-Pearson bound. One question per video, drawn before any label is seen, makes the n outcomes independent
   however strongly a video's questions are correlated (calibrate/per_video.py), so the bound is exact; it bounds
   the error of a random exiting question of a random video. Labels on other questions are not used.

Verdict: "holds" (bound <= alpha), "not shown" (bound > alpha: the exit error may exceed alpha on this target), or
"too few labels" (no labelled row). Labels come from the rows' ``answer`` or from ``--labels`` (a JSONL of
benchmark, sample_id, answer); which rows were labelled must not depend on whether the model was right.

    cader audit --calibration runs/calib/calibration.json --predictions runs/target/predictions.jsonl --out runs/audit
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from cader.calibrate.binomial import clopper_pearson_upper
from cader.calibrate.clusters import cluster_codes
from cader.calibrate.ltt import certification_power
from cader.calibrate.margin import InvalidLogits, margin
from cader.calibrate.per_video import one_per_video
from cader.contracts.jsonl import LineProblem, iter_lines
from cader.contracts.records import PredictionRecord, present_field_problem

DEFAULT_POWER = 0.8
MAX_LABELS = 100_000


def audit_power(n: int, alpha: float, delta: float, true_error: float) -> float:
    """P(the audit shows exit error <= alpha) with n labelled videos when the true exit error is ``true_error``."""
    return certification_power(n, true_error, alpha, delta)


def labels_needed(alpha: float, delta: float, power: float = DEFAULT_POWER, true_error: float | None = None,
                  max_labels: int = MAX_LABELS) -> int | None:
    """The fewest labelled videos n whose audit reaches ``power`` at ``true_error`` (default alpha / 2); None when
    no n up to max_labels does (true_error at or above alpha: no test of size delta can show it)."""
    if not (0 < alpha < 1 and 0 < delta < 1 and 0 < power < 1):
        raise ValueError(f"alpha, delta and power must be in (0, 1), got {alpha}, {delta}, {power}")
    true_error = alpha / 2 if true_error is None else true_error
    if not 0 <= true_error < alpha:
        return None
    # power jumps up at each n where one more error is allowed and sags in between: scan from the smallest
    # testable n (zero errors pass) upward; doubling then bisection would miss the first n that reaches it
    n = max(1, math.ceil(math.log(delta) / math.log1p(-alpha) - 1e-12))
    while n <= max_labels:
        if audit_power(n, alpha, delta, true_error) >= power:
            return n
        n += 1
    return None


@dataclass(frozen=True)
class AuditResult:
    n: int              # labelled videos used (one exiting question each)
    errors: int         # wrong Stage-1 answers among them
    upper_bound: float  # one-sided (1 - delta) Clopper-Pearson bound on the exit error (1.0 when n == 0)
    verdict: str        # "holds", "not shown", "too few labels"

    def as_dict(self) -> dict:
        return {"n": self.n, "errors": self.errors, "upper_bound": self.upper_bound, "verdict": self.verdict}


def audit_exit_error(correct: Sequence[bool], alpha: float, delta: float) -> AuditResult:
    """The exact test on the labelled plan rows (one per video): k errors among n, Clopper-Pearson at 1 - delta."""
    c = np.asarray(correct, dtype=bool)
    n, k = int(c.size), int((~c).sum())
    if n == 0:
        return AuditResult(0, 0, 1.0, "too few labels")
    upper = float(clopper_pearson_upper(k, n, delta))
    return AuditResult(n, k, upper, "holds" if upper <= alpha else "not shown")


def plan_order(videos: Sequence, exits: np.ndarray, seed: int) -> np.ndarray:
    """Indices of the plan: among exiting samples, one per video drawn at random, in a random video order (so any
    prefix is a random sample of videos)."""
    idx = np.flatnonzero(np.asarray(exits, dtype=bool))
    if idx.size == 0:
        return idx
    codes, _ = cluster_codes([videos[i] for i in idx])
    drawn = idx[one_per_video(codes, seed)]
    return drawn[np.random.default_rng(seed).permutation(drawn.size)]


# ---- file I/O at the edge ------------------------------------------------------------------------------------------


def unusable_row(row) -> tuple[str, str | None] | None:
    """Why a target row cannot be audited: (reason, the contract's words naming the field, or None where there is
    nothing to name: a line that is no record, a failed sample); None when it can be."""
    if isinstance(row, LineProblem) or not isinstance(row, dict):
        return "malformed", None
    if row.get("error"):
        return "failed", None  # already reported by the run that wrote it
    problem = present_field_problem(PredictionRecord, row)  # a NaN or infinite logit or margin among them
    if problem is not None:
        return problem
    return ("no_logits", None) if (row.get("stage1") or {}).get("logits") is None else None


def read_target(paths: Sequence[str], temperature: float) -> tuple[list[dict], dict]:
    """Rows of the target run usable for the audit (Stage-1 logits present): key, video, letters, answer, margin at
    the calibration's T; and skipped rows by reason (failed rows, rows that break the predictions contract and
    logits that define no margin are counted, never dropped silently; each broken row is named on stderr by file,
    line and sample)."""
    rows, skipped = [], {}
    for path in paths:
        for line, row in iter_lines(Path(path)):
            unusable = unusable_row(row)
            if unusable is None:
                try:
                    m = margin(row["stage1"]["logits"], temperature)
                except InvalidLogits as exc:
                    unusable = ("invalid_logits", str(exc))
            if unusable is not None:
                why, detail = unusable
                if detail:
                    print(f"{path}:{line}: skipped (sample {row.get('benchmark')}/{row.get('sample_id')}: {detail})",
                          file=sys.stderr)
                skipped[why] = skipped.get(why, 0) + 1
                continue
            letters, logits = row.get("letters") or [], row["stage1"]["logits"]
            rows.append({"benchmark": str(row.get("benchmark")), "sample_id": str(row.get("sample_id")),
                         "video": row.get("video") or f"\0sample:{row.get('sample_id')}", "margin": float(m),
                         "stage1_pred": letters[int(np.argmax(logits))] if len(letters) == len(logits) else None,
                         "answer": row.get("answer")})
    return rows, skipped


def read_labels(path: str | None) -> dict:
    """(benchmark, sample_id) -> answer from a labels JSONL; {} without a file."""
    if not path:
        return {}
    out = {}
    for line, row in iter_lines(Path(path)):
        if not isinstance(row, dict) or "sample_id" not in row or "answer" not in row:
            raise ValueError(f"{path}:{line}: a label needs sample_id and answer (and benchmark)")
        out[(str(row.get("benchmark")), str(row["sample_id"]))] = row["answer"]
    return out


def audit(calibration: str, predictions: Sequence[str], out: str | None = None, labels: str | None = None,
          power: float = DEFAULT_POWER, true_error: float | None = None, seed: int = 0) -> dict:
    """Test the exit error at a calibration's tau on a labelled sample of the target run, one question per video.

    Prints the labels needed first, then the test; writes <out>/audit_plan.jsonl (label its first rows) and
    <out>/audit.json when ``out`` is given.

    Args:
        calibration: calibration.json written by calibrate/fit.py (its T, tau, alpha and delta are audited)
        predictions: the target run's predictions.jsonl files (Stage-1 logits; gold answers where labelled)
        out: folder for audit_plan.jsonl and audit.json
        labels: JSONL of {benchmark, sample_id, answer} labels for plan rows (default: the rows' own answer)
        power: the probability of showing exit error <= alpha that the stated number of labels buys
        true_error: the true exit error that power is computed at (default alpha / 2)
        seed: seed of the draw of one question per video and of the video order
    """
    from cader.calibrate.calibration_file import read_calibration

    cal = read_calibration(calibration)
    t, tau, alpha, delta = (float(cal[k]) for k in ("temperature", "tau", "alpha", "delta"))
    true_error = alpha / 2 if true_error is None else float(true_error)
    needed = labels_needed(alpha, delta, power, true_error)
    rows, skipped = read_target(predictions, t)
    exits = np.array([r["margin"] >= tau for r in rows], dtype=bool)
    plan = [rows[i] for i in plan_order([r["video"] for r in rows], exits, seed)]
    need_txt = (f"{needed} videos (one labelled exiting question each)" if needed is not None
                else f"no number of labels (true error {true_error} is not below alpha)")
    print(f"audit: to show exit error <= {alpha} at {1 - delta:.0%} confidence with power {power} when the true exit "
          f"error is {true_error:g}, label {need_txt}; the target has {int(exits.sum())} exits on {len(plan)} videos "
          f"at T = {t:.4g}, tau = {tau:.6g}")
    given = read_labels(labels)
    answers = [given.get((r["benchmark"], r["sample_id"]), r["answer"]) for r in plan]
    labelled = [(r, a) for r, a in zip(plan, answers, strict=True) if a is not None]
    result = audit_exit_error([r["stage1_pred"] == a for r, a in labelled], alpha, delta)
    print(f"audit: {result.verdict}: {result.errors} errors among {result.n} labelled videos, exit error <= "
          f"{result.upper_bound:.4g} at {1 - delta:.0%} (alpha = {alpha})"
          + (f"; fewer than the {needed} planned" if needed and result.n < needed else ""))
    report = {"calibration": calibration, "predictions": list(predictions), "temperature": t, "tau": tau,
              "alpha": alpha, "delta": delta, "power": power, "true_error": true_error, "labels_needed": needed,
              "exits": int(exits.sum()), "videos_with_exits": len(plan), "skipped": skipped, "seed": seed,
              **result.as_dict()}
    if out:
        folder = Path(out)
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "audit_plan.jsonl").write_text("".join(
            json.dumps({"rank": i, "benchmark": r["benchmark"], "sample_id": r["sample_id"], "video": r["video"],
                        "margin": r["margin"], "labelled": a is not None}) + "\n"
            for i, (r, a) in enumerate(zip(plan, answers, strict=True))), encoding="utf-8")
        (folder / "audit.json").write_text(json.dumps(report, indent=2), encoding="utf-8")
    return report


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    """`audit` on the command line: exit 0 when the bound holds, 1 when it is not shown (or nothing is labelled),
    2 on bad input.

    argv: the flags (default: sys.argv[1:]).
    prog: the program name the usage shows.
    """
    from cader.calibrate.calibration_file import CalibrationFileError
    from cader.cli.function_cli import call_arguments, function_parser

    args = call_arguments(function_parser(audit, prog, several=("predictions",)), argv)
    if not 0 < args["power"] < 1:
        print(f"calibrate/audit.py: error: --power must be in (0, 1), got {args['power']!r}", file=sys.stderr)
        return 2
    try:
        return 0 if audit(**args)["verdict"] == "holds" else 1
    except (CalibrationFileError, OSError, ValueError) as exc:
        print(f"calibrate/audit.py: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
