"""Model FLOPs of a Qwen3-VL training step, for MFU: pure functions on config numbers.

Counts matmul FLOPs only (2 per multiply-add), the convention of MFU reports (PaLM, Megatron): norms, activations,
rotary embeddings and softmax are ignored. A training step is 3x the forward (backward = 2x forward); recomputation
under gradient checkpointing is *not* counted, so MFU stays comparable across checkpointing settings.
The language model and the vision tower are counted separately because published Qwen3-VL MFU figures usually
leave the ViT out.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class TextShape:
    hidden: int
    intermediate: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int


@dataclass(frozen=True)
class VisionShape:
    hidden: int
    intermediate: int
    depth: int
    patch: int
    temporal_patch: int
    merge: int
    out_hidden: int
    deepstack: int  # number of DeepStack mergers


# Qwen3-VL-8B-Instruct's released sizes.
QWEN3_VL_8B_TEXT = TextShape(hidden=4096, intermediate=12288, layers=36, heads=32, kv_heads=8, head_dim=128,
                             vocab=151_936)
QWEN3_VL_8B_VISION = VisionShape(hidden=1152, intermediate=4304, depth=27, patch=16, temporal_patch=2, merge=2,
                                 out_hidden=4096, deepstack=3)
# Qwen3-VL-4B-Instruct's (the paper's verifier, App. C.3): the 8B's depth and heads at narrower widths.
QWEN3_VL_4B_TEXT = TextShape(hidden=2560, intermediate=9728, layers=36, heads=32, kv_heads=8, head_dim=128,
                             vocab=151_936)
QWEN3_VL_4B_VISION = VisionShape(hidden=1024, intermediate=4096, depth=24, patch=16, temporal_patch=2, merge=2,
                                 out_hidden=2560, deepstack=3)
# the language-model sizes of the released checkpoints a run may name by hub id instead of a folder
RELEASED_TEXT = {"Qwen/Qwen3-VL-8B-Instruct": QWEN3_VL_8B_TEXT, "Qwen/Qwen3-VL-4B-Instruct": QWEN3_VL_4B_TEXT}


def text_forward_flops(shape: TextShape, seq_len: int, causal: bool = True) -> float:
    """Forward FLOPs of the language model over one sequence of `seq_len` tokens (projections, MLP, attention, head)."""
    q_dim, kv_dim = shape.heads * shape.head_dim, shape.kv_heads * shape.head_dim
    proj = shape.hidden * (q_dim + 2 * kv_dim) + q_dim * shape.hidden
    mlp = 3 * shape.hidden * shape.intermediate  # SwiGLU: gate, up, down
    per_token_dense = 2 * shape.layers * (proj + mlp) + 2 * shape.hidden * shape.vocab
    # QK^T and AV: 2 matmuls of (seq x head_dim x seq) per head; a causal mask halves the useful work.
    attention = shape.layers * 2 * 2 * q_dim * seq_len * seq_len * (0.5 if causal else 1.0)
    return per_token_dense * seq_len + attention


def vision_forward_flops(shape: VisionShape, grid_thw: list[tuple[int, int, int]]) -> float:
    """Forward FLOPs of the vision tower for the given (t, h, w) patch grids (one per image or video).

    Attention is full within each temporal slice of a grid (h*w patches), as in Qwen3-VL's windowless ViT.
    """
    total = 0.0
    patch_in = 3 * shape.temporal_patch * shape.patch * shape.patch
    merged_in = shape.hidden * shape.merge * shape.merge
    for t, h, w in grid_thw:
        patches = t * h * w
        merged = patches // (shape.merge * shape.merge)
        embed = 2 * patch_in * shape.hidden * patches
        per_patch = 2 * (4 * shape.hidden * shape.hidden + 2 * shape.hidden * shape.intermediate)
        attention = 2 * 2 * shape.hidden * (h * w) * (h * w) * t
        blocks = shape.depth * (per_patch * patches + attention)
        mergers = (1 + shape.deepstack) * 2 * (merged_in * merged_in + merged_in * shape.out_hidden) * merged
        total += embed + blocks + mergers
    return total


def training_step_flops(forward_flops: float) -> float:
    """Forward + backward (2x forward) model FLOPs."""
    return 3.0 * forward_flops


def mfu(step_flops: float, seconds: float, peak_flops_per_s: float) -> float:
    """Model FLOPs utilisation of one step."""
    if seconds <= 0 or peak_flops_per_s <= 0:
        raise ValueError("seconds and peak FLOP/s must be positive")
    return step_flops / seconds / peak_flops_per_s
