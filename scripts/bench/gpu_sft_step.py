"""Qwen3-VL-8B-shaped SFT steps on ONE GPU: tokens/s, peak memory and MFU, measured at cut depths and extrapolated
to the 8B's 36 layers (the extrapolation is stated as such in the output).

The model is built from the released 8B widths (`cader.vlm.flops`: hidden 4096, 32/8 heads, head_dim 128,
intermediate 12288, vocabulary 151,936, the full 27-layer vision tower) with random weights (no download) and only the
language model's depth cut, and trained on one synthetic video+text sequence of `--seq_len` tokens (default 10,240,
the paper's max length): 256x256-px frames (65,536 px, App. A), i.e. 64 merged visual tokens per temporal pair,
filling the sequence except for a text prompt and a 128-token target. The loss is the one `SFTModule` computes
(`cader.train.loss`: `lm_head` at the labelled positions only).

Why cut depths: the full 8B under ZeRO-3 on one GPU needs ~18 bytes a parameter of model states (bf16 weights and
gradients, fp32 master weights and AdamW moments: DeepSpeed's estimator gives 149 GB for 8.77B parameters without
offload), more than one H200's 141 GB; `offload_optimizer` needs ~196 GB of host memory, more than the lent machine's
128 GiB. At 8 and 16 layers the model is 3.4B / 4.9B parameters (~56 / ~82 GiB of model states, `plan_memory`), and
each depth runs in a fresh process. The step time is linear in the depth (the layers are identical), so the two
depths give t(L) = a + b L; `extrapolated` is t(36) and the MFU and tokens/s it implies for the 8B on this GPU. The
measured MFU of each cut model is reported too. Peak memory is extrapolated the same way (an 8B on one GPU, which does
not fit: that figure says by how much).

    python scripts/bench/gpu_sft_step.py --shape 8b --layers 8,16 --steps 5    # one H200, ~5 min
    python scripts/bench/gpu_sft_step.py --shape tiny --seq_len 512 --steps 2  # CPU smoke run
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import tempfile
import time
from dataclasses import asdict, replace
from pathlib import Path

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
                          deepstack=1)
# Dense bf16 peak of the accelerators we quote MFU against (FLOP/s).
PEAK_FLOPS = {"H200": 989e12, "H100": 989e12, "A100": 312e12, "cpu": None}
# ZeRO-3 model states per parameter on one GPU without offload, as DeepSpeed's estimator counts them
ZERO3_BYTES_PER_PARAM = 18


def text_layer_params(text: TextShape) -> int:
    """Parameters of one Qwen3 decoder layer: q/k/v/o projections, the gated MLP, two RMSNorms and the q/k norms."""
    attention = text.hidden * text.head_dim * (2 * text.heads + 2 * text.kv_heads)
    return attention + 3 * text.hidden * text.intermediate + 2 * text.hidden + 2 * text.head_dim


def plan_memory(total_params: int, layers: int, text: TextShape, cut_layers: int) -> dict:
    """Parameters and ZeRO-3 model-state bytes on one GPU of the model with `cut_layers` of its `layers` text layers
    (`total_params` at full depth)."""
    params = total_params - (layers - cut_layers) * text_layer_params(text)
    return {"layers": cut_layers, "params": params, "model_state_gib": round(ZERO3_BYTES_PER_PARAM * params / 2**30, 1)}


def extrapolate(depths: list[int], values: list[float], to_depth: int) -> float:
    """The straight line through (depth, value) at `to_depth` (least squares over the points given)."""
    if len(set(depths)) < 2:
        raise ValueError(f"need two different depths to extrapolate, got {depths}")
    n = len(depths)
    mean_d, mean_v = sum(depths) / n, sum(values) / n
    slope = sum((d - mean_d) * (v - mean_v) for d, v in zip(depths, values)) / sum((d - mean_d) ** 2 for d in depths)
    return mean_v + slope * (to_depth - mean_d)


def mrope_section(head_dim: int) -> list[int]:
    """Temporal/height/width split of the head_dim/2 rotary pairs: the released [24, 20, 20] at head_dim 128."""
    if head_dim == 128:
        return [24, 20, 20]
    return [head_dim // 2 - 2 * (head_dim // 8), head_dim // 8, head_dim // 8]


def build_special(text: TextShape) -> dict:
    """The vision special tokens' ids: the last four of the vocabulary."""
    return {"image_token_id": text.vocab - 4, "video_token_id": text.vocab - 3,
            "vision_start_token_id": text.vocab - 2, "vision_end_token_id": text.vocab - 1}


def build_model(text: TextShape, vision: VisionShape, device: str, dtype: torch.dtype):
    from transformers import Qwen3VLConfig, Qwen3VLForConditionalGeneration

    special = build_special(text)
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
    )
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


class LabelledLoss(torch.nn.Module):
    """The model plus SFTModule's loss tail, as one module for the DeepSpeed engine (its ZeRO-3 hooks then see the
    base model and `lm_head` called inside the engine's forward, as under Lightning)."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, labels, **inputs):
        from cader.train.loss import labelled_loss

        hidden = self.model.model(**inputs, use_cache=False).last_hidden_state
        return labelled_loss(hidden, labels, self.model.lm_head)


def single_process_env() -> None:
    """The torch.distributed variables of a one-process world, where the launcher set none (DeepSpeed needs them)."""
    if "MASTER_PORT" not in os.environ:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            os.environ["MASTER_PORT"] = str(sock.getsockname()[1])
    for key, value in {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1"}.items():
        os.environ.setdefault(key, value)


def deepspeed_engine(model, stage: str, lr: float):
    """A one-process ZeRO-3 engine with torch's AdamW, as SFTModule configures it (no DeepSpeed op to compile)."""
    import deepspeed

    single_process_env()
    zero = {"stage": 3, "overlap_comm": True, "contiguous_gradients": True, "stage3_gather_16bit_weights_on_model_save": True}
    if stage == "zero3_offload":
        zero["offload_optimizer"] = {"device": "cpu", "pin_memory": True}
    config = {"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 1, "bf16": {"enabled": True},
              "zero_optimization": zero, "gradient_clipping": 1.0, "zero_allow_untested_optimizer": True,
              "zero_force_ds_cpu_optimizer": False}
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    engine, *_ = deepspeed.initialize(model=model, optimizer=optimizer, config=config)
    return engine


def shapes(shape: str, layers: int | None) -> tuple[TextShape, VisionShape]:
    text, vision = (QWEN3_VL_8B_TEXT, QWEN3_VL_8B_VISION) if shape == "8b" else (TINY_TEXT, TINY_VISION)
    return (replace(text, layers=layers) if layers else text), vision


def run_depth(shape: str = "tiny", layers: int | None = None, seq_len: int = 10_240, steps: int = 3,
              deepspeed: str = "none", gradient_checkpointing: bool = True, peak: str | None = None,
              lr: float = 1e-5) -> dict:
    """Time `steps` SFT steps (after one warm-up) of the model with `layers` text layers, in this process."""
    device = "cuda" if torch.cuda.is_available() else "cpu"
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    text, vision = shapes(shape, layers)
    model, special = build_model(text, vision, device, dtype)
    if gradient_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.train()
    params = sum(p.numel() for p in model.parameters())
    batch, grid = synthetic_batch(special, text, vision, seq_len, device, dtype)
    step_model = LabelledLoss(model)
    if deepspeed != "none":
        engine = deepspeed_engine(step_model, deepspeed, lr)

        def step():
            loss = engine(**batch)
            engine.backward(loss)
            engine.step()
            return loss
    else:
        optimizer = torch.optim.AdamW(model.parameters(), lr=lr, fused=device == "cuda")

        def step():
            loss = step_model(**batch)
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
    return {
        "shape": shape, "layers": text.layers, "params": params,
        "device": torch.cuda.get_device_name() if device == "cuda" else "cpu", "deepspeed": deepspeed,
        "seq_len": seq_len, "visual_tokens": int((batch["input_ids"] == special["video_token_id"]).sum()),
        "step_seconds": seconds, "tokens_per_s": seq_len / seconds, "losses": losses,
        "peak_memory_gib": torch.cuda.max_memory_allocated() / 2**30 if device == "cuda" else None,
        "tflops_lm": lm / seconds / 1e12, "tflops_vit": vit / seconds / 1e12, "peak_flops": peak_flops,
        "mfu_lm": lm / seconds / peak_flops if peak_flops else None,
        "mfu_lm_plus_vit": (lm + vit) / seconds / peak_flops if peak_flops else None,
    }


def in_fresh_process(kwargs: dict) -> dict:
    """`run_depth(**kwargs)` in a new interpreter: each depth starts with an empty GPU and a fresh DeepSpeed."""
    from cader.scripts.bench.in_fresh_process import command

    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "depth.json"
        subprocess.run(command("cader.scripts.bench.gpu_sft_step:run_depth", kwargs, out=str(out)), check=True)
        return json.loads(out.read_text())


def extrapolated(runs: list[dict], text: TextShape, vision: VisionShape, seq_len: int, grid: list) -> dict:
    """Step time and peak memory at the full depth from the straight line through the measured depths, and the
    MFU and tokens/s that time implies."""
    depths = [r["layers"] for r in runs]
    seconds = extrapolate(depths, [r["step_seconds"] for r in runs], text.layers)
    lm = training_step_flops(text_forward_flops(text, seq_len))
    vit = training_step_flops(vision_forward_flops(vision, grid))
    peak_flops = runs[0]["peak_flops"]
    memory = [r["peak_memory_gib"] for r in runs]
    return {"what": f"extrapolated to {text.layers} layers from the depths {depths} (not measured)",
            "layers": text.layers, "step_seconds": seconds, "tokens_per_s": seq_len / seconds,
            "mfu_lm": lm / seconds / peak_flops if peak_flops else None,
            "mfu_lm_plus_vit": (lm + vit) / seconds / peak_flops if peak_flops else None,
            "peak_memory_gib": extrapolate(depths, memory, text.layers) if None not in memory else None}


def main(shape: str = "tiny", seq_len: int = 10_240, steps: int = 3, deepspeed: str = "none",
         gradient_checkpointing: bool = True, peak: str | None = None, lr: float = 1e-5,
         layers: str | None = None) -> dict:
    """Run `steps` SFT steps (after one warm-up) per depth and print tokens/s, peak memory and MFU.

    Args:
        shape: "8b" (Qwen3-VL-8B widths) or "tiny" (CPU smoke shape).
        seq_len: Tokens in the single training sequence.
        steps: Timed optimizer steps per depth.
        deepspeed: "none" (torch AdamW), "zero3" (bf16, fp32 master weights and moments on the GPU), or
            "zero3_offload" (optimizer state in host memory: ~12 bytes a parameter of it).
        gradient_checkpointing: Recompute activations in backward (not counted in MFU).
        peak: Accelerator name for the peak FLOP/s (H200, H100, A100); guessed from the device when unset.
        lr: Learning rate.
        layers: Text-layer depths to measure, comma-separated (default "8,16" for 8b, the full depth for tiny);
            with two or more, each runs in a fresh process and the full depth is extrapolated.
    """
    full_text, vision = shapes(shape, None)
    depths = [int(x) for x in layers.split(",")] if layers else ([8, 16] if shape == "8b" else [full_text.layers])
    kwargs = {"shape": shape, "seq_len": seq_len, "steps": steps, "deepspeed": deepspeed,
              "gradient_checkpointing": gradient_checkpointing, "peak": peak, "lr": lr}
    if len(depths) == 1:
        result = run_depth(layers=depths[0], **kwargs)
        print(json.dumps(result, indent=2))
        return result
    runs = [in_fresh_process({**kwargs, "layers": d}) for d in depths]
    special = build_special(full_text)
    _, grid = synthetic_batch(special, full_text, vision, seq_len, "meta", torch.float32)
    result = {"shape": shape, "runs": runs, "extrapolated": extrapolated(runs, full_text, vision, seq_len, grid),
              "text": asdict(full_text)}
    print(json.dumps(result, indent=2))
    return result


if __name__ == "__main__":
    CLI(main, as_positional=False)
