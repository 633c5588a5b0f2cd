"""Model and processor loading from a hub id or a local HF folder (offline-safe: nothing here forces a download)."""

from __future__ import annotations

import torch

_DTYPES = {"auto": "auto", "bf16": torch.bfloat16, "bfloat16": torch.bfloat16, "fp16": torch.float16,
           "float16": torch.float16, "fp32": torch.float32, "float32": torch.float32}  # fmt: skip


def resolve_dtype(dtype: str | torch.dtype):
    if isinstance(dtype, torch.dtype):
        return dtype
    try:
        return _DTYPES[dtype]
    except KeyError:
        raise ValueError(f"unknown dtype {dtype!r}; expected one of {sorted(_DTYPES)}") from None


def load_processor(
    path: str, *, video_max_pixels: int = 65_536, image_max_pixels: int = 262_144, thinking_switch: bool = False
):
    """AutoProcessor with the paper's per-frame and per-image pixel caps (App. A: 65,536 px / 262,144 px).

    The project resizes frames itself before calling the processor (`cader.vlm.messages.encode`); the caps set here
    only matter to callers that hand raw frames to the processor directly.
    `thinking_switch`: give the chat template the Qwen3 `enable_thinking` switch when it lacks one (training and
    export do, so the exported folder carries it; see `cader.vlm.chat_template`).
    """
    from transformers import AutoProcessor

    processor = AutoProcessor.from_pretrained(path)
    processor.image_processor.size = {"shortest_edge": 32 * 32, "longest_edge": image_max_pixels}
    processor.video_processor.size = {"shortest_edge": 32 * 32, "longest_edge": video_max_pixels * 4096}
    if thinking_switch:
        from cader.vlm.chat_template import with_thinking_switch

        with_thinking_switch(processor)
    return processor


def load_model(
    path: str, *, dtype: str | torch.dtype = "auto", device: str = "cpu", attn_implementation: str | None = None
):
    """Qwen3-VL (any AutoModelForImageTextToText checkpoint) in eval mode on `device`."""
    from transformers import AutoModelForImageTextToText

    kwargs = {"dtype": resolve_dtype(dtype)}
    if attn_implementation:
        kwargs["attn_implementation"] = attn_implementation
    model = AutoModelForImageTextToText.from_pretrained(path, **kwargs)
    return model.to(device).eval()
