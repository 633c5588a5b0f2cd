"""Fit CADER's Stage-1 temperature T and early-exit threshold tau from held-out predictions.jsonl files.

    python calibrate/fit.py --predictions runs/heldout/predictions.jsonl --out runs/calib
    python calibrate/fit.py --config configs/calibrate/default.yaml --predictions A.jsonl B.jsonl --out DIR

Writes <out>/calibration.json (read by evaluate/run.py --calibration), <out>/figures/*.png|csv, <out>/summary.md.
The flags are the parameters of `cader.calibrate.pipeline.calibrate_predictions`, with their help taken from its
docstring.
"""

import sys

from cader.calibrate.calibration_file import CalibrationFileError
from cader.calibrate.pipeline import CalibrationInputError, calibrate_predictions
from cader.calibrate.records import PredictionFileError, PredictionRowError
from cader.cli.docstrings import argument_help
from jsonargparse import ActionConfigFile, ArgumentParser


def build_parser() -> ArgumentParser:
    parser = ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--config", action=ActionConfigFile)
    # `--predictions A B` takes several files after one flag, which a list-typed signature parameter cannot
    parser.add_argument("--predictions", type=str, nargs="+", required=True,
                        help=argument_help(calibrate_predictions)["predictions"])
    parser.add_function_arguments(calibrate_predictions, skip={"predictions"})
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv).as_dict()
    args.pop("config", None)
    try:
        result = calibrate_predictions(**args)
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
