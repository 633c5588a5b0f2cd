"""Fit CADER's Stage-1 temperature T and early-exit threshold tau from held-out predictions.jsonl files.

    python calibrate/fit.py --predictions runs/heldout/predictions.jsonl --out runs/calib
    python calibrate/fit.py --config configs/calibrate/default.yaml --predictions A.jsonl B.jsonl --out DIR

Writes <out>/calibration.json (read by evaluate/run.py --calibration), <out>/figures/*.png|csv, <out>/summary.md.
The flags are the parameters of `fit` below, with their help taken from its docstring.
"""

# The annotations stay objects (no `from __future__ import annotations`): jsonargparse builds the flags from them,
# also when this file is loaded by path under a module name of its own.

import sys
from typing import Literal

from cader.calibrate.calibration_file import CalibrationFileError
from cader.calibrate.pipeline import CalibrationInputError, calibrate_predictions
from cader.calibrate.records import PredictionFileError, PredictionRowError
from cader.cli.docstrings import argument_help
from jsonargparse import ActionConfigFile, ArgumentParser

Mode = Literal["precision", "budget", "accuracy"]  # cader.calibrate.tau.MODES, spelled out for the signature


def fit(
    predictions: list[str],
    out: str,
    mode: Mode = "precision",
    alpha: float = 0.05,
    delta: float = 0.1,
    budget: float | None = None,
    seed: int = 0,
    min_exits: int = 50,
    fit_fraction: float = 0.5,
    temperature: float | None = None,
    strict: bool = False,
    figures: bool = True,
) -> dict:
    """Fit T (CADER Eq. 2) and tau (Algorithm 1 line 10) and write calibration.json, figures/ and summary.md.

    Args:
        predictions: predictions.jsonl files holding raw Stage-1 option logits, from a held-out split
        out: output folder for calibration.json, figures/ and summary.md
        mode: how tau is chosen: precision bounds the error among early exits, budget caps the share sent to Stage 2,
            accuracy maximises final accuracy (needs Stage-2 outcomes, i.e. a uniform_stage2 run)
        alpha: precision mode: the largest error allowed among early exits
        delta: precision mode: the allowed probability that the exit error exceeds alpha
        budget: budget mode: the largest share of samples sent to Stage 2 (required in that mode)
        seed: seed of the split into the T-fit part and the tau-selection part
        min_exits: precision mode: the fewest early exits a tau may have
        fit_fraction: share of the samples used to fit T; the rest selects tau
        temperature: fix T to this value instead of fitting it (every sample then selects tau)
        strict: stop at the first malformed row instead of skipping and counting it
        figures: also write figures/*.png and the CSV behind each

    Returns:
        The calibration.json payload.
    """
    return calibrate_predictions(
        predictions, out, mode=mode, alpha=alpha, delta=delta, budget=budget, seed=seed, min_exits=min_exits,
        fit_fraction=fit_fraction, temperature=temperature, strict=strict, figures=figures,
    )


def build_parser() -> ArgumentParser:
    parser = ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--config", action=ActionConfigFile)
    # `--predictions A B` takes several files after one flag, which a list-typed signature parameter cannot
    parser.add_argument("--predictions", type=str, nargs="+", required=True, help=argument_help(fit)["predictions"])
    parser.add_function_arguments(fit, skip={"predictions"})
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv).as_dict()
    args.pop("config", None)
    try:
        result = fit(**args)
    except (PredictionFileError, PredictionRowError, CalibrationInputError, CalibrationFileError) as exc:
        print(f"calibrate/fit.py: error: {exc}", file=sys.stderr)
        return 2
    sel = result["select"]
    tau = "no exit (all to Stage 2)" if sel["no_exit"] else f"{result['tau']:.6g}"
    print(
        f"T = {result['temperature']:.4g}, tau = {tau} ({result['mode']}); exit rate {sel['exit_rate']:.3f} "
        f"on {sel['n']} held-out samples -> {args['out']}/calibration.json"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
