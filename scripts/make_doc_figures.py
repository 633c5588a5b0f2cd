"""Regenerate the calibration figures shown in docs/calibration_figures.md (docs/figures/) from synthetic Stage-1 outcomes.

The outcomes come from `cader.dev.calibration_rows` (logits calibrated at a known temperature, 4- and 5-option
benchmarks, and a Stage-2 answer for every sample as a uniform_stage2 run would give), so the figures show what a
real held-out run looks like with thousands of samples, without a model.

guarantee_validity.png follows the calibration's default procedure (fit/select/test splits drawn over videos,
stratified by benchmark, and the bound on effective counts over the select part's videos; its title says so). The
synthetic rows ask one question per video, so there the video split and the effective counts coincide with the
question-level ones; tests/test_calibrate_validity.py shows where they differ (questions sharing a video's difficulty).

frontier.png (calibrate/frontier.py) gives every synthetic row the calls of a CADER sample at Qwen3-VL-8B's sizes
(`synthetic_calls`: a Stage-1 prompt of about 10,000 tokens, then per Stage-2 cycle a proposal, a verification and,
on the last, the final answer on a crop), so its TFLOPs show the shape of the trade-off, not a measured run.

    python scripts/make_doc_figures.py --out docs/figures
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

import numpy as np
from cader.calibrate.compute import sample_flops
from cader.calibrate.fit import main as fit_main
from cader.calibrate.frontier import frontier
from cader.dev.calibration_rows import synthetic_prediction_rows
from jsonargparse import CLI


def synthetic_calls(rng: np.random.Generator) -> list[tuple[str, int, int]]:
    """The model calls of one synthetic CADER sample, as (role, prompt tokens, generated tokens): Stage 1 on ~256
    frames, then 1-3 crop-and-verify cycles (proposal with thinking, verifier on a dense crop) and the final answer."""
    stage1 = int(rng.integers(8_000, 12_000))
    calls = [("stage1", stage1, 0)]
    for _ in range(int(rng.integers(1, 4))):
        calls += [("main", stage1 + 150, int(rng.integers(200, 800))), ("verifier", int(rng.integers(4_000, 9_000)), 0)]
    return calls + [("main", int(rng.integers(4_000, 9_000)), int(rng.integers(200, 800)))]


def with_costs(rows: list[dict], seed: int) -> list[dict]:
    """The rows with each sample's token counts and FLOPs by role (the `cost.flops` block) from `synthetic_calls`."""
    rng = np.random.default_rng(seed)
    for row in rows:
        calls = synthetic_calls(rng)
        row["cost"].update(forwards=len(calls), prompt_tokens=sum(c[1] for c in calls),
                           completion_tokens=sum(c[2] for c in calls), flops=sample_flops(calls))
    return rows


def main(out: str = "docs/figures", n: int = 1500, seed: int = 0, validity_splits: int = 200) -> None:
    """Write the PNGs of calibrate/fit.py on synthetic predictions into `out`: an accuracy-mode run (every figure
    but one) and a precision-mode run at alpha = 0.1 (guarantee_validity.png), and the accuracy-compute frontier
    of calibrate/frontier.py with that run's certified tau (frontier.png).

    Args:
        out: Destination folder for the PNG files.
        n: Samples per synthetic benchmark.
        seed: Seed of the synthetic outcomes and of the fit/select split.
        validity_splits: Random fit/select/test splits behind guarantee_validity.png.
    """
    with tempfile.TemporaryDirectory() as tmp:
        files = []
        for k, (name, options) in enumerate([("synthetic_a", 4), ("synthetic_b", 5)]):
            rows = with_costs(synthetic_prediction_rows(name, n, n_options=options, true_temperature=1.5,
                                                        seed=seed + k, stage2_accuracy=0.7), seed + k)
            path = Path(tmp) / f"{name}.jsonl"
            path.write_text("".join(json.dumps(r) + "\n" for r in rows))
            files.append(str(path))
        run = Path(tmp) / "fit"
        fit_main(["--predictions", *files, "--out", str(run), "--mode", "accuracy", "--seed", str(seed),
                  "--validity_splits", "0"])
        # the validity figure shows a guarantee, so it comes from a precision-mode run on the same outcomes
        guaranteed = Path(tmp) / "precision"
        fit_main(["--predictions", *files, "--out", str(guaranteed), "--mode", "precision", "--alpha", "0.1",
                  "--seed", str(seed), "--validity_splits", str(validity_splits)])
        frontier(files, str(guaranteed / "calibration.json"), str(Path(tmp) / "frontier"))
        Path(out).mkdir(parents=True, exist_ok=True)
        pngs = sorted((run / "figures").glob("*.png")) + [guaranteed / "figures" / "guarantee_validity.png",
                                                          Path(tmp) / "frontier" / "figures" / "frontier.png"]
        for png in pngs:
            shutil.copy(png, Path(out) / png.name)
            print(f"wrote {Path(out) / png.name}")


if __name__ == "__main__":
    CLI(main, as_positional=False)
