"""One batch from single-sample Qwen3-VL inputs, for training (right padding) and scoring (left padding)."""

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
    sample's labels aligned for training; left padding puts every prompt's last token at the last position, where
    scoring reads the next-token logits.
    """
    rows = {key: [x[key].reshape(-1) for x in items] for key in pad_values if key in items[0]}
    length = max(len(r) for r in rows["input_ids"])
    def widths(row: torch.Tensor) -> tuple[int, int]:
        return (length - len(row), 0) if side == "left" else (0, length - len(row))

    batch = {key: torch.stack([torch.nn.functional.pad(r, widths(r), value=pad_values[key]) for r in parts])
             for key, parts in rows.items()}  # fmt: skip
    for key in VISION_KEYS:
        parts = [x[key] for x in items if key in x]
        if parts:
            batch[key] = torch.cat(parts)
    return batch
