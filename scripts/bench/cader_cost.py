"""P4: cost of selective Stage 2 (CADER `full`) vs `uniform_stage2` (every sample through Stage 2), same run.

Both variants run on the same samples with the same backend instance; per-sample model calls ("forwards") and
frames decoded are averaged and their uniform/full ratio reported (the saving from early exit, Table 3). Defaults:
the tiny random Qwen3-VL and the synthetic benchmark, built in a temp folder. The tiny model's margins are near 0,
so set --tau low (e.g. 0.002) to see exits; on a real model use the calibrated tau.

    python scripts/bench/cader_cost.py [--model DIR] [--data_root DIR] [--benchmark synthetic] [--tau 0.97]
"""

from __future__ import annotations

import json
import statistics
import tempfile
from pathlib import Path

from cader.evaluate.backends.hf import HFBackend
from cader.evaluate.benchmarks import load_benchmark, video_path
from cader.evaluate.method.config import CaderConfig
from cader.evaluate.runner import process_sample
from jsonargparse import CLI


def main(model: str | None = None, data_root: str | None = None, benchmark: str = "synthetic",
         tau: float = 0.97, temperature: float = 2.0, limit: int = 8, max_frames: int = 16, max_pixels: int = 2048) -> dict:  # fmt: skip
    tmp = Path(tempfile.mkdtemp(prefix="cader_cost_"))
    if model is None:
        from cader.vlm.tiny import make_tiny_model

        model = str(make_tiny_model(tmp / "model"))
    if data_root is None:
        from cader.evaluate.benchmarks.synth_data import make_synthetic_data

        make_synthetic_data(tmp / "data", n_train=4, n_images=1, n_tool=1, n_eval=limit, n_heldout=2)
        data_root = str(tmp / "data" / "eval")
    backend = HFBackend(model)
    samples, _ = load_benchmark(benchmark, data_root)
    samples = samples[:limit]
    result = {"benchmark": benchmark, "n": len(samples), "tau": tau, "temperature": temperature}
    for variant in ("full", "uniform_stage2"):
        cfg = CaderConfig(variant=variant, tau=tau, temperature=temperature, max_frames=max_frames, max_pixels=max_pixels,
                          max_new_tokens_propose=12, max_new_tokens_answer=8)  # fmt: skip
        records = [process_sample(s, video_path(s, data_root), backend, backend, cfg) for s in samples]
        result[variant] = {
            key: statistics.mean(r["cost"][key] for r in records)
            for key in ("forwards", "frames_decoded", "prompt_tokens", "seconds")
        }
        result[variant]["stage2_rate"] = statistics.mean(r["route"] == "stage2" for r in records)
        result[variant]["failures"] = sum(r["error"] is not None for r in records)
    result["ratio_uniform_over_full"] = {
        key: round(result["uniform_stage2"][key] / result["full"][key], 3) if result["full"][key] else None
        for key in ("forwards", "frames_decoded", "seconds")
    }
    print(json.dumps(result, indent=2))
    return result


if __name__ == "__main__":
    CLI(main, as_positional=False)
