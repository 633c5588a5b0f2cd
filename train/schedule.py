"""Learning-rate schedule of the SFT recipe: linear warmup over ceil(warmup_ratio * total) optimizer steps, then
cosine decay to zero (paper Table 6: warmup ratio 0.1, cosine). Pure functions; module.py wraps them in LambdaLR.
"""
from __future__ import annotations

import math


def warmup_steps(total_steps: int, warmup_ratio: float) -> int:
    return math.ceil(total_steps * warmup_ratio)


def lr_factor(step: int, total_steps: int, warmup: int) -> float:
    """Multiplier of the base lr at optimizer step `step` (0-based: the lr used by the (step+1)-th update)."""
    if step < warmup:
        return step / max(1, warmup)
    progress = (step - warmup) / max(1, total_steps - warmup)
    return max(0.0, 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress))))


def optimizer_steps(num_batches: int, accumulate: int, epochs: int = 1, world_size: int = 1) -> int:
    """Real optimizer steps: per-rank batches per epoch / accumulation (a partial last window still steps)."""
    per_rank = math.ceil(num_batches / world_size)
    return max(1, math.ceil(per_rank / accumulate) * epochs)
