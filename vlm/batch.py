"""One batch from single-sample Qwen3-VL inputs, for training and scoring (right padding) and generation (left
padding), and which prompts may share one forward under a token budget."""

from __future__ import annotations

from typing import Literal

import torch

# Qwen3-VL takes the vision tensors of a batch flat, in sample order, with one grid row per image or video.
VISION_KEYS = ("pixel_values_videos", "video_grid_thw", "pixel_values", "image_grid_thw")


def pad_batch(
    items: list[dict[str, torch.Tensor]], pad_values: dict[str, int], side: Literal["left", "right"] = "right"
) -> dict[str, torch.Tensor]:
    """Pad every token field named in `pad_values` to the longest sample with its pad value and stack them; concatenate
    the vision tensors.

    Token fields may be 1-D (one sample) or (1, length) as a processor returns them. Right padding keeps each
    sample's labels aligned for training, and lets a scoring forward run without any attention mask (a causal
    position never sees the pads after it); left padding puts every prompt's last token at the last position, where
    generation appends.
    """
    rows = {key: [x[key].reshape(-1) for x in items] for key in pad_values if key in items[0]}
    length = max(len(r) for r in rows["input_ids"])
    def widths(row: torch.Tensor) -> tuple[int, int]:
        return (length - len(row), 0) if side == "left" else (0, length - len(row))

    batch = {key: torch.stack([torch.nn.functional.pad(r, widths(r), value=pad_values[key]) for r in parts])
             for key, parts in rows.items()}
    for key in VISION_KEYS:
        parts = [x[key] for x in items if key in x]
        if parts:  # one sample's pixels as they are: a copy of a long video's would double them for nothing
            batch[key] = parts[0] if len(parts) == 1 else torch.cat(parts)
    return batch


def token_budget_groups(lengths: list[int], max_tokens: int, max_prompts: int) -> list[list[int]]:
    """Which prompts share a forward: indices into `lengths`, grouped so that each group's padded size
    (prompts x its longest prompt) stays within `max_tokens` and it holds at most `max_prompts` prompts.

    Prompts are taken shortest first, so similar lengths share a forward and padding stays small; a prompt longer
    than the budget forms a group of its own (one prompt already fills the device: a 27k-token Stage-1 prompt of
    the 8B). Every index appears in exactly one group; groups come shortest first.
    """
    if max_tokens < 1 or max_prompts < 1:
        raise ValueError(f"max_tokens and max_prompts must be >= 1, got {max_tokens}, {max_prompts}")
    groups: list[list[int]] = []
    for i in sorted(range(len(lengths)), key=lambda k: (lengths[k], k)):
        group = groups[-1] if groups else None
        # sorted ascending: the newcomer is the group's longest, so the padded size is (count + 1) x its length
        if group and len(group) < max_prompts and (len(group) + 1) * lengths[i] <= max_tokens:
            group.append(i)
        else:
            groups.append([i])
    return groups
