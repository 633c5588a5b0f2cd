"""Fit CADER's Stage-1 temperature T and early-exit threshold tau from held-out predictions.jsonl files.

    python calibrate/fit.py --predictions runs/heldout/predictions.jsonl --out runs/calib
    python calibrate/fit.py --config configs/calibrate/default.yaml --predictions A.jsonl B.jsonl --out DIR

Writes <out>/calibration.json (read by evaluate/run.py --calibration), <out>/figures/*.png|csv, <out>/summary.md.
The flags are the parameters of `cader.calibrate.pipeline.calibrate_predictions` and the fields of its option groups
(`cader.calibrate.options`: Rule, FitOptions, SplitOptions, OutputOptions), with their help taken from the
docstrings (`cader.cli.function_cli`).
"""

import argparse
import math
import sys

from cader.calibrate.calibration_file import CalibrationFileError
from cader.calibrate.pipeline import CalibrationInputError, calibrate_predictions
from cader.calibrate.records import PredictionFileError, PredictionRowError
from cader.cli.function_cli import call_arguments, function_parser, grouped_arguments
from jsonargparse import ArgumentParser, DefaultHelpFormatter

# One line per mode: what it guarantees (each with probability >= 1 - delta over the selection split).
MODES_HELP = """modes (--mode), each guarantee with probability >= 1 - delta:
  precision  error among early exits <= alpha (exact Clopper-Pearson, fixed sequence over a fixed tau grid)
  cascade    accuracy lost against always running Stage 2 <= epsilon (Learn-then-Test; a uniform_stage2 run)
  joint      exit error <= alpha and accuracy loss <= epsilon (if given) together, within --budget (if given)
  budget     share sent to Stage 2 <= budget on the selection split; no error guarantee
  accuracy   best final accuracy on the selection split; no guarantee (a uniform_stage2 run)
  --verifier_alpha A (any mode)  verifier threshold delta_v: accepted first crops miss the evidence <= A
  --per_benchmark true (any mode)  also a tau per benchmark, each with its own guarantee
  --per_video true (guaranteed modes)  exact under clustering: tau certified on one random question per video
Before applying calibration.json to another benchmark or model: python calibrate/transfer.py --calibration FILE
--predictions TARGET.jsonl (two-sample KS test on the Stage-1 margins); to test it there exactly on a few labels:
python calibrate/audit.py --calibration FILE --predictions TARGET.jsonl --out DIR."""


# calibrate_predictions's option groups (cader.calibrate.options), each field a flag of its own name
GROUPS = ("rule", "fit", "split", "output")


class _HelpFormatter(argparse.RawDescriptionHelpFormatter, DefaultHelpFormatter):
    """Keeps the modes table's lines as written."""


def build_parser(prog: str | None = None) -> ArgumentParser:
    """The flags of calibrate/fit.py: `calibrate_predictions`'s parameters."""
    return function_parser(calibrate_predictions, prog, several=("predictions",), groups=GROUPS,
                           description=__doc__.split("\n")[0], epilog=MODES_HELP, formatter_class=_HelpFormatter)


# (flag, lowest, highest, lowest allowed, highest allowed): each range a flag's value must lie in
RANGES = (("alpha", 0.0, 1.0, False, False), ("delta", 0.0, 1.0, False, False),
          ("temperature", 0.0, math.inf, False, False), ("fit_fraction", 0.0, 1.0, False, False),
          ("epsilon", 0.0, 1.0, False, False), ("budget", 0.0, 1.0, True, True),
          ("verifier_alpha", 0.0, 1.0, False, False), ("min_exits", 1, math.inf, True, False),
          ("validity_splits", 0, math.inf, True, False))


def out_of_range(args: dict) -> str | None:
    """The first flag whose value lies outside its range, as one line naming the flag; None when all are in range.
    A flag left unset (None) is not checked."""
    for name, low, high, low_ok, high_ok in RANGES:
        value = args.get(name)
        if value is None:
            continue
        inside = (value >= low if low_ok else value > low) and (value <= high if high_ok else value < high)
        if not (isinstance(value, (int, float)) and math.isfinite(value) and inside):
            bounds = f"{'[' if low_ok else '('}{low:g}, {high:g}{']' if high_ok else ')'}"
            return f"--{name} must be in {bounds}, got {value!r}"
    return None


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    """Fit and write calibration.json, then print T, tau and what the selection guaranteed; exit 2 on bad input.

    argv: the flags (default: sys.argv[1:]).
    prog: the program name the usage shows.
    """
    args = call_arguments(build_parser(prog), argv)
    problem = out_of_range(args)
    if problem:
        print(f"calibrate/fit.py: error: {problem}", file=sys.stderr)
        return 2
    try:
        result = calibrate_predictions(**grouped_arguments(calibrate_predictions, args, GROUPS))
    except (PredictionFileError, PredictionRowError, CalibrationInputError, CalibrationFileError) as exc:
        print(f"calibrate/fit.py: error: {exc}", file=sys.stderr)
        return 2
    sel = result["select"]
    tau = "no exit (all to Stage 2)" if sel["no_exit"] else f"{result['tau']:.6g}"
    print(
        f"T = {result['temperature']:.4g}, tau = {tau} ({result['mode']}); exit rate {sel['exit_rate']:.3f} "
        f"on {sel['n']} held-out samples -> {args['out']}/calibration.json"
    )
    fit = result.get("fit") or {}
    if not fit.get("fixed") and fit.get("nll_after") is not None:
        rose = fit["ece_after"] > fit["ece_before"]
        print(f"  temperature fitted by gold-letter NLL {fit['nll_before']:.4g} -> {fit['nll_after']:.4g} on "
              f"{fit.get('n')} samples; ECE {fit['ece_before']:.3g} -> {fit['ece_after']:.3g}"
              + (" (ECE is not what the fit minimises: binned over 15 bins, it can rise while NLL falls; "
                 "summary.md says more)" if rose else ""))
    bound = (f"bound on effective counts (design effect {sel['design_effect']:.3g} at tau)"
             if sel.get("design_effect") is not None else
             "bound on effective counts" if result["cluster_bound"] else "bound counting questions")
    if result.get("per_video"):
        bound = f"exact per-video bound (one random question from each of {result['per_video']['videos']} videos)"
    fell_back = " (fell back from video)" if result["split_by"] != result["split_by_requested"] else ""
    print(f"  split by {result['split_by']}{fell_back}: {result['videos_fit']} videos fit T, {result['videos_select']} "
          f"select tau ({result['rows_without_video']} rows without a video); {bound}")
    for c in sel.get("constraints") or []:
        state = "met" if c["met"] else f"NOT met: {c['reason']}" if c.get("reason") else "not met"
        print(f"  {c['name']} <= {c['level']} ({c['handled']}): {state}")
    if result.get("verifier"):
        v = result["verifier"]
        got = f"{v['threshold']:.3g}" if v["threshold"] is not None else f"none certified ({v.get('reason')})"
        counted = (f"design effect {v['design_effect']:.3g}" if v.get("design_effect") is not None
                   else "effective counts" if v.get("cluster_bound") else "counting crops")
        videos = f" from {v['videos']} videos" if v.get("videos") is not None else ""
        print(f"  verifier threshold delta_v = {got} (alpha_v = {v['alpha_v']}, {v['n']} first crops with evidence"
              f"{videos}, {counted})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
