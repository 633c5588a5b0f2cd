"""B4: the cost of CADER `full` against `uniform_stage2` (every sample through Stage 2), on the quickstart's outputs.

`bash scripts/quickstart.sh` runs both variants on the same synthetic test samples with the trained export and the
calibrated T and tau; this reads their predictions and reports, per sample, model calls ("forwards") and decoded
frames of each, full's cost as a fraction of uniform's (goal: at most 0.6x), and both accuracies with exact 95 %
intervals and McNemar's test on the pairs, so the saving is read at the same accuracy (Table 3's comparison).

    python scripts/bench/cader_cost.py [--root runs/tiny] [--benchmark synthetic]
"""

from __future__ import annotations

from pathlib import Path

from cader.contracts.jsonl import read_jsonl
from cader.evaluate.trajectory_stats import cost_comparison
from cader.scripts.bench.harness import REPO, emit
from jsonargparse import CLI


def main(root: str = str(REPO / "runs" / "tiny"), benchmark: str = "synthetic", goal: float = 0.6) -> dict:
    """Compare the two variants' predictions under ROOT/eval/{full,uniform_stage2}/BENCHMARK/.

    Args:
        root: The quickstart's output folder (WORKDIR/runs/tiny).
        benchmark: Benchmark both variants ran on.
        goal: Largest acceptable fraction of uniform's forwards and decoded frames.
    """
    paths = {v: Path(root) / "eval" / v / benchmark / "predictions.jsonl" for v in ("full", "uniform_stage2")}
    missing = [str(p) for p in paths.values() if not p.exists()]
    if missing:
        raise FileNotFoundError(f"no predictions at {', '.join(missing)}: run `bash scripts/quickstart.sh` first")
    result = cost_comparison(read_jsonl(paths["full"]), read_jsonl(paths["uniform_stage2"]), goal=goal)
    result["inputs"] = {k: str(p) for k, p in paths.items()}
    if result["n"] == 0:
        raise ValueError(f"{paths['full']} and {paths['uniform_stage2']} share no sample")
    return emit(result)


if __name__ == "__main__":
    CLI(main, as_positional=False)
