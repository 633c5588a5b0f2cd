"""DeepSpeed strategies for SFT: the shipped ZeRO configs by name, and a CPU variant (gloo) for tests.

Lightning's DeepSpeedStrategy refuses any accelerator but CUDA; DeepSpeed itself runs ZeRO-2/3 on CPU over gloo
(DESIGN.md section 5), so `CPUDeepSpeedStrategy` only lifts Lightning's check and picks gloo. Micro-batch size,
gradient accumulation, clipping and bf16 are filled in by Lightning from the Trainer/DataLoader, so the JSON files
carry only the ZeRO settings.
"""
from __future__ import annotations

import json
import os
from datetime import timedelta
from pathlib import Path

import torch
from lightning.fabric.utilities.seed import reset_seed
from lightning.pytorch.strategies import DDPStrategy, DeepSpeedStrategy

CONFIG_DIR = Path(__file__).resolve().parents[1] / "configs" / "deepspeed"
NAMED_CONFIGS = ("zero2", "zero3", "zero3_offload")


def load_deepspeed_config(name_or_path: str) -> dict:
    """`zero2`, `zero3`, `zero3_offload` (configs/deepspeed/<name>.json) or a path to a JSON file."""
    path = CONFIG_DIR / f"{name_or_path}.json" if name_or_path in NAMED_CONFIGS else Path(name_or_path)
    if not path.is_file():
        raise FileNotFoundError(f"DeepSpeed config {name_or_path!r} not found (named: {NAMED_CONFIGS})")
    return json.loads(path.read_text())


class SFTDeepSpeedStrategy(DeepSpeedStrategy):
    """DeepSpeedStrategy configured from a shipped ZeRO config by name (`zero_config: zero3`).

    `pg_timeout_minutes` bounds every collective, the barrier after `prepare_data` included: there local rank 0
    plans the whole mix (token budgets, media probes) while the other ranks wait, and a cold plan of the full
    228.8K-row mix can outlast torch's 30-minute default. None keeps that default.
    """

    def __init__(self, zero_config: str = "zero3", pg_timeout_minutes: float | None = None, **kwargs):
        self.zero_config = zero_config
        if pg_timeout_minutes is not None:
            if not pg_timeout_minutes > 0:
                raise ValueError(f"pg_timeout_minutes must be positive, got {pg_timeout_minutes}")
            kwargs["timeout"] = timedelta(minutes=pg_timeout_minutes)
        super().__init__(config=load_deepspeed_config(zero_config), **kwargs)


class CPUDeepSpeedStrategy(SFTDeepSpeedStrategy):
    """ZeRO on CPU processes over gloo (tests and laptops only; far too slow for real training)."""

    def __init__(self, zero_config: str = "zero3", **kwargs):
        os.environ.setdefault("DS_ACCELERATOR", "cpu")
        kwargs.setdefault("process_group_backend", "gloo")
        super().__init__(zero_config=zero_config, **kwargs)

    def setup_environment(self) -> None:
        DDPStrategy.setup_environment(self)     # skips DeepSpeedStrategy's CUDA-only check

    @property
    def root_device(self) -> torch.device:
        # DeepSpeed reads `device_rank = root_device.index` and compares it with 0; CPU devices have index None
        return torch.device("cpu", 0)

    def setup_distributed(self) -> None:
        # as DeepSpeedStrategy, minus the check that CUDA device indices match local ranks (CPU devices have none)
        reset_seed()
        self.set_world_ranks()
        self._init_deepspeed_distributed()
