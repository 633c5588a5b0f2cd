"""Sample -> model inputs: budget planning (before pixels), chat template, label mask, padding, length-grouped batches.

Label mask: loss on every assistant turn (`<think>…</think><answer>…</answer>` as written in the data) and the
`<|im_end|>` that closes it, as LLaMA-Factory and TRL train multi-turn rows (`cader.train.turns`). Spans are found on
token ids, so they are exact whatever the vision blocks expanded to.
"""
from __future__ import annotations

import math
import random
from dataclasses import dataclass
from pathlib import Path

import torch
from cader.train.budget import BudgetConfig, BudgetPlan, ImageSpec, VideoSpec, VisionGeometry, plan_budget
from cader.train.formats import Sample
from cader.train.pixels import PIXEL_NORMS
from cader.train.turns import IGNORE_INDEX, assistant_spans, labels_for_spans
from cader.vlm.batch import pad_batch as pad_tokens_and_vision
from cader.vlm.chat_template import apply_template
from cader.vlm.messages import encode
from torch.utils.data import Sampler


class SkipSample(Exception):
    """A sample that cannot be trained on; `reason` is a short counter key (missing_media, over_budget, ...)."""

    def __init__(self, reason: str, detail: str):
        super().__init__(f"{reason}: {detail}")
        self.reason, self.detail = reason, detail


@dataclass
class PlannedSample:
    sample: Sample
    media_root: str
    plan: BudgetPlan
    num_tokens: int                       # planned sequence length (drives length grouping)


def chat_messages(sample: Sample) -> list[dict]:
    """Qwen3-VL chat messages with the sample's parts in order; media become bare {"type": "video"|"image"}."""
    out = []
    for turn in sample.turns:
        content = [{"type": "text", "text": p["text"]} if p["type"] == "text" else {"type": p["type"]}
                   for p in turn.parts]
        out.append({"role": turn.role, "content": content})
    return out


def _render(processor, messages, add_generation_prompt: bool) -> str:
    # enable_thinking=True leaves the generation prompt open, so the data's own <think> block is the target
    return apply_template(processor, messages, add_generation_prompt=add_generation_prompt, enable_thinking=True)


class SampleEncoder:
    """Plans and encodes samples for one processor and budget."""

    def __init__(self, processor, budget: BudgetConfig, frame_cache_dir: str | None = None,
                 uint8_pixels: bool = False):
        """`frame_cache_dir`: a folder of decoded video samplings (`cader.vlm.frame_cache`) that `encode` reads
        and fills; None decodes every video every time. `uint8_pixels`: `encode` returns the pixel patches as the
        decoded uint8 values, a quarter of the fp32 bytes a DataLoader worker would otherwise hand over; they are
        model inputs only after `cader.train.pixels.normalize_pixels(batch)` (the sample carries its normalisation
        under `PIXEL_NORMS`; SFTModule.training_step applies it on the device)."""
        from cader.train.pixels import pixel_norms, raw_pixel_processor
        from cader.vlm.frame_cache import FrameCache

        self.processor, self.budget = processor, budget
        self.pixel_norms = pixel_norms(processor) if uint8_pixels else {}
        self._pixel_processor = raw_pixel_processor(processor) if uint8_pixels else processor
        self.frame_cache = FrameCache(frame_cache_dir) if frame_cache_dir else None
        tok = processor.tokenizer
        self.tokenizer = tok
        vp = processor.video_processor
        self.geometry = VisionGeometry(vp.patch_size, vp.merge_size, vp.temporal_patch_size)
        self.im_start = tok.convert_tokens_to_ids("<|im_start|>")
        self.im_end = tok.convert_tokens_to_ids("<|im_end|>")
        self.assistant_header = tok("assistant\n", add_special_tokens=False)["input_ids"]
        self.pad_id = tok.pad_token_id if tok.pad_token_id is not None else self.im_end

    def _count(self, text: str) -> int:
        return len(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def _timestamp_tokens(self, duration: float) -> int:
        # "<t seconds>" grows with the number of digits of t: measure every magnitude up to the duration
        times = [0.5] + [10.0 ** k - 0.5 for k in range(1, 8) if 10.0 ** k - 0.5 <= duration] + [duration]
        return max(self._count(f"<{t:.1f} seconds>") for t in times)

    def texts(self, sample: Sample) -> tuple[str, str]:
        """(prompt text up to the open assistant turn, full text ending with the target's end token)."""
        messages = chat_messages(sample)
        if messages[-1]["role"] != "assistant":
            raise SkipSample("bad_turns", f"{sample.sample_id}: last turn is {messages[-1]['role']}, not assistant")
        prompt = _render(self.processor, messages[:-1], add_generation_prompt=True)
        full = _render(self.processor, messages, add_generation_prompt=False).rstrip("\n")
        if not full.startswith(prompt):
            raise SkipSample("template", f"{sample.sample_id}: chat template rewrites earlier turns")
        return prompt, full

    def plan(self, sample: Sample, media_root: str | Path) -> PlannedSample:
        """Budget the sample from media headers only (no pixels decoded). Raises SkipSample."""
        from cader.vlm.image import ImageReadError, displayed_size
        from cader.vlm.video import VideoReader, VideoReadError

        media = sample.media
        if sum(m["type"] == "video" for m in media) > 1:
            raise SkipSample("multi_video", f"{sample.sample_id}: more than one video per sample")
        videos, images, ts_tokens = [], [], 0
        for m in media:
            path = Path(media_root) / m["path"]
            if not path.is_file():
                raise SkipSample("missing_media", f"{sample.sample_id}: {path} not found")
            if m["type"] == "video":
                try:
                    reader = VideoReader(path)
                except VideoReadError as err:
                    raise SkipSample("bad_video", f"{sample.sample_id}: {err}") from None
                videos.append(VideoSpec(reader.duration, reader.height, reader.width))
                ts_tokens = self._timestamp_tokens(reader.duration)
            else:
                try:
                    images.append(ImageSpec(*displayed_size(path)))
                except ImageReadError as err:
                    raise SkipSample("bad_image", f"{sample.sample_id}: {err}") from None
        prompt, full = self.texts(sample)
        n_prompt, n_full = self._count(prompt), self._count(full)
        placeholders = 3 * len(media)     # <|vision_start|><|*_pad|><|vision_end|>, re-counted by the budget
        cfg = BudgetConfig(**{**self.budget.__dict__, "timestamp_tokens": ts_tokens or self.budget.timestamp_tokens})
        plan = plan_budget(n_prompt - placeholders, n_full - n_prompt, videos, images, cfg, self.geometry)
        if not plan.keep:
            raise SkipSample("over_budget", f"{sample.sample_id}: {plan.reason}")
        return PlannedSample(sample, str(media_root), plan, plan.total_tokens)

    def encode(self, planned: PlannedSample, frame_cache: bool = True) -> dict[str, torch.Tensor]:
        """Decode media per the plan, run the processor, build labels. Raises SkipSample. `frame_cache`: False
        decodes the video even when the encoder has a frame cache (a source left out of it)."""
        from cader.vlm.frame_cache import TrainingSampling, training_frames
        from cader.vlm.image import load_image
        from cader.vlm.video import VideoReadError

        sample, plan = planned.sample, planned.plan
        video, images = None, []
        try:
            for m in sample.media:
                path = Path(planned.media_root) / m["path"]
                if m["type"] == "video":
                    sampling = TrainingSampling(self.budget.fps, plan.video_frames[0], plan.video_max_pixels)
                    video = training_frames(path, sampling, self.frame_cache if frame_cache else None)
                else:
                    images.append(load_image(path, max_pixels=plan.image_max_pixels))
        except (VideoReadError, OSError) as err:
            raise SkipSample("bad_media", f"{sample.sample_id}: {err}") from None
        _, full = self.texts(sample)
        feats = encode(self._pixel_processor, [], video=video, images=images, text=full)
        ids = feats["input_ids"][0]
        # every assistant turn is trained (LLaMA-Factory and TRL label each turn of a multi-turn row)
        spans = assistant_spans(ids.tolist(), self.im_start, self.im_end, self.assistant_header)
        if not spans:
            raise SkipSample("template", f"{sample.sample_id}: no assistant turn in the encoded sequence")
        start, end = spans[-1]
        # the plan is an upper bound, so cut at the real max_length: only target tokens lie past `start`
        keep = min(end + 1, self.budget.max_length)
        if keep <= start:
            raise SkipSample("budget_mismatch", f"{sample.sample_id}: prompt and vision fill {start} tokens")
        labels = torch.tensor(labels_for_spans(ids.tolist(), spans, keep), dtype=ids.dtype)
        out = {"input_ids": ids[:keep], "labels": labels, "attention_mask": feats["attention_mask"][0][:keep]}
        if "mm_token_type_ids" in feats:
            out["mm_token_type_ids"] = feats["mm_token_type_ids"][0][:keep]
        for key in ("pixel_values_videos", "video_grid_thw", "pixel_values", "image_grid_thw"):
            if key in feats:
                out[key] = feats[key]
        norms = {key: norm for key, norm in self.pixel_norms.items() if key in out}
        if norms:
            out[PIXEL_NORMS] = norms
        return out


def pad_batch(items: list[dict[str, torch.Tensor]], pad_id: int) -> dict[str, torch.Tensor]:
    """Right-pad the token fields (labels with IGNORE_INDEX); concatenate pixels and grids; keep the samples'
    pixel normalisation (`PIXEL_NORMS`, one processor's, so the same for every sample)."""
    pads = {"input_ids": pad_id, "labels": IGNORE_INDEX, "attention_mask": 0, "mm_token_type_ids": 0}
    batch = pad_tokens_and_vision(items, pads, side="right")
    norms = {key: norm for item in items for key, norm in item.get(PIXEL_NORMS, {}).items()}
    if norms:
        batch[PIXEL_NORMS] = norms
    return batch


class LengthGroupedBatchSampler(Sampler[list[int]]):
    """Batches of similar length (low padding) in a seeded random order, sharded over ranks, resumable.

    Each epoch: shuffle (seed + epoch), cut into mega-batches of `batch_size * mega`, sort each by length, cut into
    batches, shuffle the batch order. Every rank gets the same number of batches (the list is cycled to a multiple of
    the world size), so no rank waits on a collective the others never reach. `skip` drops batches already consumed
    in the current epoch (exact mid-epoch resume).
    """

    def __init__(self, lengths: list[int], batch_size: int, seed: int = 0, mega: int = 32, rank: int = 0,
                 world_size: int = 1, shuffle: bool = True):
        self.lengths, self.batch_size, self.seed, self.mega = lengths, batch_size, seed, mega
        self.rank, self.world_size, self.shuffle = rank, world_size, shuffle
        self.epoch, self.skip = 0, 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def all_batches(self) -> list[list[int]]:
        order = list(range(len(self.lengths)))
        rng = random.Random(self.seed + self.epoch)
        if self.shuffle:
            rng.shuffle(order)
        step = self.batch_size * self.mega
        batches = []
        for i in range(0, len(order), step):
            chunk = sorted(order[i:i + step], key=lambda j: -self.lengths[j])
            batches += [chunk[k:k + self.batch_size] for k in range(0, len(chunk), self.batch_size)]
        if self.shuffle:
            rng.shuffle(batches)
        if batches and len(batches) % self.world_size:
            batches += batches[: self.world_size - len(batches) % self.world_size]
        return batches

    def __iter__(self):
        skip, self.skip = self.skip, 0
        yield from self.all_batches()[self.rank::self.world_size][skip:]

    def __len__(self) -> int:
        n = math.ceil(len(self.lengths) / self.batch_size)
        # the full epoch even while resuming: Lightning counts the skipped batches as already done
        return math.ceil(n / self.world_size)
