"""B13: evaluation samples/s with the vLLM backend against the HF backend, same CPU, same records.

    python scripts/bench/vllm_speed.py [--run runs/tiny] [--limit 32] [--concurrency 4]

On the quickstart's outputs (`--run`: its SFT export, synthetic data and calibration), `vllm_parity.py records` runs
`evaluate/run.py --backend hf` and `--backend vllm --concurrency N` on the same test samples: the records must be
equal (letters, routes, proposal windows, accepted window, fallbacks, errors), and the row is vLLM's samples/s over
HF's, each from its first sample's start to its last record (model loading left out). No goal on the ratio on a CPU:
with a 1-MB model vLLM's per-call overhead is of the order of the model itself; the row is there to be read next to
the same bench on a GPU.
"""

from __future__ import annotations

from pathlib import Path

from cader.scripts.bench.vllm_records import records
from jsonargparse import CLI


def main(run: str = "runs/tiny", limit: int = 32, concurrency: int = 4, out: str = "runs/bench_vllm_speed",
         json_out: str | None = None) -> dict:
    """
    Args:
        run: A quickstart run folder (runs/tiny): its sft/export, data/eval and calibration/calibration.json.
        limit: Synthetic test samples each backend evaluates.
        concurrency: Samples in flight in the vLLM run (the HF run takes one at a time).
        out: Where the two runs write their predictions.
        json_out: Also write the result here.
    """
    root = Path(run)
    needed = [root / "sft" / "export" / "config.json", root / "data" / "eval", root / "calibration" / "calibration.json"]
    missing = [str(p) for p in needed if not p.exists()]
    if missing:
        raise FileNotFoundError(f"{', '.join(missing)} missing: run bash scripts/quickstart.sh first")
    verifier = root / "verifier"   # the miniature's own verifier (older runs have none: the export verifies)
    result = records(str(root / "sft" / "export"), str(root / "data" / "eval"), out, limit=limit,
                     concurrency=concurrency, json_out=json_out,
                     extra_args=f"--calibration {root / 'calibration' / 'calibration.json'}",
                     verifier=str(verifier) if (verifier / "config.json").is_file() else None)
    result["same_records"] = not result["failures"]
    return result


if __name__ == "__main__":
    CLI(main, as_positional=False)
