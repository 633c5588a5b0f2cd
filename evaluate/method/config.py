"""Every constant of CADER in one place, with the paper's values as defaults.

Sources (cader.txt): r1 = 1.0 fps (Eq. 1), T = 2.0 (Eq. 2), tau = 0.97 (Algorithm 1 line 10), breadth-aware
fallback at 1200 s / 20 % of the video ("Temporal Segment Proposal"), minimum crop 10 s, N_budget = 512 and
r2 clipped to [1.0, 8.0] fps (Eq. 4), delta = 0.60 ("Local Evidence Verification"), K = 2 reflections
("Reflection-based Temporal Search"), f_min = 0.4 (Eq. 5). Frame/pixel budgets follow the backbone: Qwen3-VL's
video processor caps a clip at 768 frames, and App. A uses 65,536 pixels per video frame.

Anything the paper leaves open is a named option here with the choice documented next to it.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields

# Paper Table 2 rows.
VARIANTS = ("full", "no_stage2", "uniform_stage2", "no_verifier", "no_reflection", "no_rgr")
CROP_EDGE_MODES = ("clip", "shift")
P_YES_MODES = ("vocab", "yes_no")


@dataclass
class CaderConfig:
    variant: str = "full"
    # Stage 1
    r1: float = 1.0  # base frame rate (fps), Eq. 1
    temperature: float = 2.0  # T, Eq. 2
    tau: float = 0.97  # early-exit threshold on M, Algorithm 1 line 10
    # Stage 2: proposal
    breadth_max_seconds: float = 1200.0  # a window wider than this is "globally dependent" -> A1
    breadth_max_fraction: float = 0.20  # ... or wider than this fraction of the video
    min_crop: float = 10.0  # seconds; shorter windows are expanded symmetrically around their midpoint
    # What happens when the expanded crop crosses 0 or the end of the video. The paper states the minimum as a
    # rule on the window ("enforcing a minimum duration of 10 s", Stage 2 "Temporal Segment Proposal"; "The window
    # must be at least {min_crop} seconds wide", C.2), so by default the crop keeps it at the edges too:
    # "shift" (default): slide the window back inside, keeping min_crop whenever the video is that long.
    # "clip": cut at the edge, so a crop at the very start or end may be shorter than min_crop.
    crop_edge: str = "shift"
    # Stage 2: verification
    n_budget: float = 512.0  # N_budget of Eq. 4 (frames)
    r_min: float = 1.0  # fps, Eq. 4
    r_max: float = 8.0  # fps, Eq. 4
    delta: float = 0.60  # accept a segment iff P_yes >= delta
    # "P_yes is the token probability assigned to Yes" (C.3): softmax over the full vocabulary ("vocab").
    # "yes_no" renormalises over the two tokens {Yes, No} (a common variant; not the paper's).
    p_yes_mode: str = "vocab"
    # Stage 2: reflection and RGR
    k_reflections: int = 2  # K, at most K + 1 crop-and-verify cycles
    f_min: float = 0.4  # Eq. 5: f = min(1.0, P_yes + f_min)
    f_max: float = (
        1.0  # the 1.0 cap of Eq. 5 (equal to r1 in the paper, so explored regions are never denser)
    )
    # Backbone budgets (Stage 1 "follows the backbone's internal visual-frame/token budget").
    max_frames: int = 768
    max_pixels: int = 65_536
    # Parallel video decoders per sample (None: the usable cores, at most 8). Not part of the method: lower it
    # when several shards share one machine.
    decode_workers: int | None = None
    # Generation lengths. The paper does not publish them; thinking outputs of Qwen3-VL need room.
    max_new_tokens_propose: int = 2048
    max_new_tokens_answer: int = 2048

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        if self.variant not in VARIANTS:
            raise ValueError(f"unknown variant {self.variant!r}; choose one of {', '.join(VARIANTS)}")
        if self.crop_edge not in CROP_EDGE_MODES:
            raise ValueError(f"crop_edge must be one of {CROP_EDGE_MODES}, got {self.crop_edge!r}")
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

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def field_names(cls) -> list[str]:
        return [f.name for f in fields(cls)]
