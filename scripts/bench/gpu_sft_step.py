"""Qwen3-VL-8B-shaped SFT steps on ONE GPU, one depth per call (`run_depth`), and the memory plan that picks the
depths `gpu_run.py` measures (`choose_depths`).

The model is built from the released 8B widths (`cader.vlm.flops`: hidden 4096, 32/8 heads, head_dim 128,
intermediate 12288, vocabulary 151,936, the full 27-layer vision tower) with random weights (no download) and only the
language model's depth cut, and trained on one synthetic video+text sequence of `seq_len` tokens (default 10,240,
the paper's max length): 256x256-px frames (65,536 px, App. A), i.e. 64 merged visual tokens per temporal pair,
filling the sequence except for a text prompt and a 128-token target. The loss is `SFTModule.sft_loss` itself
(`lm_head` at the labelled positions only), with activation checkpointing as the paper recipe enables it
(`cader.train.module.enable_checkpointing`) and ZeRO-3 from the recipe's own `configs/deepspeed/zero3.json`, plus the
fields Lightning fills in for `precision: bf16-true`, `gradient_clip_val: 1.0` and one micro-batch.

Why cut depths: the full 8B under ZeRO-3 on one GPU needs ~18 bytes a parameter of model states (bf16 weights and
gradients, fp32 master weights and AdamW moments: DeepSpeed's estimator gives 149 GB for 8.77B parameters without
offload), more than one H200's 141 GB; `offload_optimizer` needs ~196 GB of host memory, more than the lent machine's
128 GiB. `plan_memory` counts the model states at any depth (`model_params`, checked against a built model by the
tests), and `choose_depths` takes the deepest pair (L, 2L), L a power of two, whose deeper model fits the GPU's free
memory with `STEP_HEADROOM_GIB` to spare: 4/8 layers on an H100's ~78 GiB, 8/16 on an H200's ~139 GiB. The layers
are identical, so the step time is a straight line in the depth and `extrapolated` gives the 36-layer step time, the
MFU and tokens/s it implies, and the peak memory (an 8B on one GPU, which does not fit: that figure says by how much),
labelled as not measured.

    python -m cader.scripts.bench.harness --function cader.scripts.bench.gpu_sft_step:run_depth \
        --kwargs '{"shape": "8b", "layers": 8, "deepspeed": "zero3"}'      # one depth on one GPU, JSON on stdout
"""

from __future__ import annotations

import os
import statistics
import time
from dataclasses import replace

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

TINY_TEXT = TextShape(hidden=64, intermediate=128, layers=2, heads=4, kv_heads=2, head_dim=32, vocab=1024)
TINY_VISION = VisionShape(hidden=32, intermediate=64, depth=2, patch=16, temporal_patch=2, merge=2, out_hidden=64,
                          deepstack=1)
# Dense bf16 peak of the accelerators we quote MFU against (FLOP/s), found by name in the device's.
PEAK_FLOPS = {"H200": 989e12, "H100": 989e12, "A100": 312e12}
# ZeRO-3 model states per parameter on one GPU without offload, as DeepSpeed's estimator counts them
ZERO3_BYTES_PER_PARAM = 18
# Plain bf16 AdamW: weights, gradients and both moments in bf16 (torch keeps the moments in the parameters' dtype)
PLAIN_BYTES_PER_PARAM = 8
# Room the plan keeps beside the model states: a 10,240-token step's activations under checkpointing (a hidden state
# per layer, one layer's recomputed MLP, the ViT's), ZeRO-3's gathered-parameter and reduce buckets, and the
# temporaries of AdamW on one sub-group of fp32 master weights (1e9 elements)
STEP_HEADROOM_GIB = 12.0
POSITION_EMBEDDINGS = 2304  # the released towers' learned position table (48 x 48)


def text_layer_params(text: TextShape) -> int:
    """Parameters of one Qwen3 decoder layer: q/k/v/o projections, the gated MLP, two RMSNorms and the q/k norms."""
    attention = text.hidden * text.head_dim * (2 * text.heads + 2 * text.kv_heads)
    return attention + 3 * text.hidden * text.intermediate + 2 * text.hidden + 2 * text.head_dim


def vision_params(vision: VisionShape) -> int:
    """Parameters of the vision tower: patch embedding and position table, the blocks (LayerNorms, qkv, proj, MLP,
    all with biases), the merger and the DeepStack mergers (each a LayerNorm and two linear layers)."""
    h, i = vision.hidden, vision.intermediate
    embed = 3 * vision.temporal_patch * vision.patch**2 * h + h + POSITION_EMBEDDINGS * h
    block = 4 * h + (3 * h * h + 3 * h) + (h * h + h) + (h * i + i) + (i * h + h)
    merged = h * vision.merge**2
    merger = merged * merged + merged + merged * vision.out_hidden + vision.out_hidden
    return embed + vision.depth * block + (2 * h + merger) + vision.deepstack * (2 * merged + merger)


def model_params(text: TextShape, vision: VisionShape, layers: int | None = None, tied: bool = False) -> int:
    """Parameters of the whole Qwen3-VL with `layers` text layers (default: all): 8,767,123,696 for the 8B."""
    layers = text.layers if layers is None else layers
    lm = text.vocab * text.hidden * (1 if tied else 2) + layers * text_layer_params(text) + text.hidden
    return lm + vision_params(vision)


def plan_memory(text: TextShape, vision: VisionShape, layers: int, bytes_per_param: int = ZERO3_BYTES_PER_PARAM) -> dict:
    """Parameters and model-state GiB on one GPU of the model cut to `layers` text layers."""
    params = model_params(text, vision, layers)
    return {"layers": layers, "params": params, "model_state_gib": round(bytes_per_param * params / 2**30, 1)}


def choose_depths(free_gib: float, text: TextShape = QWEN3_VL_8B_TEXT, vision: VisionShape = QWEN3_VL_8B_VISION,
                  headroom_gib: float = STEP_HEADROOM_GIB) -> list[int]:
    """The deepest pair [L, 2L], L a power of two and 2L at most the full depth, whose deeper ZeRO-3 model's states
    plus `headroom_gib` fit `free_gib`; ValueError when not even [1, 2] fits."""
    pairs = [[shallow, 2 * shallow] for shallow in (1, 2, 4, 8, 16, 32) if 2 * shallow <= text.layers]
    fitting = [p for p in pairs if plan_memory(text, vision, p[1])["model_state_gib"] + headroom_gib <= free_gib]
    if not fitting:
        need = plan_memory(text, vision, 2)["model_state_gib"] + headroom_gib
        raise ValueError(f"{free_gib:.1f} GiB free: even 2 layers need {need:.1f} GiB under ZeRO-3 on one GPU")
    return fitting[-1]


def extrapolate(depths: list[int], values: list[float], to_depth: int) -> float:
    """The straight line through (depth, value) at `to_depth` (least squares over the points given; ValueError
    without two different depths)."""
    slope, intercept = statistics.linear_regression(depths, values)
    return intercept + slope * to_depth


def mrope_section(head_dim: int) -> list[int]:
    """Temporal/height/width split of the head_dim/2 rotary pairs: the released [24, 20, 20] at head_dim 128."""
    if head_dim == 128:
        return [24, 20, 20]
    return [head_dim // 2 - 2 * (head_dim // 8), head_dim // 8, head_dim // 8]


def vision_heads(vision: VisionShape) -> int:
    """Attention heads of the vision tower: 16 in the released 8B (head size 72) and 4B (64) towers, 2 in the tiny."""
    return 16 if vision.hidden >= 1024 else 2


def build_special(text: TextShape) -> dict:
    """The vision special tokens' ids: the last four of the vocabulary."""
    return {"image_token_id": text.vocab - 4, "video_token_id": text.vocab - 3,
            "vision_start_token_id": text.vocab - 2, "vision_end_token_id": text.vocab - 1}


def text_config(text: TextShape) -> dict:
    """The language model's part of a Qwen3VLConfig at `text`'s widths and depth."""
    return {"vocab_size": text.vocab, "hidden_size": text.hidden, "intermediate_size": text.intermediate,
            "num_hidden_layers": text.layers, "num_attention_heads": text.heads, "num_key_value_heads": text.kv_heads,
            "head_dim": text.head_dim, "max_position_embeddings": 262_144,
            "rope_parameters": {"rope_type": "default", "rope_theta": 5_000_000.0, "mrope_interleaved": True,
                                "mrope_section": mrope_section(text.head_dim)}}


def vision_config(vision: VisionShape) -> dict:
    """The vision tower's part of a Qwen3VLConfig at `vision`'s widths."""
    return {"depth": vision.depth, "hidden_size": vision.hidden, "intermediate_size": vision.intermediate,
            "num_heads": vision_heads(vision), "patch_size": vision.patch, "temporal_patch_size": vision.temporal_patch,
            "spatial_merge_size": vision.merge, "out_hidden_size": vision.out_hidden,
            "num_position_embeddings": POSITION_EMBEDDINGS,
            "deepstack_visual_indexes": list(range(vision.depth - vision.deepstack, vision.depth))}


def build_model(text: TextShape, vision: VisionShape, device: str, dtype: torch.dtype):
    from transformers import Qwen3VLConfig, Qwen3VLForConditionalGeneration

    special = build_special(text)
    config = Qwen3VLConfig(text_config=text_config(text), vision_config=vision_config(vision), **special)
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


class SFTLossStep(torch.nn.Module):
    """`SFTModule.sft_loss` on a model built in memory, as one module for the DeepSpeed engine: ZeRO-3's hooks then see
    the base model and `lm_head` run inside the engine's forward, as under Lightning."""

    def __init__(self, model):
        super().__init__()
        from cader.train.module import SFTModule

        self.sft = SFTModule(model_path="(built in memory)", gradient_checkpointing=True)
        self.sft.model = model  # what configure_model would have loaded

    def forward(self, **batch):
        return self.sft.sft_loss(batch)


def single_process_env() -> None:
    """The torch.distributed variables of a one-process world, where the launcher set none (DeepSpeed needs them)."""
    from cader.scripts.bench.harness import free_port

    if "MASTER_PORT" not in os.environ:
        os.environ["MASTER_PORT"] = str(free_port())
    for key, value in {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1"}.items():
        os.environ.setdefault(key, value)


def zero3_config() -> dict:
    """configs/deepspeed/zero3.json with what Lightning adds for the recipe's trainer: bf16 (`bf16-true`), clipping
    at 1.0 (`gradient_clip_val`), one micro-batch per step."""
    from cader.train.strategies import load_deepspeed_config

    config = load_deepspeed_config("zero3")
    config.update({"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 1,
                   "gradient_clipping": 1.0, "bf16": {"enabled": True}})
    return config


def deepspeed_engine(module: torch.nn.Module, lr: float):
    """A one-process ZeRO-3 engine with torch's AdamW, as SFTModule configures it (no DeepSpeed op to compile)."""
    import deepspeed

    single_process_env()
    optimizer = torch.optim.AdamW(module.parameters(), lr=lr, weight_decay=0.0)
    engine, *_ = deepspeed.initialize(model=module, optimizer=optimizer, config=zero3_config())
    return engine


def shapes(shape: str, layers: int | None) -> tuple[TextShape, VisionShape]:
    text, vision = (QWEN3_VL_8B_TEXT, QWEN3_VL_8B_VISION) if shape == "8b" else (TINY_TEXT, TINY_VISION)
    return (replace(text, layers=layers) if layers else text), vision


def peak_flops_of(device_name: str) -> float | None:
    """The dense bf16 peak quoted for a device, by name (None for a CPU or an unlisted GPU)."""
    return next((flops for key, flops in PEAK_FLOPS.items() if key in device_name), None)


def step_function(step_model: torch.nn.Module, batch: dict, deepspeed: str, lr: float, device: str):
    """One optimizer step on `batch`: through a ZeRO-3 engine, or plain AdamW (fused on a GPU) with clipping."""
    if deepspeed == "zero3":
        engine = deepspeed_engine(step_model, lr)

        def step():
            loss = engine(**batch)
            engine.backward(loss)
            engine.step()
            return loss.detach()

        return step
    if deepspeed != "none":
        raise ValueError(f"deepspeed must be zero3 or none, got {deepspeed!r}")
    params = [p for p in step_model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=lr, weight_decay=0.0, fused=device == "cuda")

    def step():
        loss = step_model(**batch)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss.detach()

    return step


def run_depth(shape: str = "tiny", layers: int | None = None, seq_len: int = 10_240, steps: int = 3,
              deepspeed: str = "zero3", gradient_checkpointing: bool = True, lr: float = 1e-5) -> dict:
    """Time `steps` SFT steps (after one warm-up) of the model with `layers` text layers, in this process.

    Args:
        shape: "8b" (Qwen3-VL-8B widths) or "tiny" (CPU rehearsal).
        layers: Text layers (default: the shape's full depth).
        seq_len: Tokens in the single training sequence.
        steps: Timed optimizer steps.
        deepspeed: "zero3" (bf16, fp32 master weights and moments on the GPU) or "none" (plain bf16 AdamW).
        gradient_checkpointing: Recompute activations in backward (not counted in MFU).
        lr: Learning rate.
    """
    from cader.train.module import enable_checkpointing

    device = "cuda" if torch.cuda.is_available() else "cpu"
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    text, vision = shapes(shape, layers)
    model, special = build_model(text, vision, device, dtype)
    if gradient_checkpointing:
        enable_checkpointing(model, {"use_reentrant": False})
    model.train()
    params = sum(p.numel() for p in model.parameters())
    batch, grid = synthetic_batch(special, text, vision, seq_len, device, dtype)
    step = step_function(SFTLossStep(model), batch, deepspeed, lr, device)
    step()  # warm-up: allocator, kernels, DeepSpeed partitioning, the optimizer's moments
    if device == "cuda":
        torch.cuda.synchronize()
        states_gib = torch.cuda.memory_allocated() / 2**30
        torch.cuda.reset_peak_memory_stats()
    times, losses = [], []
    for _ in range(steps):
        start = time.perf_counter()
        losses.append(float(step()))  # float() waits for the step
        times.append(time.perf_counter() - start)
    seconds = sum(times) / len(times)
    lm = training_step_flops(text_forward_flops(text, seq_len))
    vit = training_step_flops(vision_forward_flops(vision, grid))
    device_name = torch.cuda.get_device_name() if device == "cuda" else "cpu"
    peak = peak_flops_of(device_name)
    return {
        "shape": shape, "layers": text.layers, "params": params, "params_planned": model_params(text, vision),
        "device": device_name, "deepspeed": deepspeed, "gradient_checkpointing": gradient_checkpointing,
        "seq_len": seq_len, "visual_tokens": int((batch["input_ids"] == special["video_token_id"]).sum()),
        "step_seconds": seconds, "step_seconds_each": times, "tokens_per_s": seq_len / seconds, "losses": losses,
        "model_states_gib": states_gib if device == "cuda" else None,
        "peak_memory_gib": torch.cuda.max_memory_allocated() / 2**30 if device == "cuda" else None,
        "tflops_lm": lm / seconds / 1e12, "tflops_vit": vit / seconds / 1e12, "peak_flops": peak,
        "mfu_lm": lm / seconds / peak if peak else None,
        "mfu_lm_plus_vit": (lm + vit) / seconds / peak if peak else None,
    }


def extrapolated(runs: list[dict], shape: str, seq_len: int) -> dict:
    """Step time and peak memory at the shape's full depth from the straight line through the measured depths, and
    the MFU and tokens/s that time implies."""
    text, vision = shapes(shape, None)
    depths = [r["layers"] for r in runs]
    seconds = extrapolate(depths, [r["step_seconds"] for r in runs], text.layers)
    grid = synthetic_batch(build_special(text), text, vision, seq_len, "meta", torch.float32)[1]
    lm = training_step_flops(text_forward_flops(text, seq_len))
    vit = training_step_flops(vision_forward_flops(vision, grid))
    peak = runs[0]["peak_flops"]
    memory = [r["peak_memory_gib"] for r in runs]
    return {"what": f"extrapolated to {text.layers} layers from the depths {depths} (not measured)",
            "layers": text.layers, "step_seconds": seconds, "tokens_per_s": seq_len / seconds,
            "mfu_lm": lm / seconds / peak if peak else None,
            "mfu_lm_plus_vit": (lm + vit) / seconds / peak if peak else None,
            "peak_memory_gib": extrapolate(depths, memory, text.layers) if None not in memory else None}
