"""B16: peak memory of a Stage-1 scoring forward at the 8B's widths, 8k-token prompts: the HF backend's scoring path
(no KV cache, right padding without a mask, a token budget per forward) against today's (left-padded prompts in one
forward with a dense attention mask, the KV cache built and thrown away).

The model is Qwen3-VL-8B's language model at its real widths (`cader.vlm.flops.QWEN3_VL_8B_TEXT`: hidden 4096,
32/8 heads, head_dim 128, intermediate 12,288) with the depth cut to `layers`, a small vision tower (one block,
width 64, projecting to 4096: its cost is not what this measures) and the tiny tokenizer's vocabulary (the scoring
forward projects one position onto the vocabulary either way), bf16. Each way runs in a fresh process
(`harness.run_fresh`): peak RSS growth over the call (the kernel's high-water mark, reset just before it), prompts
encoded inside the call as the backend does, after one short warm-up call of the same way.

    python scripts/bench/scoring_memory.py [--tokens 8192] [--prompts 2] [--layers 1]

Headline: peak growth new / today for `prompts` Stage-1 prompts in flight (what `--concurrency 2` hands the backend
in one call); one prompt alone (the cache alone) is reported beside it, with the cache arithmetic at 36 layers.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from cader.scripts.bench.harness import PeakRSS, emit, run_fresh, status_kib, write_qwen3vl

WAYS = ("today", "new")
LETTERS = ["A", "B", "C", "D"]


def build_model(out_dir: str, layers: int = 1) -> str:
    """The 8B's text widths, `layers` deep, a small vision tower, the tiny tokenizer; saved in bf16."""
    import torch
    from cader.vlm.flops import QWEN3_VL_8B_TEXT as T

    text = {"hidden_size": T.hidden, "intermediate_size": T.intermediate, "num_hidden_layers": layers,
            "num_attention_heads": T.heads, "num_key_value_heads": T.kv_heads, "head_dim": T.head_dim}
    vision = {"depth": 1, "hidden_size": 64, "intermediate_size": 128, "num_heads": 2, "out_hidden_size": T.hidden,
              "deepstack_visual_indexes": [0]}
    # [24, 20, 20]: the released 8B's split of head_dim / 2
    write_qwen3vl(out_dir, text, vision, [24, 20, 20], torch.bfloat16)
    return out_dir


def stage1_prompts(n_prompts: int, tokens: int) -> list:
    """`n_prompts` Stage-1-like prompts of about `tokens` tokens each: 256x256 frames (64 video tokens per temporal
    pair, ~72 with its timestamp and vision markers), questions of different lengths so a shared forward pads."""
    import numpy as np
    from cader.evaluate.backends.base import Prompt
    from cader.vlm.video import Frames

    n_frames = 2 * max(1, (tokens - 120) // 72)
    rng = np.random.default_rng(0)
    prompts = []
    for k in range(n_prompts):
        video = Frames(rng.integers(0, 255, (n_frames, 256, 256, 3), dtype=np.uint8), np.arange(n_frames) * 1.0,
                       np.arange(n_frames) * 30, 30.0)
        question = "Which event comes first in the video?" + " Think about it." * k
        options = "\n".join(f"{x}. option {x}" for x in LETTERS)
        prompts.append(Prompt(system="You answer questions about videos.", user=f"{question}\n{options}",
                              video=video))
    return prompts


def today_last_logits(backend, prompts) -> list:
    """The scoring path before B16 (evaluate/backends/hf.py at the parent commit): `batch_size` prompts per forward,
    left-padded with an attention mask (transformers builds a dense (B, 1, L, L) one), `use_cache` left on."""
    import torch

    out = []
    with torch.inference_mode():
        for start in range(0, len(prompts), backend.batch_size):
            items = [backend._inputs(p) for p in prompts[start:start + backend.batch_size]]
            batch = items[0] if len(items) == 1 else backend._left_padded(items)
            logits = backend.model(**batch, logits_to_keep=1).logits[:, -1].float()
            out += [(logits[i], int(x["input_ids"].shape[1])) for i, x in enumerate(items)]
    return out


def measure(way: str, model_dir: str, n_prompts: int, tokens: int, threads: int = 2) -> dict:
    """One way's peak RSS growth over one scoring call of `n_prompts` prompts (run in a fresh process).

    way: today or new.
    model_dir: the model `build_model` saved.
    n_prompts: prompts in the call (all in one forward today, with `batch_size` = n_prompts).
    tokens: about how many tokens each prompt has.
    threads: torch threads.
    """
    import gc

    import torch
    from cader.evaluate.backends.hf import HFBackend

    if way not in WAYS:
        raise ValueError(f"way must be one of {WAYS}, got {way!r}")
    torch.set_num_threads(threads)
    backend = HFBackend(model_dir, dtype="bfloat16", batch_size=n_prompts, attn_implementation="sdpa")
    prompts = stage1_prompts(n_prompts, tokens)
    ids = [backend.token_id(x) for x in LETTERS]
    call = today_last_logits if way == "today" else HFBackend._last_logits
    # one short call first: oneDNN packs the bf16 weights on the first matmul (a one-time copy of the layer's size),
    # which is neither way's cost per call
    call(backend, stage1_prompts(1, 200))
    gc.collect()
    peak = PeakRSS()
    if not peak.start():
        raise RuntimeError("cannot reset the peak RSS mark (/proc/self/clear_refs)")
    before = status_kib("VmRSS") * 1024
    out = call(backend, prompts)
    return {"way": way, "peak_growth_bytes": peak.stop() - before, "prompt_tokens": [n for _, n in out],
            "letter_logits": [[float(logits[i]) for i in ids] for logits, _ in out]}


def cache_bytes_per_token(layers: int, kv_heads: int = 8, head_dim: int = 128, bytes_per_value: int = 2) -> int:
    """KV cache of one token: keys and values of every layer (the 8B in bf16: 36 x 2 x 8 x 128 x 2 = 147,456)."""
    return layers * 2 * kv_heads * head_dim * bytes_per_value


def main(tokens: int = 8192, prompts: int = 2, layers: int = 1, json_out: str | None = None) -> dict:
    """Measure B16 and return {"ratio": new / today peak growth, ...}.

    Args:
        tokens: About how many tokens each Stage-1 prompt has.
        prompts: Prompts in one scoring call (one forward today).
        layers: Text layers of the real-width model.
        json_out: Also write the result here.
    """
    with tempfile.TemporaryDirectory(prefix="scoring_memory_") as tmp:
        model_dir = build_model(str(Path(tmp) / "model"), layers)
        runs = {(way, n): run_fresh("cader.scripts.bench.scoring_memory:measure",
                                    {"way": way, "model_dir": model_dir, "n_prompts": n, "tokens": tokens})
                for n in sorted({1, prompts}) for way in WAYS}
    growth = {f"{way}_{n}": runs[way, n]["peak_growth_bytes"] for way, n in runs}
    diff = max(abs(a - b) for n in sorted({1, prompts})
               for ra, rb in zip(runs["today", n]["letter_logits"], runs["new", n]["letter_logits"])
               for a, b in zip(ra, rb))
    lengths = runs["new", prompts]["prompt_tokens"]
    result = {
        "ratio": growth[f"new_{prompts}"] / growth[f"today_{prompts}"],
        "ratio_one_prompt": growth["new_1"] / growth["today_1"],
        "peak_growth_mib": {k: round(v / 2**20, 1) for k, v in growth.items()},
        "prompt_tokens": lengths,
        "layers": layers,
        "max_letter_logit_diff": diff,
        # what the cut depth leaves out: the cache today's path builds grows with depth, the activations do not
        "cache_mib_per_prompt_at_36_layers": round(cache_bytes_per_token(36) * max(lengths) / 2**20, 1),
        "cache_mib_per_prompt_measured_depth": round(cache_bytes_per_token(layers) * max(lengths) / 2**20, 1),
    }
    return emit(result, json_out)


if __name__ == "__main__":
    from jsonargparse import CLI

    CLI(main, as_positional=False)
