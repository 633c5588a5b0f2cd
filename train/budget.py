"""Token budget of one SFT sample, computed before any pixel is decoded or tokenised. Pure arithmetic.

Qwen3-VL's cost of visual input (transformers' Qwen3VLProcessor):
- a video of n frames at h x w px is cut into ceil(n / temporal_patch) temporal groups; each group costs
  (h / f) * (w / f) tokens with f = patch_size * merge_size (16 * 2 = 32 for the released model), plus
  <|vision_start|>, <|vision_end|> and the timestamp text "<12.5 seconds>" that the processor writes before it;
- an image at h x w px costs (h / f) * (w / f) tokens plus <|vision_start|> and <|vision_end|>.

Paper supplementary A fixes the data side: 1.0 fps, at most 4,096 frames, 65,536 px per video frame, 262,144 px per
image, 10,240 tokens per sequence. When a sample is too long the budget, in this order:
1. lowers the frame count: a common cap on the longest videos first, so shorter videos keep 1 fps as long as
   possible; frames stay spread uniformly over the whole timeline (the reader subsamples, never crops);
2. lowers the pixels per frame (and per image) down to `min_pixels`;
3. cuts the end of the assistant target (never a vision block) if at least `min_target_tokens` of it survive;
4. otherwise drops the sample (the caller counts and logs it with its id).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from cader.vlm.sampling import fit_pixels


@dataclass(frozen=True)
class VisionGeometry:
    patch_size: int = 16
    merge_size: int = 2
    temporal_patch_size: int = 2

    @property
    def factor(self) -> int:
        return self.patch_size * self.merge_size


@dataclass(frozen=True)
class TokenBudget:
    """The token budget every sample is fitted into (paper Table 6 and supplementary A, "Data Preprocessing").

    Args:
        max_length: most tokens per sample, vision included (paper Table 6: 10,240); the token budget
            (cader.train.budget) lowers frames, then pixels, then cuts the target's end to fit.
        fps: frames per second sampled from each training video (supplementary A: 1.0).
        max_frames: most frames per video (supplementary A: 4,096).
        video_max_pixels: most pixels per video frame (supplementary A: 65,536).
        image_max_pixels: most pixels per image (supplementary A: 262,144).
        min_frames: the budget never lowers a video below this many frames (step 1's floor).
        min_pixels: the budget never lowers a frame or image below this many pixels (step 2's floor).
        min_target_tokens: a sample whose assistant target would keep fewer tokens than this after the cut is
            dropped (and counted) instead of trained on.
    """

    max_length: int = 10_240
    fps: float = 1.0
    max_frames: int = 4_096
    video_max_pixels: int = 65_536
    image_max_pixels: int = 262_144
    min_frames: int = 4
    min_pixels: int = 128 * 128
    min_target_tokens: int = 32


@dataclass(frozen=True)
class BudgetConfig(TokenBudget):
    timestamp_tokens: int = 8                # upper bound of tokens in "<t seconds>" (measure with the tokenizer)


@dataclass(frozen=True)
class VideoSpec:
    duration: float
    height: int
    width: int


@dataclass(frozen=True)
class ImageSpec:
    height: int
    width: int


@dataclass
class BudgetPlan:
    keep: bool
    total_tokens: int                        # tokens after the plan (including the cut target)
    video_frames: list[int] = field(default_factory=list)
    video_sizes: list[tuple[int, int]] = field(default_factory=list)
    image_sizes: list[tuple[int, int]] = field(default_factory=list)
    video_max_pixels: int = 0                # the per-frame cap that yields video_sizes (pass to the reader)
    image_max_pixels: int = 0
    target_tokens: int = 0                   # assistant target tokens kept (== input unless step 3 cut it)
    steps: list[str] = field(default_factory=list)   # which reductions were applied, for the log
    reason: str | None = None                # why the sample is dropped


def video_tokens(frames: int, height: int, width: int, geo: VisionGeometry, timestamp_tokens: int) -> int:
    groups = math.ceil(frames / geo.temporal_patch_size)
    per_group = (height // geo.factor) * (width // geo.factor)
    return groups * (per_group + 2 + timestamp_tokens)


def image_tokens(height: int, width: int, geo: VisionGeometry) -> int:
    return (height // geo.factor) * (width // geo.factor) + 2


def frames_at_fps(duration: float, cfg: BudgetConfig, geo: VisionGeometry) -> int:
    """Frames the reader takes at cfg.fps, capped at max_frames; at least one temporal group."""
    n = math.floor(duration * cfg.fps + 1e-9)
    return max(geo.temporal_patch_size, min(cfg.max_frames, n))


def _visual_tokens(frames, video_sizes, image_sizes, cfg, geo) -> int:
    return (sum(video_tokens(n, h, w, geo, cfg.timestamp_tokens) for n, (h, w) in zip(frames, video_sizes))
            + sum(image_tokens(h, w, geo) for h, w in image_sizes))


def _capped_frames(natural: list[int], cap: int, geo: VisionGeometry) -> list[int]:
    # keep counts whole temporal groups so the processor never pads with a repeated frame
    tp = geo.temporal_patch_size
    return [n if n <= cap else max(tp, cap // tp * tp) for n in natural]


def _sizes(specs, max_pixels: int, geo: VisionGeometry) -> list[tuple[int, int]]:
    # the same call the video reader / image loader makes with max_pixels, so the plan matches the pixels
    cap = max(max_pixels, geo.factor ** 2)
    return [fit_pixels(s.height, s.width, cap, factor=geo.factor) for s in specs]


def _largest_fitting(lo: int, hi: int, fits) -> int | None:
    """Largest x in [lo, hi] with fits(x), assuming fits is monotone (True below some threshold)."""
    if not fits(lo):
        return None
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if fits(mid):
            lo = mid
        else:
            hi = mid - 1
    return lo


def plan_budget(prompt_tokens: int, target_tokens: int, videos: list[VideoSpec], images: list[ImageSpec],
                cfg: BudgetConfig = BudgetConfig(), geo: VisionGeometry = VisionGeometry()) -> BudgetPlan:
    """Fit one sample into cfg.max_length.

    prompt_tokens: text tokens of everything but the assistant target (system, user text, template markup), without
    the vision placeholders; target_tokens: the assistant target including its end token.
    """
    natural = [frames_at_fps(v.duration, cfg, geo) for v in videos]
    vcap, icap = cfg.video_max_pixels, cfg.image_max_pixels
    vsizes, isizes = _sizes(videos, vcap, geo), _sizes(images, icap, geo)
    room = cfg.max_length - prompt_tokens - target_tokens     # tokens left for vision
    frames, steps = list(natural), []

    def total(fr, vs, is_):
        return prompt_tokens + target_tokens + _visual_tokens(fr, vs, is_, cfg, geo)

    if _visual_tokens(frames, vsizes, isizes, cfg, geo) > room and videos:
        # step 1: a common frame cap, searched from min_frames up to the longest video's natural count
        floor_cap = max(cfg.min_frames, geo.temporal_patch_size)
        cap = _largest_fitting(floor_cap, max(natural),
                               lambda c: _visual_tokens(_capped_frames(natural, c, geo), vsizes, isizes, cfg, geo)
                               <= room)
        frames = _capped_frames(natural, cap if cap is not None else floor_cap, geo)
        steps.append(f"frames {sum(natural)}->{sum(frames)}")

    if _visual_tokens(frames, vsizes, isizes, cfg, geo) > room:
        # step 2: shrink pixels of every frame and image by a common fraction (in 1/1000 steps) down to the floor
        def caps_at(k):
            return (max(cfg.min_pixels, cfg.video_max_pixels * k // 1000),
                    max(cfg.min_pixels, cfg.image_max_pixels * k // 1000))

        def sizes_at(k):
            v, i = caps_at(k)
            return _sizes(videos, v, geo), _sizes(images, i, geo)

        k = _largest_fitting(1, 1000, lambda k: _visual_tokens(frames, *sizes_at(k), cfg, geo) <= room)
        vcap, icap = caps_at(k if k is not None else 1)
        new_v, new_i = sizes_at(k if k is not None else 1)
        steps.append(f"pixels {vsizes + isizes}->{new_v + new_i}")
        vsizes, isizes = new_v, new_i

    used = total(frames, vsizes, isizes)
    if used <= cfg.max_length:
        return BudgetPlan(True, used, frames, vsizes, isizes, vcap, icap, target_tokens, steps)

    # step 3: only the end of the assistant target may go
    keep_target = target_tokens - (used - cfg.max_length)
    if keep_target >= min(cfg.min_target_tokens, target_tokens) and keep_target > 0:
        steps.append(f"target {target_tokens}->{keep_target}")
        return BudgetPlan(True, cfg.max_length, frames, vsizes, isizes, vcap, icap, keep_target, steps)
    return BudgetPlan(False, used, frames, vsizes, isizes, vcap, icap, target_tokens, steps,
                      reason=f"over budget: {used} tokens > {cfg.max_length} at the frame/pixel floor")
