"""B7: samples in flight. `--concurrency 8` against 1 on the same samples, the tiny Qwen3-VL behind a wrapper that adds
a fixed latency to every model call (standing in for a GPU forward, whose cost barely grows with the batch).

    python scripts/bench/concurrency.py [--n 16] [--latency 0.2] [--concurrency 8] [--num_threads 1]

Prints the wall times, the ratio (goal >= 5x), the inner model calls of each run, the load average before and after,
and checks that both runs wrote the same records in the same order (timings aside).

`--num_threads`: torch's intra-op threads for this process (0: torch's default, every core). The tiny forward stands
in for a GPU forward; with an OpenMP team of every core it waits at each barrier for a thread the scheduler parked
whenever anything else runs on the machine: on 2 busy cores the sequential run's 32 forwards took 28 s of compute
with 2 threads and 2.9 s with 1, which made the ratio a measure of the machine's load.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

from cader.scripts.bench.harness import emit, load_average, shade_samples
from jsonargparse import CLI

# the tiny model's frames, pixels and generated tokens on the shade samples (B7, B8)
TINY_BUDGET = {"max_frames": 8, "max_pixels": 2048, "max_new_tokens_propose": 8, "max_new_tokens_answer": 8}


def same_records(a: list[dict], b: list[dict], atol: float = 1e-4) -> bool:
    """Same samples in the same order with the same decisions; Stage-1 logits equal within `atol` (a batched forward
    sums in another order than a single one)."""
    import numpy as np

    if [r["sample_id"] for r in a] != [r["sample_id"] for r in b]:
        return False
    for x, y in zip(a, b):
        if (x["route"], x["pred"], x["stage2"], x["error"]) != (y["route"], y["pred"], y["stage2"], y["error"]):
            return False
        if not np.allclose(x["stage1"]["logits"], y["stage1"]["logits"], atol=atol):
            return False
    return True


def main(n: int = 16, latency: float = 0.2, concurrency: int = 8, num_threads: int = 1) -> dict:
    """Run the same samples one at a time and `concurrency` at a time.

    Args:
        n: Samples.
        latency: Seconds added to every model call.
        concurrency: Samples in flight in the second run.
        num_threads: torch intra-op threads (module docstring); 0 keeps torch's default.
    """
    import torch

    if num_threads > 0:
        torch.set_num_threads(num_threads)
    load_before = load_average()
    from cader.contracts.jsonl import read_jsonl
    from cader.dev.scripted import FixedLatencyBackend
    from cader.dev.tiny import make_tiny_model
    from cader.evaluate.backends.hf import HFBackend
    from cader.evaluate.method.config import CaderConfig
    from cader.evaluate.runner import run_samples

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        model = make_tiny_model(root / "model")
        samples = shade_samples(root, n)
        # every sample takes the whole Stage-2 path (uniform Stage 2), so each makes several calls
        cfg = CaderConfig(variant="uniform_stage2", **TINY_BUDGET)
        hf = HFBackend(str(model), dtype="float32", batch_size=concurrency)
        result = {}
        for label, level in (("sequential", 1), ("concurrent", concurrency)):
            backend = FixedLatencyBackend(hf, latency)
            out = root / f"{label}.jsonl"
            start = time.perf_counter()
            run_samples(samples, root, out, backend, backend, cfg, video_path=lambda s, r: r / s.video,
                        progress=False, concurrency=level)
            result[label] = {"seconds": round(time.perf_counter() - start, 2), "model_calls": backend.calls}
        runs = [read_jsonl(root / f"{x}.jsonl") for x in ("sequential", "concurrent")]
    result["same_records"] = same_records(*runs)
    result["ratio"] = round(result["sequential"]["seconds"] / result["concurrent"]["seconds"], 2)
    result["goal"] = ">= 5x"
    result.update(torch_threads=torch.get_num_threads(), load_before=load_before, load_after=load_average())
    return emit(result)


if __name__ == "__main__":
    CLI(main, as_positional=False)
