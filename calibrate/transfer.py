"""Does a calibration travel? A two-sample test of the Stage-1 margins: calibration's selection split vs a target.

The guarantees of calibrate/fit.py hold for samples exchangeable with the held-out ones. Before a calibration.json
is applied to another benchmark or model, `check_transfer` compares the target's Stage-1 margins (at the
calibration's T; no gold answers needed) with the selection split's, kept in calibration.json as
``select_margins`` (every sorted margin up to MAX_STORED_MARGINS, else that many evenly spaced quantiles), by
scipy's two-sample Kolmogorov-Smirnov test, and warns when p < ``level``. A small p says the margins differ, so
tau's guarantee does not carry over; a large p does not prove it does (the test sees margins, not correctness).

    python calibrate/transfer.py --calibration runs/calibration/calibration.json --predictions runs/lvbench/predictions.jsonl
"""

from __future__ import annotations

import sys
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
from scipy.stats import ks_2samp, kstwo

MAX_STORED_MARGINS = 1000
TRANSFER_LEVEL = 0.05


def margin_summary(margin: np.ndarray, temperature: float, max_points: int = MAX_STORED_MARGINS) -> dict:
    """What calibration.json keeps of the selection split's margins for `check_transfer`."""
    m = np.sort(np.asarray(margin, np.float64))
    exact = m.size <= max_points
    points = m if exact else np.quantile(m, (np.arange(max_points) + 0.5) / max_points)
    return {"n": int(m.size), "temperature": float(temperature), "exact": bool(exact),
            "sorted": [float(x) for x in points]}


def exchangeability_test(reference: np.ndarray, target: np.ndarray, n_reference: int | None = None) -> dict:
    """Two-sample KS test. ``reference`` may be quantiles standing for ``n_reference`` samples: then the statistic
    comes from the quantiles and the p-value from the exact one-sample KS law at the effective size
    n_ref * n_target / (n_ref + n_target) (the usual large-sample reading of the two-sample law)."""
    reference, target = np.asarray(reference, np.float64), np.asarray(target, np.float64)
    if reference.size == 0 or target.size == 0:
        raise ValueError(f"need margins on both sides, got {reference.size} and {target.size}")
    result = ks_2samp(reference, target)
    n_ref = reference.size if n_reference is None else int(n_reference)
    if n_ref == reference.size:
        p = float(result.pvalue)
    else:
        n_eff = max(1, round(n_ref * target.size / (n_ref + target.size)))
        p = float(kstwo.sf(result.statistic, n_eff))
    return {"statistic": float(result.statistic), "p_value": p, "n_calibration": n_ref, "n_target": int(target.size)}


@dataclass(frozen=True)
class TransferCheck:
    p_value: float | None  # None when the calibration file keeps no margins
    statistic: float | None
    n_calibration: int
    n_target: int
    level: float
    warn: bool  # p < level: the target's margins are not like the calibration's
    message: str

    def as_dict(self) -> dict:
        return asdict(self)


def check_transfer(calibration: dict | str | Path, target_margins, level: float = TRANSFER_LEVEL) -> TransferCheck:
    """Compare a target's Stage-1 margins (computed at ``calibration["temperature"]``) with the calibration's.

    Args:
        calibration: calibration.json's payload, or its path
        target_margins: the target run's Stage-1 margins M at the calibration's temperature
        level: warn when the KS p-value is below this
    """
    if not isinstance(calibration, dict):
        from cader.calibrate.calibration_file import read_calibration

        calibration = read_calibration(calibration)
    target = np.asarray(list(target_margins), np.float64)
    target = target[np.isfinite(target)]
    summary = calibration.get("select_margins")
    if not summary or not summary.get("sorted"):
        return TransferCheck(None, None, 0, int(target.size), level, False,
                             "transfer not checked: the calibration file keeps no select_margins (refit it)")
    if target.size == 0:
        return TransferCheck(None, None, int(summary["n"]), 0, level, False, "transfer not checked: no target margins")
    res = exchangeability_test(np.asarray(summary["sorted"]), target, n_reference=int(summary["n"]))
    warn = res["p_value"] < level
    verdict = (f"WARNING: the target's Stage-1 margins differ from the calibration's (KS p = {res['p_value']:.3g} < "
               f"{level}); tau's guarantee does not carry over -- recalibrate on held-out data from the target"
               if warn else
               f"the target's Stage-1 margins are consistent with the calibration's (KS p = {res['p_value']:.3g})")
    msg = f"{verdict} [D = {res['statistic']:.3f}, n = {res['n_calibration']} vs {res['n_target']}]"
    return TransferCheck(res["p_value"], res["statistic"], res["n_calibration"], res["n_target"], level, warn, msg)


def target_margins_from_predictions(paths, temperature: float) -> tuple[np.ndarray, dict]:
    """Stage-1 margins at ``temperature`` of every usable row (raw logits; gold answers not needed)."""
    from cader.calibrate.margin import InvalidLogits, margin
    from cader.contracts.jsonl import LineProblem, iter_lines

    out, skipped = [], {}
    for path in paths:
        for line, row in iter_lines(Path(path)):
            logits = (row.get("stage1") or {}).get("logits") if isinstance(row, dict) else None
            if not isinstance(row, dict) or row.get("error") or logits is None:
                why = "malformed" if isinstance(row, LineProblem) or not isinstance(row, dict) else "failed_or_no_logits"
                skipped[why] = skipped.get(why, 0) + 1
                continue
            try:
                out.append(margin(logits, temperature))
            except InvalidLogits as exc:
                print(f"{path}:{line}: skipped ({exc})", file=sys.stderr)
                skipped["invalid_logits"] = skipped.get("invalid_logits", 0) + 1
    return np.asarray(out, np.float64), skipped


def transfer_check(calibration: str, predictions: list[str], level: float = TRANSFER_LEVEL) -> int:
    """Warn when a target run's Stage-1 margins are not exchangeable with a calibration's (two-sample KS).

    Prints the test's line (on stderr when it warns); returns 1 when it warns, else 0.

    Args:
        calibration: calibration.json written by calibrate/fit.py
        predictions: the target's predictions.jsonl files (any variant: only Stage-1 logits are read)
        level: warn when the p-value is below this
    """
    from cader.calibrate.calibration_file import read_calibration

    payload = read_calibration(calibration)
    target, skipped = target_margins_from_predictions(predictions, float(payload["temperature"]))
    check = check_transfer(payload, target, level)
    print(check.message + (f"; skipped rows: {skipped}" if skipped else ""),
          file=sys.stderr if check.warn else sys.stdout)
    return 1 if check.warn else 0


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    """`transfer_check` on the command line; exit 1 when it warns, 2 on an unreadable input.

    argv: the flags (default: sys.argv[1:]).
    prog: the program name the usage shows.
    """
    from cader.calibrate.calibration_file import CalibrationFileError
    from cader.cli.function_cli import call_arguments, function_parser

    # several files after one flag, as calibrate/fit.py --predictions
    args = call_arguments(function_parser(transfer_check, prog, several=("predictions",)), argv)
    try:
        return transfer_check(**args)
    except (CalibrationFileError, OSError) as exc:
        print(f"calibrate/transfer.py: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
