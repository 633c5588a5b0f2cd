"""HF export of the trained model: one folder that `AutoModelForImageTextToText.from_pretrained` and
`evaluate/run.py --model` load directly (weights consolidated from ZeRO-3 shards, LoRA merged, processor and chat
template saved beside them).
"""
from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path

import torch

log = logging.getLogger(__name__)


def gather_state_dict(trainer, module) -> dict[str, torch.Tensor] | None:
    """The module's full state dict on global rank 0 (None elsewhere). Collective under ZeRO-3: call on all ranks."""
    engine = getattr(trainer.strategy, "deepspeed_engine", None)
    if engine is not None and getattr(engine, "zero_optimization_stage", lambda: 0)() == 3:
        # gathers one parameter group at a time onto rank 0 (needs stage3_gather_16bit_weights_on_model_save)
        state = engine._zero3_consolidated_16bit_state_dict()
    else:
        state = {k: v.detach().cpu() for k, v in module.state_dict().items()}
    return state if trainer.global_rank == 0 else None


def _strip(state: dict, prefix: str) -> dict:
    return {k[len(prefix):]: v for k, v in state.items() if k.startswith(prefix)}


def export_hf(state: dict[str, torch.Tensor], model_path: str, out_dir: str | Path, *, lora: dict | None = None,
              processor_path: str | None = None) -> Path:
    """Write the HF folder from a SFTModule state dict (keys "model.*").

    The weights go into a freshly loaded base model (so config, generation config and dtype are the base model's);
    with `lora` (LoraConfig kwargs) the adapters are applied and merged first.
    """
    from cader.vlm.loading import load_model, load_processor

    out_dir = Path(out_dir)
    weights = _strip(state, "model.")
    model = load_model(model_path, dtype="auto")
    if lora:
        from peft import LoraConfig, get_peft_model

        model = get_peft_model(model, LoraConfig(**lora))
        missing, unexpected = model.load_state_dict(weights, strict=False)
        if unexpected or any("lora_" in k for k in missing):
            raise RuntimeError(f"LoRA state mismatch: missing {missing[:5]}, unexpected {unexpected[:5]}")
        model = model.merge_and_unload()
    else:
        missing, unexpected = model.load_state_dict(weights, strict=False)
        tied = {"lm_head.weight"} if model.config.get_text_config().tie_word_embeddings else set()
        if unexpected or set(missing) - tied:
            raise RuntimeError(f"state mismatch: missing {missing[:5]}, unexpected {unexpected[:5]}")
    tmp = out_dir.with_name(out_dir.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp, safe_serialization=True)
    # The export carries the Qwen3 thinking switch even when the base template (released Instruct) ignores it:
    # Stage 1 of CADER reads letters with thinking off, and a CoT-trained model otherwise opens with <think>.
    processor = load_processor(processor_path or model_path, thinking_switch=True)
    processor.save_pretrained(tmp)
    template = processor.chat_template
    if not (tmp / "chat_template.jinja").exists() and not (tmp / "chat_template.json").exists():
        (tmp / "chat_template.jinja").write_text(template)
    shutil.rmtree(out_dir, ignore_errors=True)
    os.replace(tmp, out_dir)
    log.info("exported HF model to %s", out_dir)
    return out_dir


def state_dict_from_checkpoint(path: str | Path) -> dict[str, torch.Tensor]:
    """Module state dict from a Lightning checkpoint file or a DeepSpeed checkpoint folder (ZeRO shards merged)."""
    path = Path(path)
    if path.is_dir():
        from deepspeed.utils.zero_to_fp32 import get_fp32_state_dict_from_zero_checkpoint

        state = get_fp32_state_dict_from_zero_checkpoint(str(path), tag="checkpoint")
        return {k.removeprefix("_forward_module."): v for k, v in state.items()}
    return torch.load(path, map_location="cpu", weights_only=False)["state_dict"]
