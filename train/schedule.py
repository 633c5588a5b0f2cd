"""Learning-rate schedule of the SFT recipe: linear warmup over ceil(warmup_ratio * total) optimizer steps, then
the decay named by `lr_scheduler_type` (paper Table 6: warmup ratio 0.1, cosine). The names and shapes are those of
transformers' get_scheduler, which LLaMA-Factory's `lr_scheduler_type` selects: "cosine" (half a cosine to zero),
"linear" (straight line to zero), "constant_with_warmup" (flat after warmup). Pure functions; module.py wraps them in
LambdaLR.
"""
from __future__ import annotations

import math


def warmup_steps(total_steps: int, warmup_ratio: float) -> int:
    return math.ceil(total_steps * warmup_ratio)


SCHEDULERS = ("cosine", "linear", "constant_with_warmup")


def lr_factor(step: int, total_steps: int, warmup: int, kind: str = "cosine") -> float:
    """Multiplier of the base lr at optimizer step `step` (0-based: the lr used by the (step+1)-th update)."""
    if kind not in SCHEDULERS:
        raise ValueError(f"unknown lr_scheduler_type {kind!r}; expected one of {SCHEDULERS}")
    if step < warmup:
        return step / max(1, warmup)
    if kind == "constant_with_warmup":
        return 1.0
    progress = min(1.0, (step - warmup) / max(1, total_steps - warmup))
    if kind == "linear":
        return max(0.0, 1.0 - progress)
    return max(0.0, 0.5 * (1.0 + math.cos(math.pi * progress)))


def optimizer_steps(num_batches: int, accumulate: int, epochs: int = 1, world_size: int = 1) -> int:
    """Real optimizer steps: per-rank batches per epoch / accumulation (a partial last window still steps)."""
    per_rank = math.ceil(num_batches / world_size)
    return max(1, math.ceil(per_rank / accumulate) * epochs)
