"""Qwen3-VL-8B-shaped SFT steps: tokens/s, peak memory and MFU (language model and vision tower counted apart).

The model is built from the released 8B sizes with random weights (no download) and trained on one synthetic
video+text sequence of `--seq_len` tokens (default 10,240, the paper's max length): 256x256-px frames (65,536 px,
App. A), i.e. 64 merged visual tokens per temporal pair, filling the sequence except for a text prompt and target.
On a GPU run with `--deepspeed zero3` (bf16, ZeRO-3; `zero3_offload` moves optimizer state to CPU, which one
141-GB GPU needs for full 8B AdamW). On CPU (`--shape tiny`) the same code runs a shrunken shape, for the test.

    python scripts/bench/gpu_sft_step.py --shape 8b --deepspeed zero3_offload --steps 5   # lent GPU
    python scripts/bench/gpu_sft_step.py --shape tiny --seq_len 512 --steps 2              # CPU smoke run
"""

from __future__ import annotations

import json
import time

import torch
from cader.vlm.flops import (
    QWEN3_VL_8B_TEXT,
    QWEN3_VL_8B_VISION,
    TextShape,
    VisionShape,
    text_forward_flops,
    training_step_flops,
    vision_forward_flops,
)
from jsonargparse import CLI

TINY_TEXT = TextShape(hidden=64, intermediate=128, layers=2, heads=4, kv_heads=2, head_dim=32, vocab=1024)
TINY_VISION = VisionShape(hidden=32, intermediate=64, depth=2, patch=16, temporal_patch=2, merge=2, out_hidden=64,
                          deepstack=1)  # fmt: skip
# Dense bf16 peak of the accelerators we quote MFU against (FLOP/s).
PEAK_FLOPS = {"H200": 989e12, "H100": 989e12, "A100": 312e12, "cpu": None}


def mrope_section(head_dim: int) -> list[int]:
    """Temporal/height/width split of the head_dim/2 rotary pairs: the released [24, 20, 20] at head_dim 128."""
    if head_dim == 128:
        return [24, 20, 20]
    return [head_dim // 2 - 2 * (head_dim // 8), head_dim // 8, head_dim // 8]


def build_model(text: TextShape, vision: VisionShape, device: str, dtype: torch.dtype):
    from transformers import Qwen3VLConfig, Qwen3VLForConditionalGeneration

    special = {"image_token_id": text.vocab - 4, "video_token_id": text.vocab - 3,
               "vision_start_token_id": text.vocab - 2, "vision_end_token_id": text.vocab - 1}  # fmt: skip
    config = Qwen3VLConfig(
        text_config={
            "vocab_size": text.vocab, "hidden_size": text.hidden, "intermediate_size": text.intermediate,
            "num_hidden_layers": text.layers, "num_attention_heads": text.heads,
            "num_key_value_heads": text.kv_heads, "head_dim": text.head_dim, "max_position_embeddings": 262_144,
            "rope_parameters": {"rope_type": "default", "rope_theta": 5_000_000.0, "mrope_interleaved": True,
                                "mrope_section": mrope_section(text.head_dim)},
        },
        vision_config={
            "depth": vision.depth, "hidden_size": vision.hidden, "intermediate_size": vision.intermediate,
            "num_heads": max(1, vision.hidden // 72), "patch_size": vision.patch,
            "temporal_patch_size": vision.temporal_patch, "spatial_merge_size": vision.merge,
            "out_hidden_size": vision.out_hidden,
            "deepstack_visual_indexes": list(range(vision.depth - vision.deepstack, vision.depth)),
        },
        **special,
    )  # fmt: skip
    with torch.device(device):
        model = Qwen3VLForConditionalGeneration(config).to(dtype)
    return model, special


def synthetic_batch(special: dict, text: TextShape, vision: VisionShape, seq_len: int, device: str, dtype):
    """One sequence: prompt text, N temporal pairs of 256x256 frames, target text (the only labelled part)."""
    grid_side = 256 // vision.patch
    tokens_per_pair = grid_side * grid_side // (vision.merge**2)
    prompt_len, target_len = 128, 128
    pairs = max(1, (seq_len - prompt_len - target_len) // (tokens_per_pair + 2))
    pieces = [torch.randint(0, text.vocab - 8, (prompt_len,))]
    for _ in range(pairs):
        pieces.append(torch.tensor([special["vision_start_token_id"]]))
        pieces.append(torch.full((tokens_per_pair,), special["video_token_id"]))
        pieces.append(torch.tensor([special["vision_end_token_id"]]))
    filler = seq_len - prompt_len - target_len - pairs * (tokens_per_pair + 2)
    target = torch.randint(0, text.vocab - 8, (target_len + filler,))
    input_ids = torch.cat([*pieces, target]).unsqueeze(0)
    labels = torch.full_like(input_ids, -100)
    labels[0, -len(target) :] = target
    patch_dim = 3 * vision.temporal_patch * vision.patch * vision.patch
    grid = [(1, grid_side, grid_side)] * pairs
    batch = {
        "input_ids": input_ids.to(device),
        "attention_mask": torch.ones_like(input_ids).to(device),
        # 2 marks video tokens, as the processor's create_mm_token_type_ids does; M-RoPE needs it.
        "mm_token_type_ids": ((input_ids == special["video_token_id"]).long() * 2).to(device),
        "labels": labels.to(device),
        "pixel_values_videos": torch.randn(pairs * grid_side * grid_side, patch_dim, dtype=dtype, device=device),
        "video_grid_thw": torch.tensor([[pairs, grid_side, grid_side]], device=device),
    }
    return batch, grid


def deepspeed_engine(model, stage: str, lr: float):
    import deepspeed

    zero = {"stage": 3, "overlap_comm": True, "contiguous_gradients": True, "stage3_gather_16bit_weights_on_model_save": True}
    if stage == "zero3_offload":
        zero["offload_optimizer"] = {"device": "cpu", "pin_memory": True}
    config = {"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 1, "bf16": {"enabled": True},
              "zero_optimization": zero, "gradient_clipping": 1.0,
              "optimizer": {"type": "AdamW", "params": {"lr": lr, "weight_decay": 0.0}}}  # fmt: skip
    engine, *_ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=config)
    return engine


def main(shape: str = "tiny", seq_len: int = 10_240, steps: int = 3, deepspeed: str = "none",
         gradient_checkpointing: bool = True, peak: str | None = None, lr: float = 1e-5) -> dict:
    """Run `steps` SFT steps (after one warm-up) and print tokens/s, peak memory and MFU.

    Args:
        shape: "8b" (Qwen3-VL-8B sizes) or "tiny" (CPU smoke shape).
        seq_len: Tokens in the single training sequence.
        steps: Timed optimizer steps.
        deepspeed: "none" (torch AdamW), "zero3" or "zero3_offload".
        gradient_checkpointing: Recompute activations in backward (not counted in MFU).
        peak: Accelerator name for the peak FLOP/s (H200, H100, A100); guessed from the device when unset.
        lr: Learning rate.
    """
    device = "cuda" if torch.cuda.is_available() else "cpu"
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    text, vision = (QWEN3_VL_8B_TEXT, QWEN3_VL_8B_VISION) if shape == "8b" else (TINY_TEXT, TINY_VISION)
    model, special = build_model(text, vision, device, dtype)
    if gradient_checkpointing:
        model.gradient_checkpointing_enable()
    model.train()
    batch, grid = synthetic_batch(special, text, vision, seq_len, device, dtype)
    if deepspeed != "none":
        engine = deepspeed_engine(model, deepspeed, lr)

        def step():
            loss = engine(**batch).loss
            engine.backward(loss)
            engine.step()
            return loss
    else:
        optimizer = torch.optim.AdamW(model.parameters(), lr=lr, fused=device == "cuda")

        def step():
            loss = model(**batch).loss
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            return loss

    step()  # warm-up: allocator, kernels, DeepSpeed partitioning
    if device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    start = time.perf_counter()
    losses = [float(step()) for _ in range(steps)]
    if device == "cuda":
        torch.cuda.synchronize()
    seconds = (time.perf_counter() - start) / steps

    lm = training_step_flops(text_forward_flops(text, seq_len))
    vit = training_step_flops(vision_forward_flops(vision, grid))
    name = peak or (next((k for k in PEAK_FLOPS if k in torch.cuda.get_device_name()), None) if device == "cuda" else "cpu")
    peak_flops = PEAK_FLOPS.get(name or "", None)
    result = {
        "shape": shape, "device": torch.cuda.get_device_name() if device == "cuda" else "cpu", "deepspeed": deepspeed,
        "seq_len": seq_len, "visual_tokens": int((batch["input_ids"] == special["video_token_id"]).sum()),
        "step_seconds": seconds, "tokens_per_s": seq_len / seconds, "losses": losses,
        "peak_memory_gib": torch.cuda.max_memory_allocated() / 2**30 if device == "cuda" else None,
        "tflops_lm": lm / seconds / 1e12, "tflops_vit": vit / seconds / 1e12,
        "mfu_lm": lm / seconds / peak_flops if peak_flops else None,
        "mfu_lm_plus_vit": (lm + vit) / seconds / peak_flops if peak_flops else None,
    }  # fmt: skip
    print(json.dumps(result, indent=2))
    return result


if __name__ == "__main__":
    CLI(main, as_positional=False)
