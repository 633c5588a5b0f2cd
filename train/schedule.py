"""Learning-rate schedule of the SFT recipe: linear warmup over ceil(warmup_ratio * total) optimizer steps, then
the decay named by `lr_scheduler_type` (paper Table 6: warmup ratio 0.1, cosine). The schedules are transformers'
own `get_scheduler`, the one LLaMA-Factory's `lr_scheduler_type` selects: "cosine" (half a cosine to zero),
"linear" (straight line to zero), "constant_with_warmup" (flat after warmup). Here: the step counts they need.
"""
from __future__ import annotations

import math

import torch

SCHEDULERS = ("cosine", "linear", "constant_with_warmup")


def warmup_steps(total_steps: int, warmup_ratio: float) -> int:
    return math.ceil(total_steps * warmup_ratio)


def optimizer_steps(num_batches: int, accumulate: int, epochs: int = 1, world_size: int = 1) -> int:
    """Real optimizer steps: per-rank batches per epoch / accumulation (a partial last window still steps)."""
    per_rank = math.ceil(num_batches / world_size)
    return max(1, math.ceil(per_rank / accumulate) * epochs)


def make_scheduler(optimizer: torch.optim.Optimizer, kind: str, total_steps: int, warmup: int):
    """transformers' `kind` schedule (a LambdaLR stepped once per optimizer step) over `total_steps` with
    `warmup` linear warmup steps. Raises ValueError naming the setting for a kind outside SCHEDULERS."""
    from transformers import get_scheduler

    if kind not in SCHEDULERS:
        raise ValueError(f"unknown lr_scheduler_type {kind!r}; expected one of {SCHEDULERS}")
    return get_scheduler(kind, optimizer, num_warmup_steps=warmup, num_training_steps=total_steps)
