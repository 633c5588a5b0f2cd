"""GPU check: Stage 1 and the verifier through the HF and the vLLM backend on the same model give the same scores.

    python scripts/bench/vllm_parity.py --model runs/tiny/sft/export --data_root runs/tiny/data/eval

Needs a GPU and `pip install -e ".[vllm]"`; run it whenever a GPU is lent. For each of the first `--limit` samples of
`--benchmark` it builds the Stage-1 prompt (C.1, thinking off) and the verifier prompt (C.3) on the Stage-1 frames,
asks both backends, and prints the largest differences: Stage-1 margin at T = 1 (vLLM's restricted log-probabilities
are the logits minus one shared constant, so margins must agree), the top letter, and P_yes. bf16 kernels differ
between the two engines, so agreement is checked within `--tolerance`, not exactly.
"""

from __future__ import annotations

import json
import sys

import numpy as np
from jsonargparse import CLI


def main(model: str, data_root: str, benchmark: str = "synthetic", limit: int = 16, max_frames: int = 32,
         max_pixels: int = 2048, dtype: str = "bf16", tolerance: float = 0.02) -> dict:
    """Compare the two backends; exit status 1 when a difference exceeds the tolerance.

    Args:
        model: An HF folder (e.g. the tiny SFT export).
        data_root: --data_root of evaluate/run.py.
        benchmark: A benchmark name of the registry.
        limit: Samples compared.
        max_frames: Stage-1 frame cap.
        max_pixels: Per-frame pixel cap.
        dtype: Both backends' dtype.
        tolerance: Largest allowed |margin difference| and |P_yes difference|.
    """
    import torch
    from cader.calibrate.margin import stage1_confidence
    from cader.evaluate.backends.base import Prompt
    from cader.evaluate.backends.hf import HFBackend
    from cader.evaluate.backends.vllm import VLLMBackend, VLLMEngineConfig
    from cader.evaluate.benchmarks import load_benchmark, video_path
    from cader.evaluate.method.prompts import stage1_prompt, verifier_prompt
    from cader.vlm.video import VideoReader

    if not torch.cuda.is_available():
        print("vllm_parity needs a GPU", file=sys.stderr)
        sys.exit(2)
    samples, _ = load_benchmark(benchmark, data_root)
    samples = samples[:limit]
    hf = HFBackend(model, dtype=dtype, device="cuda")
    vllm = VLLMBackend(model, dtype=dtype, engine=VLLMEngineConfig(gpu_memory_utilization=0.4, enforce_eager=True))
    stage1, verify = [], []
    for s in samples:
        frames = VideoReader(video_path(s, data_root)).sample_uniform(1.0, max_frames=max_frames,
                                                                      max_pixels=max_pixels)
        system, user = stage1_prompt(s.question, s.options, s.letters)
        stage1.append((Prompt(user, system=system, video=frames), s.letters))
        system, user = verifier_prompt(s.question, s.options, s.letters)
        verify.append(Prompt(user, system=system, video=frames))
    margins, tops, p_yes = [], [], []
    for prompt, letters in stage1:
        (a,) = hf.letter_logits([prompt], letters)
        (b,) = vllm.letter_logits([prompt], letters)
        ca, cb = stage1_confidence(a.logits, 1.0), stage1_confidence(b.logits, 1.0)
        margins.append(abs(ca.margin - cb.margin))
        tops.append(ca.index == cb.index)
    for a, b in zip(hf.yes_no(verify), vllm.yes_no(verify)):
        p_yes.append(abs(a.p_yes - b.p_yes))
    result = {"n": len(samples), "max_margin_diff": float(np.max(margins)), "top_letter_agreement": float(np.mean(tops)),
              "max_p_yes_diff": float(np.max(p_yes)), "tolerance": tolerance}
    print(json.dumps(result, indent=2))
    if result["max_margin_diff"] > tolerance or result["max_p_yes_diff"] > tolerance:
        sys.exit(1)
    return result


if __name__ == "__main__":
    CLI(main, as_positional=False)
