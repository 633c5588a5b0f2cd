"""Every constant of CADER as one configuration, with the paper's values as defaults.

The values and the sections they come from are `cader.contracts.paper`: `PAPER` for the paper's (r1 = 1.0 fps,
T = 2.0, tau = 0.97, the breadth-aware fallback at 1200 s / 20 %, minimum crop 10 s, N_budget = 512 and r2 in
[1.0, 8.0] fps, delta = 0.60, K = 2, f_min = 0.4, f_max = 1.0), `DEPARTURES` for what the paper leaves open (frame and
pixel budgets, crops at the video's edges, how P_yes is read, generation lengths), each with its reason.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from cader.contracts.paper import DEPARTURES, PAPER
from cader.vlm.sampling import FRAME_RULES

# Paper Table 2 rows.
VARIANTS = ("full", "no_stage2", "uniform_stage2", "no_verifier", "no_reflection", "no_rgr")
CROP_EDGE_MODES = ("clip", "shift")
P_YES_MODES = ("vocab", "yes_no")


@dataclass
class CaderConfig:
    """CADER's settings; each field is also an evaluate/run.py flag, with its description below as the help.

    Attributes:
        variant: the row of the CADER paper's Table 2 to run: full CADER or one ablation
        r1: Stage-1 frame rate in fps, N1 = floor(D * r1) frames (CADER "Frame Sampling Strategy", Eq. 1)
        frame_rule: where Stage 1 and every crop place their frames, which the CADER paper leaves open ("uniformly
            sampled"): backbone (Qwen's own pipeline, qwen-vl-utils: an even count, endpoint-inclusive uniform
            times, the frame cap spread evenly over the whole video) or bin_centre (floor(D * fps) frames at the
            centres of equal bins)
        temperature: softmax temperature T of the Stage-1 option logits (CADER "Confidence Estimation via Logit
            Margin", Eq. 2); --calibration overrides it
        tau: early-exit threshold on the margin M = P_top1 - P_top2 (CADER Eq. 3, Algorithm 1 line 10);
            --calibration overrides it
        breadth_max_seconds: Breadth-Aware Fallback: a proposed window longer than this many seconds is treated as
            globally dependent and the Stage-1 answer is kept (CADER "Temporal Segment Proposal")
        breadth_max_fraction: Breadth-Aware Fallback: likewise for a window wider than this fraction of the video
            (CADER "Temporal Segment Proposal")
        min_crop: shortest crop in seconds; shorter windows are expanded symmetrically around their midpoint (CADER
            "Temporal Segment Proposal", App. C.2)
        crop_edge: a minimum-length crop crossing the start or end of the video: shift slides it back inside, clip
            cuts it at the edge (left open by the CADER paper)
        n_budget: N_budget, the frame budget of a crop: r2 = clip(N_budget / D_crop, r_min, r_max) (CADER "Local
            Evidence Verification", Eq. 4)
        r_min: lowest frame rate of a crop in fps (CADER Eq. 4)
        r_max: highest frame rate of a crop in fps (CADER Eq. 4)
        delta: the verifier accepts a crop iff P_yes >= delta (CADER "Local Evidence Verification")
        p_yes_mode: P_yes as the probability of "Yes" over the whole vocabulary (vocab, CADER App. C.3) or
            renormalised over Yes and No (yes_no)
        k_reflections: K reflection rounds after the first proposal, so at most K + 1 crop-and-verify cycles (CADER
            "Reflection-based Temporal Search")
        f_min: floor of a verified segment's resampling rate f = min(f_max, P_yes + f_min) in fps (CADER
            "Relevance-Guided Resampling", Eq. 5)
        f_max: cap of that rate in fps (1.0 in CADER Eq. 5, equal to r1, so explored regions are never denser)
        max_frames: most frames of one video input, Qwen3-VL's video processor cap (CADER "Implementation
            Details": Stage 1 follows the backbone's frame budget)
        max_pixels: pixels per video frame (CADER App. A: 65,536)
        decode_workers: parallel video decoders per sample (null: the usable cores, at most 8); not part of the
            method
        grid_max_bytes: most pixel bytes of a video's one whole-video decode (F1 and the r1 lattice the RGR contexts
            are taken from, with F1's copy: 30 minutes of 16:9 video at 65,536 px hold 3,336 frames, 615 MB); beyond
            it F1 is decoded alone and each RGR context on its own (the same frames), counted in cost.grid_fallback;
            0: always; not part of the method
        trade_rgr_frames_for_speed: speed option, off by default: take every RGR context from F1's decode instead of
            the r1 lattice, so a video is decoded at F1's density only, and a context on a video longer than the
            frame budget holds fewer frames than Algorithm 2's count (each resample step records frames_lost,
            report.json sums cost.rgr_frames_lost); not the CADER paper's method
        max_new_tokens_propose: generation length of a temporal proposal, thinking on (not published in the CADER
            paper)
        max_new_tokens_answer: generation length of the Stage-2 final answer, thinking on (not published in the
            CADER paper)
    """

    variant: str = PAPER.variant
    # Stage 1
    r1: float = PAPER.r1
    # "backbone": Qwen's own pipeline (qwen-vl-utils fetch_video + the Qwen3-VL processor); "bin_centre": the rule
    # RGR's segments use (cader.vlm.sampling). F1 and the crops follow it; training does not read it.
    frame_rule: str = DEPARTURES["frame_rule"].value
    temperature: float = PAPER.temperature
    tau: float = PAPER.tau
    # Stage 2: proposal
    breadth_max_seconds: float = PAPER.breadth_max_seconds
    breadth_max_fraction: float = PAPER.breadth_max_fraction
    min_crop: float = PAPER.min_crop
    # What happens when the expanded crop crosses 0 or the end of the video. The paper states the minimum as a
    # rule on the window ("enforcing a minimum duration of 10 s", Stage 2 "Temporal Segment Proposal"; "The window
    # must be at least {min_crop} seconds wide", C.2), so by default the crop keeps it at the edges too:
    # "shift" (default): slide the window back inside, keeping min_crop whenever the video is that long.
    # "clip": cut at the edge, so a crop at the very start or end may be shorter than min_crop.
    crop_edge: str = DEPARTURES["crop_edge"].value
    # Stage 2: verification
    n_budget: float = PAPER.n_budget
    r_min: float = PAPER.r_min
    r_max: float = PAPER.r_max
    delta: float = PAPER.delta
    # "P_yes is the token probability assigned to Yes" (C.3): softmax over the full vocabulary ("vocab").
    # "yes_no" renormalises over the two tokens {Yes, No} (a common variant; not the paper's).
    p_yes_mode: str = DEPARTURES["p_yes_mode"].value
    # Stage 2: reflection and RGR
    k_reflections: int = PAPER.k_reflections
    f_min: float = PAPER.f_min
    f_max: float = PAPER.f_max
    # Backbone budgets (Stage 1 "follows the backbone's internal visual-frame/token budget").
    max_frames: int = DEPARTURES["max_frames"].value
    max_pixels: int = DEPARTURES["max_pixels"].value
    # Parallel video decoders per sample (None: the usable cores, at most 8). Not part of the method: lower it
    # when several shards share one machine.
    decode_workers: int | None = None
    # F1 and the r1 lattice in one decode per video (cader.evaluate.method.whole_video) while its pixels fit this
    # bound: 2 GiB hold 11,650 frames of 192 x 320, i.e. 16:9 videos up to 2.8 hours at the paper's settings.
    grid_max_bytes: int = 2**31
    # The speed option: RGR contexts from F1's frames (fewer frames than Algorithm 2 asks for on long videos).
    trade_rgr_frames_for_speed: bool = DEPARTURES["trade_rgr_frames_for_speed"].value
    # Generation lengths. The paper does not publish them; thinking outputs of Qwen3-VL need room.
    max_new_tokens_propose: int = DEPARTURES["max_new_tokens_propose"].value
    max_new_tokens_answer: int = DEPARTURES["max_new_tokens_answer"].value

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        if self.variant not in VARIANTS:
            raise ValueError(f"unknown variant {self.variant!r}; choose one of {', '.join(VARIANTS)}")
        if self.crop_edge not in CROP_EDGE_MODES:
            raise ValueError(f"crop_edge must be one of {CROP_EDGE_MODES}, got {self.crop_edge!r}")
        if self.frame_rule not in FRAME_RULES:
            raise ValueError(f"frame_rule must be one of {FRAME_RULES}, got {self.frame_rule!r}")
        if self.p_yes_mode not in P_YES_MODES:
            raise ValueError(f"p_yes_mode must be one of {P_YES_MODES}, got {self.p_yes_mode!r}")
        positive = (
            "r1",
            "temperature",
            "min_crop",
            "n_budget",
            "r_min",
            "r_max",
            "f_max",
            "breadth_max_seconds",
        )
        for name in positive:
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
                raise ValueError(f"{name} must be a finite positive number, got {value!r}")
        if self.r_min > self.r_max:
            raise ValueError(f"r_min ({self.r_min}) must not exceed r_max ({self.r_max})")
        if not 0 < self.breadth_max_fraction <= 1:
            raise ValueError(f"breadth_max_fraction must be in (0, 1], got {self.breadth_max_fraction}")
        if self.k_reflections < 0:
            raise ValueError(f"k_reflections must be >= 0, got {self.k_reflections}")
        if self.f_min < 0:
            raise ValueError(f"f_min must be >= 0, got {self.f_min}")
        for name in ("max_frames", "max_pixels", "max_new_tokens_propose", "max_new_tokens_answer"):
            if int(getattr(self, name)) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if int(self.grid_max_bytes) < 0:
            raise ValueError(f"grid_max_bytes must be >= 0, got {self.grid_max_bytes}")
        if self.decode_workers is not None and int(self.decode_workers) < 1:
            raise ValueError(f"decode_workers must be >= 1 or None, got {self.decode_workers}")
        for name in ("tau", "delta"):
            if not math.isfinite(getattr(self, name)):
                raise ValueError(f"{name} must be finite")

    # --- what each Table 2 row switches off -------------------------------------------------------------
    @property
    def runs_stage2(self) -> bool:
        """w/o Stage 2: Stage 1 only; A1 is the answer for every sample."""
        return self.variant != "no_stage2"

    @property
    def routes_all(self) -> bool:
        """Uniform S2: "disables early exit and routes every sample to Stage 2"."""
        return self.variant == "uniform_stage2"

    @property
    def uses_verifier(self) -> bool:
        """w/o Verifier: "accepting every proposed segment without relevance checking"."""
        return self.variant != "no_verifier"

    @property
    def reflections(self) -> int:
        """w/o Refl. is K = 0 (Table 2; App. D)."""
        return 0 if self.variant == "no_reflection" else int(self.k_reflections)

    @property
    def uses_rgr(self) -> bool:
        """w/o RGR: reflection proposals see the uniform Stage-1 frames F1 again instead of the fps map."""
        return self.variant != "no_rgr"

    @property
    def resamples_on_grid(self) -> bool:
        """Whether the RGR contexts are taken from the video's one whole-video decode (`cader.vlm.frame_grid`):
        Stage 2 may resample (a verifier, RGR and at least one reflection), no explored segment is denser than r1
        (f_max <= r1), so the r1 lattice holds every frame Algorithm 2 asks for. (`grid_max_bytes` decides whether
        the lattice is decoded with F1 or each context on its own: the same frames either way.)"""
        return (self.runs_stage2 and self.uses_verifier and self.uses_rgr and self.reflections > 0
                and self.f_max <= self.r1)

    @property
    def decodes_lattice(self) -> bool:
        """Whether the whole-video decode holds the r1 lattice besides F1 (it does not under the speed option)."""
        return self.resamples_on_grid and not self.trade_rgr_frames_for_speed

    def to_dict(self) -> dict:
        return asdict(self)