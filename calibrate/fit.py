"""Fit CADER's Stage-1 temperature T and early-exit threshold tau from held-out predictions.jsonl files.

    python calibrate/fit.py --predictions runs/heldout/predictions.jsonl --out runs/calib
    python calibrate/fit.py --config configs/calibrate/default.yaml --predictions A.jsonl B.jsonl --out DIR

Writes <out>/calibration.json (read by evaluate/run.py --calibration), <out>/figures/*.png|csv, <out>/summary.md.
"""

from __future__ import annotations

import sys

from cader.calibrate.calibration_file import CalibrationFileError
from cader.calibrate.pipeline import CalibrationInputError, calibrate_predictions
from cader.calibrate.records import PredictionFileError, PredictionRowError
from cader.calibrate.tau import MODES
from jsonargparse import ActionConfigFile, ArgumentParser


def build_parser() -> ArgumentParser:
    parser = ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--config", action=ActionConfigFile)
    parser.add_argument(
        "--predictions",
        type=str,
        required=True,
        nargs="+",
        help="predictions.jsonl files with Stage-1 option logits (held-out split)",
    )
    parser.add_argument("--out", type=str, required=True, help="output folder")
    parser.add_argument(
        "--mode",
        type=str,
        default="precision",
        choices=MODES,
        help="precision: bound exit error; budget: cap Stage-2 fraction; accuracy: maximise final acc",
    )
    parser.add_argument("--alpha", type=float, default=0.05, help="precision mode: target error among exits")
    parser.add_argument(
        "--delta", type=float, default=0.1, help="precision mode: allowed failure probability"
    )
    parser.add_argument(
        "--budget", type=float | None, default=None, help="budget mode: max fraction sent to Stage 2"
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of the fit/select split")
    parser.add_argument(
        "--min_exits", type=int, default=50, help="precision mode: fewest exits a tau may have"
    )
    parser.add_argument("--fit_fraction", type=float, default=0.5, help="share of samples used to fit T")
    parser.add_argument(
        "--temperature",
        type=float | None,
        default=None,
        help="fix T instead of fitting it (all samples then select tau)",
    )
    parser.add_argument("--strict", type=bool, default=False, help="stop at the first malformed row")
    parser.add_argument("--figures", type=bool, default=True, help="write figures/*.png|csv")
    return parser


def main(argv: list[str] | None = None) -> int:
    cfg = build_parser().parse_args(argv)
    try:
        result = calibrate_predictions(
            predictions=cfg.predictions,
            out=cfg.out,
            mode=cfg.mode,
            alpha=cfg.alpha,
            delta=cfg.delta,
            budget=cfg.budget,
            seed=cfg.seed,
            min_exits=cfg.min_exits,
            fit_fraction=cfg.fit_fraction,
            temperature=cfg.temperature,
            strict=cfg.strict,
            figures=cfg.figures,
        )
    except (PredictionFileError, PredictionRowError, CalibrationInputError, CalibrationFileError) as exc:
        print(f"calibrate/fit.py: error: {exc}", file=sys.stderr)
        return 2
    sel = result["select"]
    tau = "no exit (all to Stage 2)" if sel["no_exit"] else f"{result['tau']:.6g}"
    print(
        f"T = {result['temperature']:.4g}, tau = {tau} ({result['mode']}); exit rate {sel['exit_rate']:.3f} "
        f"on {sel['n']} held-out samples -> {cfg.out}/calibration.json"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
