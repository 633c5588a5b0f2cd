"""Regenerate the calibration figures shown in docs/calibration_figures.md (docs/figures/) from synthetic Stage-1 outcomes.

The outcomes come from `cader.dev.calibration_rows` (logits calibrated at a known temperature, 4- and 5-option
benchmarks, and a Stage-2 answer for every sample as a uniform_stage2 run would give), so the figures show what a
real held-out run looks like with thousands of samples, without a model.

guarantee_validity.png follows the calibration's default procedure (fit/select/test splits drawn over videos,
stratified by benchmark, and the bound on effective counts over the select part's videos; its title says so). The
synthetic rows ask one question per video, so there the video split and the effective counts coincide with the
question-level ones; tests/test_calibrate_validity.py shows where they differ (questions sharing a video's difficulty).

    python scripts/make_doc_figures.py --out docs/figures
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

from cader.calibrate.fit import main as fit_main
from cader.dev.calibration_rows import synthetic_prediction_rows
from jsonargparse import CLI


def main(out: str = "docs/figures", n: int = 1500, seed: int = 0, validity_splits: int = 200) -> None:
    """Write the PNGs of calibrate/fit.py on synthetic predictions into `out`: an accuracy-mode run (every figure
    but one) and a precision-mode run at alpha = 0.1 (guarantee_validity.png).

    Args:
        out: Destination folder for the PNG files.
        n: Samples per synthetic benchmark.
        seed: Seed of the synthetic outcomes and of the fit/select split.
        validity_splits: Random fit/select/test splits behind guarantee_validity.png.
    """
    with tempfile.TemporaryDirectory() as tmp:
        files = []
        for k, (name, options) in enumerate([("synthetic_a", 4), ("synthetic_b", 5)]):
            rows = synthetic_prediction_rows(name, n, n_options=options, true_temperature=1.5, seed=seed + k,
                                             stage2_accuracy=0.7)  # fmt: skip
            path = Path(tmp) / f"{name}.jsonl"
            path.write_text("".join(json.dumps(r) + "\n" for r in rows))
            files.append(str(path))
        run = Path(tmp) / "fit"
        fit_main(["--predictions", *files, "--out", str(run), "--mode", "accuracy", "--seed", str(seed),
                  "--validity_splits", "0"])  # fmt: skip
        # the validity figure shows a guarantee, so it comes from a precision-mode run on the same outcomes
        guaranteed = Path(tmp) / "precision"
        fit_main(["--predictions", *files, "--out", str(guaranteed), "--mode", "precision", "--alpha", "0.1",
                  "--seed", str(seed), "--validity_splits", str(validity_splits)])  # fmt: skip
        Path(out).mkdir(parents=True, exist_ok=True)
        pngs = sorted((run / "figures").glob("*.png")) + [guaranteed / "figures" / "guarantee_validity.png"]
        for png in pngs:
            shutil.copy(png, Path(out) / png.name)
            print(f"wrote {Path(out) / png.name}")


if __name__ == "__main__":
    CLI(main, as_positional=False)
