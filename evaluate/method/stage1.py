"""Stage 1: global preliminary reasoning (paper "Stage 1"; Algorithm 1 lines 4-12).

Frames at r1 over the whole video (uniformly subsampled when over the frame budget), the C.1 prompt with thinking
off, raw option logits z_i from one forward, then the confidence from `cader.calibrate.margin` (the one definition
of M): P = softmax(z / T), M = P_top1 - P_top2, exit iff M >= tau.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from cader.calibrate.margin import exits_early, stage1_confidence
from cader.evaluate.backends.base import Backend, Prompt
from cader.evaluate.method.config import CaderConfig
from cader.evaluate.method.prompts import stage1_prompt
from cader.vlm.video import Frames, VideoReader


@dataclass
class Cost:
    """Per-sample cost. `forwards` counts model calls (one prefill each; a generation's decode steps are counted
    by `completion_tokens`)."""

    forwards: int = 0
    frames_decoded: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    seconds: float = 0.0
    # 1 when the sample's F1 and RGR contexts were decoded one by one because its video's whole-video decode would
    # exceed `grid_max_bytes` (cader.evaluate.method.whole_video); recorded only then
    grid_fallback: int = 0
    # frames the sample's RGR contexts lost against Algorithm 2's counts under `trade_rgr_frames_for_speed`; recorded
    # only under that option (report.json sums it)
    rgr_frames_lost: int | None = None
    # every model call as (role, prompt tokens, generated tokens), and the (main, verifier) text shapes their FLOPs
    # are counted at (calibrate/compute.py); FLOPs are recorded only when the runner knows the shapes
    calls: list = field(default_factory=list, repr=False)
    shapes: tuple | None = field(default=None, repr=False)
    _t0: float = field(default_factory=time.perf_counter, repr=False)

    def stop(self) -> None:
        self.seconds = round(time.perf_counter() - self._t0, 3)

    def to_dict(self) -> dict:
        out = {
            k: getattr(self, k)
            for k in ("forwards", "frames_decoded", "prompt_tokens", "completion_tokens", "seconds")
        }
        if self.grid_fallback:
            out["grid_fallback"] = self.grid_fallback
        if self.rgr_frames_lost is not None:
            out["rgr_frames_lost"] = self.rgr_frames_lost
        if self.shapes is not None and self.calls:
            from cader.calibrate.compute import sample_flops

            out["flops"] = {k: float(f"{v:.6g}") for k, v in sample_flops(self.calls, *self.shapes).items()}
        return out


@dataclass
class Stage1Outcome:
    record: dict  # the "stage1" object of predictions.jsonl
    pred: str  # A1
    margin: float
    exits: bool  # M >= tau (before the variant decides the route)


def sample_stage1_frames(reader: VideoReader, cfg: CaderConfig, cost: Cost) -> Frames:
    """F1 = ConstantRateSample(V, r1) (Algorithm 1 line 5), capped uniformly at the backbone's frame budget, the
    frames placed by `cfg.frame_rule`."""
    frames = reader.sample_uniform(cfg.r1, max_frames=cfg.max_frames, max_pixels=cfg.max_pixels, rule=cfg.frame_rule)
    cost.frames_decoded += len(frames)
    return frames


def run_stage1(
    backend: Backend,
    frames: Frames,
    question: str,
    options: Sequence[str],
    letters: Sequence[str],
    cfg: CaderConfig,
    cost: Cost,
) -> Stage1Outcome:
    system, user = stage1_prompt(question, options, letters)
    (scores,) = backend.letter_logits(
        [Prompt(user, system=system, video=frames, enable_thinking=False)], letters
    )
    cost.forwards += 1
    cost.prompt_tokens += scores.prompt_tokens
    cost.calls.append(("stage1", scores.prompt_tokens, 0))
    # Raises InvalidLogits (NaN/inf, too many options): the runner records the sample as failed.
    conf = stage1_confidence(scores.logits, cfg.temperature)
    pred = letters[conf.index]
    record = {
        "logits": [float(z) for z in scores.logits],
        "pred": pred,
        "margin": float(conf.margin),
        "temperature": float(cfg.temperature),
        "n_frames": len(frames),
        "fps": float(cfg.r1),
        "tau": float(cfg.tau),
    }
    return Stage1Outcome(record, pred, float(conf.margin), exits_early(conf.margin, cfg.tau))
