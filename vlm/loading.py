"""Model and processor loading from a hub id or a local HF folder (offline-safe: nothing here forces a download).

A value that can only be a local path (absolute, relative with ./ ../ ~, or `a/b/c`, or `runs/export` when `runs/`
exists) and names no folder is refused here with one FileNotFoundError naming it: handed to transformers it would
be tried as a hub id, and come back as a page of hub errors about a repository nobody meant.
"""

from __future__ import annotations

import re
from pathlib import Path

import torch

_DTYPES = {"auto": "auto", "bf16": torch.bfloat16, "bfloat16": torch.bfloat16, "fp16": torch.float16,
           "float16": torch.float16, "fp32": torch.float32, "float32": torch.float32}


# huggingface_hub's form of a repo id: "name" or "namespace/name", of letters, digits and ._- (not starting with them)
HUB_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9][A-Za-z0-9._-]*)?")


def missing_local_path(path: str) -> bool:
    """True when `path` names no folder and cannot be a hub id either (see the module docstring)."""
    if Path(path).expanduser().is_dir():
        return False
    first = path.split("/", 1)[0]
    return not HUB_ID.fullmatch(path) or path.startswith((".", "~")) or (first != path and Path(first).is_dir())


def check_model_path(path: str) -> None:
    """FileNotFoundError naming `path` when it is a local path that does not exist."""
    if missing_local_path(str(path)):
        raise FileNotFoundError(f"{path}: no such folder")


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

    check_model_path(path)
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

    check_model_path(path)
    kwargs = {"dtype": resolve_dtype(dtype)}
    if attn_implementation:
        kwargs["attn_implementation"] = attn_implementation
    model = AutoModelForImageTextToText.from_pretrained(path, **kwargs)
    return model.to(device).eval()
