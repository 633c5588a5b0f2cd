"""What the two options that depart from the default cost on the miniature: the RGR speed option
(`trade_rgr_frames_for_speed`) and the bin-centre frame rule, each against the default over Table 2 (`--variants
all`, the synthetic test split) and, for the frame rule, Stage 1 on the held-out split; per seed of
`scripts/miniature_seeds.py`, every row with its exact interval and the paired tests between the two modes.

    python scripts/miniature_seeds.py --seeds '[0, 1, 2]' --workdir runs/seeds     # the seeds' models and data
    python scripts/miniature_trades.py --workdir runs/seeds --json_out docs/measured/miniature_trades.json
    python scripts/update_readme.py                                                 # docs/video.md's table

It runs the missing evaluations first (`cader eval` on each seed's models, data and calibration, in
<seed>/runs/tiny/{t2_default, t2_speed, t2_bins, heldout_default, heldout_bins}; a finished one is kept), then pairs
the records sample by sample.
"""

from __future__ import annotations

import json
import os
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from cader.evaluate.predictions_files import read_records
from cader.evaluate.report import paired_correctness
from cader.evaluate.stats import accuracy_summary, mcnemar_exact, paired_bootstrap_diff, pooled_mcnemar
from jsonargparse import CLI

# option name -> (its run, the default run it is paired with, the flags that make it)
RUNS = {
    "t2_default": ([], None),
    "t2_speed": (["--trade_rgr_frames_for_speed", "true"], "t2_default"),
    "t2_bins": (["--frame_rule", "bin_centre"], "t2_default"),
    "heldout_default": ([], None),
    "heldout_bins": (["--frame_rule", "bin_centre"], "heldout_default"),
}
TRADES = {"speed": ("t2_default", "t2_speed"), "bin_centre": ("t2_default", "t2_bins"),
          "bin_centre_heldout": ("heldout_default", "heldout_bins")}


def eval_command(tiny: Path, name: str) -> list[str]:
    """The `cader eval` of run `name` on the seed's miniature in `tiny` (its runs/tiny folder)."""
    flags, _ = RUNS[name]
    common = ["cader", "eval", "--config", "configs/eval/cader_tiny.yaml", "--model", str(tiny / "sft" / "export"),
              "--verifier", str(tiny / "verifier"), "--data_root", str(tiny / "data" / "eval"), "--out", str(tiny / name)]
    if name.startswith("heldout"):   # Stage 1 alone, as the calibration's held-out run
        return [*common, "--benchmark", "synthetic_heldout", "--variant", "no_stage2", *flags]
    return [*common, "--benchmark", "synthetic", "--variants", "all",
            "--calibration", str(tiny / "calibration" / "calibration.json"), *flags]


def run_missing(tiny: Path) -> None:
    """The seed's runs that have not finished, in order (each option after the default it is paired with)."""
    for name in RUNS:
        if not (tiny / name / "report.json").is_file() and not (tiny / name / "shared_work.json").is_file():
            # one torch thread, as the quickstart's runs: the default's records then equal the quickstart's own
            env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
            subprocess.run(eval_command(tiny, name), check=True, stdout=subprocess.DEVNULL, env=env)


def variant_files(run: Path) -> dict[str, Path]:
    """{variant: predictions.jsonl} of a run: one per Table 2 row (`--variants`), or the run's own."""
    if (run / "predictions.jsonl").is_file():
        return {"stage1": run / "predictions.jsonl"}
    return {p.parent.name: p for p in sorted(run.glob("*/predictions.jsonl"))}


def paired(default: list[dict], option: list[dict]) -> dict:
    """Both modes' accuracies (exact intervals) on the samples both answered, their paired difference (option minus
    default, bootstrap over videos) and McNemar's exact test; `pairs` keeps the correctness lists for pooling."""
    a, b, videos = paired_correctness(option, default)   # a: the option, b: the default
    keep = ("k", "n", "accuracy", "ci_exact")
    return {"default": {k: v for k, v in accuracy_summary(b, videos).items() if k in keep},
            "option": {k: v for k, v in accuracy_summary(a, videos).items() if k in keep},
            "diff": {k: v for k, v in paired_bootstrap_diff(a, b, clusters=videos).items() if k in ("diff", "low", "high")}
            if a else None,
            "mcnemar": mcnemar_exact(a, b), "pairs": (a, b),
            "frames_lost": sum(int((r.get("cost") or {}).get("rgr_frames_lost") or 0) for r in option)}


def trade_table(seeds: dict[int, Path], default: str, option: str) -> dict:
    """{variant: {"per_seed": {seed: paired(...)}, "pooled_mcnemar": ...}} over the seeds' runs."""
    table: dict[str, dict] = {}
    for seed, tiny in seeds.items():
        mine, theirs = variant_files(tiny / default), variant_files(tiny / option)
        for variant in mine.keys() & theirs.keys():
            table.setdefault(variant, {"per_seed": {}})["per_seed"][str(seed)] = paired(
                read_records(mine[variant]), read_records(theirs[variant]))
    for row in table.values():
        row["pooled_mcnemar"] = pooled_mcnemar([s.pop("pairs") for s in row["per_seed"].values()])
    return dict(sorted(table.items()))


def main(workdir: str = "runs/seeds", seeds: list[int] = [0, 1, 2], json_out: str | None = None,  # noqa: B006
         run: bool = True, parallel: int = 2) -> dict:
    """Run what is missing, then pair each option with the default.

    Args:
        workdir: The seeds' folder of scripts/miniature_seeds.py (seed_<S>/runs/tiny under it).
        seeds: The seeds to use.
        json_out: Also write the result here (docs/measured/miniature_trades.json, rendered into docs/video.md).
        run: Run the missing evaluations (false: pair what is there).
        parallel: Seeds evaluated at once (each run on one torch thread).
    """
    tinies = {s: Path(workdir) / f"seed_{s}" / "runs" / "tiny" for s in seeds}
    missing = [f"seed {s}: {t}/sft/export" for s, t in tinies.items() if not (t / "sft" / "export").is_dir()]
    if missing:
        raise SystemExit(f"{'; '.join(missing)} missing: run scripts/miniature_seeds.py first")
    if run:
        with ThreadPoolExecutor(max_workers=max(1, parallel)) as pool:
            list(pool.map(run_missing, tinies.values()))
    result = {"seeds": seeds, "trades": {t: trade_table(tinies, d, o) for t, (d, o) in TRADES.items()}}
    text = json.dumps(result, indent=1) + "\n"
    if json_out:
        Path(json_out).write_text(text)
    return result


if __name__ == "__main__":
    CLI(main, as_positional=False)
