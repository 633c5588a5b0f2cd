"""Pixels cross the DataLoader worker boundary as uint8 and are normalised where the batch lands (main process or
device).

The Qwen3-VL processors rescale and normalise the patches in fp32 ((x / 255 - mean) / std, fused as
(x - 255 mean) / (255 std)), which makes a long video's `pixel_values_videos` four bytes a pixel: ~165 MiB for a
10,240-token sample, held in shared memory by every prefetched batch of every worker. A worker here runs the same
processor told not to rescale or normalise (`raw_pixel_processor`): the patches come out in the same layout as the
decoded uint8 values, a quarter of the bytes; `normalize_pixels` then applies the processor's own arithmetic
(`PixelNorm.of`), so the model gets the same fp32 values bit for bit. The batch carries its normalisation
(`PIXEL_NORMS`), so whoever turns it into model inputs (SFTModule.training_step, on the device) needs nothing else.
"""

from __future__ import annotations

import copy
from typing import NamedTuple

import torch

# batch key -> the processor attribute whose mean/std made it
PIXEL_KEYS = {"pixel_values_videos": "video_processor", "pixel_values": "image_processor"}
# the batch entry that says how its uint8 pixels become model inputs ({pixel key: PixelNorm}); not a model input
PIXEL_NORMS = "pixel_norms"


class PixelNorm(NamedTuple):
    """Per-channel normalisation of uint8 patches: (x - mean / rescale) / (std / rescale), as transformers fuses
    rescale and normalise. A named tuple, not a dataclass: Lightning's batch transfer rebuilds tuples but refuses
    frozen dataclasses."""

    mean: tuple[float, ...]
    std: tuple[float, ...]
    rescale_factor: float = 1 / 255

    @classmethod
    def of(cls, sub_processor) -> PixelNorm:
        """The normalisation a video or image processor applies (the identity where it does neither)."""
        channels = len(sub_processor.image_mean)
        normalize = bool(sub_processor.do_normalize)
        return cls(tuple(sub_processor.image_mean) if normalize else (0.0,) * channels,
                   tuple(sub_processor.image_std) if normalize else (1.0,) * channels,
                   float(sub_processor.rescale_factor) if sub_processor.do_rescale else 1.0)


def normalize_patches(patches: torch.Tensor, norm: PixelNorm) -> torch.Tensor:
    """fp32 normalised patches from uint8 ones, (n, channels * rest) with the channel outermost in each row (the
    Qwen-VL patch layout); the same operations, in the same order, as the processor's fused rescale-normalise."""
    if patches.dtype != torch.uint8:
        raise TypeError(f"expected uint8 patches, got {patches.dtype}")
    channels = len(norm.mean)
    mean = torch.tensor(norm.mean, device=patches.device) * (1.0 / norm.rescale_factor)
    std = torch.tensor(norm.std, device=patches.device) * (1.0 / norm.rescale_factor)
    rows = patches.to(torch.float32).view(patches.shape[0], channels, -1)
    return rows.sub_(mean[:, None]).div_(std[:, None]).view(patches.shape)


def normalize_pixels(batch: dict) -> dict:
    """`batch` as model inputs: its uint8 pixel tensors normalised to fp32 by the `PIXEL_NORMS` entry the encoder
    put beside them (taken off the batch); a batch without one is returned as it is. A uint8 pixel tensor with no
    normalisation to apply is an error, never a silent model input."""
    out = dict(batch)
    norms = out.pop(PIXEL_NORMS, None) or {}
    for key in PIXEL_KEYS:
        if key in out and out[key].dtype == torch.uint8:
            if key not in norms:
                raise ValueError(f"batch holds uint8 {key} without its normalisation ({PIXEL_NORMS!r} entry)")
            out[key] = normalize_patches(out[key], norms[key])
    return out


def pixel_norms(processor) -> dict[str, PixelNorm]:
    """The normalisation of each pixel key, read from the processor that would have applied it."""
    return {key: PixelNorm.of(getattr(processor, name)) for key, name in PIXEL_KEYS.items()
            if getattr(processor, name, None) is not None}


def raw_pixel_processor(processor):
    """A shallow copy of `processor` whose video and image processors leave the patches as uint8 (no rescale, no
    normalise); `processor` itself is unchanged."""
    raw = copy.copy(processor)
    for name in PIXEL_KEYS.values():
        sub = getattr(processor, name, None)
        if sub is not None:
            sub = copy.copy(sub)
            sub.do_rescale, sub.do_normalize = False, False
            setattr(raw, name, sub)
    return raw
