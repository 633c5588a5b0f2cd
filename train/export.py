"""HF export of the trained model: one folder that `AutoModelForImageTextToText.from_pretrained` and
`evaluate/run.py --model` load directly (weights consolidated from ZeRO-3 shards, LoRA merged, processor and chat
template saved beside them).
"""
from __future__ import annotations

import json
import logging
import os
import shutil
from pathlib import Path

import torch

log = logging.getLogger(__name__)

EXPORT_METADATA = "cader_export.json"   # what made the export; inside the folder, so it moves with the weights


def gather_state_dict(trainer, module) -> dict[str, torch.Tensor] | None:
    """The module's full state dict on global rank 0 (None elsewhere). Collective under ZeRO-3: call on all ranks."""
    from cader.train.strategies import is_zero3

    if is_zero3(trainer.strategy):
        return gather_partitioned_state_dict(module, rank0=trainer.global_rank == 0)
    if trainer.global_rank != 0:
        return None
    return {k: v.detach().cpu() for k, v in module.state_dict().items()}


def gather_partitioned_state_dict(root, *, rank0: bool) -> dict[str, torch.Tensor] | None:
    """Full tensors of a ZeRO-3 partitioned module on rank 0, gathered one submodule at a time (every rank holds
    one submodule's full parameters at a time; only rank 0 keeps copies). Tied parameters keep one tensor."""
    import deepspeed

    state: dict[str, torch.Tensor] | None = {} if rank0 else None
    copies: dict[int, torch.Tensor] = {}          # ds_id -> rank 0's copy, so tied parameters share it
    for prefix, sub in root.named_modules():
        params = list(sub.named_parameters(recurse=False))
        with deepspeed.zero.GatheredParameters([p for _, p in params], modifier_rank=None):
            if not rank0:
                continue
            prefix = f"{prefix}." if prefix else ""
            for name, param in params:
                key = getattr(param, "ds_id", id(param))
                if key not in copies:   # a copy: the gathered buffer is freed (or reused) when the context exits
                    copies[key] = param.detach().to("cpu", copy=True)
                state[prefix + name] = copies[key]
            for name, buf in sub.named_buffers(recurse=False):
                if name not in sub._non_persistent_buffers_set:
                    state[prefix + name] = buf.detach().to("cpu", copy=True)
    return state


def _strip(state: dict, prefix: str) -> dict:
    return {k[len(prefix):]: v for k, v in state.items() if k.startswith(prefix)}


def empty_base_model(model_path: str):
    """The base model's architecture on the meta device (no weights read): config, generation config and dtype are
    the base model's."""
    from cader.train.strategies import local_model_folder, stored_dtype
    from transformers import AutoConfig, AutoModelForImageTextToText, GenerationConfig

    folder = local_model_folder(model_path)
    config = AutoConfig.from_pretrained(folder)
    with torch.device("meta"):
        model = AutoModelForImageTextToText.from_config(config, dtype=stored_dtype(folder, config))
    if (folder / "generation_config.json").is_file():
        model.generation_config = GenerationConfig.from_pretrained(folder)
    return model


def _assign(model, weights: dict[str, torch.Tensor]) -> tuple[list[str], list[str]]:
    """Put `weights` into `model` in place of its (meta) tensors, cast to the tensor's dtype there: no copy when
    the dtypes agree. Returns (missing, unexpected) keys."""
    own = model.state_dict()
    cast = {k: v.to(own[k].dtype) if k in own else v for k, v in weights.items()}
    missing, unexpected = model.load_state_dict(cast, strict=False, assign=True)
    return list(missing), list(unexpected)


def _own_merge_targets(peft_model) -> None:
    """Give every LoRA layer's base weight a tensor of its own before the merge.

    The state dict's tensors may share storage with the training module's parameters (one process, no ZeRO-3:
    `module.state_dict()` detaches without copying, and `_assign` adopts same-dtype tensors as they are). peft up
    to 0.21 merged into a new tensor (`weight.data = merged`), but 0.22 merges in place even with safe_merge
    (`weight.data.copy_(merged)`), which wrote the update into the live module: its base then held the update and
    its adapters added it a second time. A copy per adapted weight keeps the export independent of how a peft
    release merges, at the cost of one copy of the adapted weights while the export is written."""
    from peft.tuners.lora import LoraLayer

    for layer in peft_model.modules():
        if isinstance(layer, LoraLayer):
            base = layer.get_base_layer()
            base.weight = torch.nn.Parameter(base.weight.detach().clone(), requires_grad=False)


def export_metadata(model_path: str, lora: dict | None, extra: dict | None = None) -> dict:
    """The cader_export.json block: base model, LoRA settings, torch's thread count at export time, the caller's
    `extra` (global step, the --num_threads asked for) and the provenance block (code, packages, command)."""
    from cader.contracts.provenance import collect_provenance

    return {"base_model": model_path, "lora": lora, "torch_num_threads": torch.get_num_threads(),
            **(extra or {}), "provenance": collect_provenance()}


def export_hf(state: dict[str, torch.Tensor], model_path: str, out_dir: str | Path, *, lora: dict | None = None,
              processor_path: str | None = None, metadata: dict | None = None) -> Path:
    """Write the HF folder from a SFTModule state dict (keys "model.*").

    The weights are assigned into the base model's architecture built on the meta device, so the export holds one
    copy of the weights (the state dict's, cast to the base dtype) and never reads the base checkpoint; config,
    generation config and dtype are the base model's. With `lora` (LoraConfig kwargs) the adapters are applied and
    merged first. `cader_export.json` in the folder records `metadata` with the provenance block
    (`export_metadata`).
    """
    from cader.vlm.loading import load_processor

    out_dir = Path(out_dir)
    weights = _strip(state, "model.")
    model = empty_base_model(model_path)
    if lora:
        from peft import LoraConfig, get_peft_model

        model = get_peft_model(model, LoraConfig(**lora))
        missing, unexpected = _assign(model, weights)
        if unexpected or missing:
            raise RuntimeError(f"LoRA state mismatch: missing {missing[:5]}, unexpected {unexpected[:5]}")
        _own_merge_targets(model)
        model = model.merge_and_unload(safe_merge=True)   # safe_merge: refuses an update that is not finite
    else:
        missing, unexpected = _assign(model, weights)
        tied = {"lm_head.weight"} if model.config.get_text_config().tie_word_embeddings else set()
        if unexpected or set(missing) - tied:
            raise RuntimeError(f"state mismatch: missing {missing[:5]}, unexpected {unexpected[:5]}")
    model.tie_weights()          # a tied lm_head still points at the meta tensor after the assignment
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
    (tmp / EXPORT_METADATA).write_text(json.dumps(export_metadata(model_path, lora, metadata), indent=1))
    shutil.rmtree(out_dir, ignore_errors=True)
    os.replace(tmp, out_dir)
    log.info("exported HF model to %s", out_dir)
    return out_dir
