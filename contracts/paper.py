"""The CADER paper's settings in one place (/work/shared/papers/cader.txt), each with the section it comes from, and
every setting the code uses where the paper is silent or where a shipped configuration differs on purpose.

- `PAPER` (`PaperInference`): the models, the precision and every constant of the method (Method, Implementation
  Details, App. C, App. E). `CaderConfig`'s defaults, `evaluate/run.py`'s `--model`/`--verifier`/`--dtype`, the
  lmms-eval model's model_args and configs/eval/cader.yaml read them from here.
- `TRAINING` (`PaperTraining`): the SFT recipe of App. A, Table 6 (configs/train/cot_mix.yaml).
- `DEPARTURES`: the values the code uses where the paper gives none, or reads it one way of several, each with why.
- `MINIATURE` and `MINIATURE_CONFIGS`: what the CPU/tiny configurations change, and which configurations they are.
- `SELF_VERIFIER`: the `--verifier` value that makes the main model verify its own crops, the one way to leave the
  paper's two-model Stage 2.

tests/test_paper_values.py reads the default of every entry point (`--help`, every shipped YAML, the lmms-eval
model's arguments, the server backend's roles) and checks each against this module. Nothing here imports a stage:
every stage may read it.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any


def cite(value, section: str):
    """A dataclass field whose default is the paper's `value`, `section` saying where the paper gives it."""
    return field(default=value, metadata={"section": section})


@dataclass(frozen=True)
class PaperInference:
    """CADER at inference, as the paper runs it."""

    model: str = cite("Qwen/Qwen3-VL-8B-Instruct",
                      "Implementation Details ('Qwen3-VL-8B-Instruct as the primary model'); Stage 1, Confidence "
                      "Estimation via Logit Margin")
    verifier: str = cite("Qwen/Qwen3-VL-4B-Instruct",
                         "Implementation Details ('Qwen3-VL-4B-Instruct as the lightweight verifier'); Local Evidence "
                         "Verification; App. C.3")
    dtype: str = cite("bfloat16", "Implementation Details ('inference is run with bfloat16 precision')")
    variant: str = cite("full", "Table 2, row Full")
    r1: float = cite(1.0, "Stage 1, Frame Sampling Strategy, Eq. 1; Algorithm 1 line 5")
    temperature: float = cite(2.0, "Stage 1, Eq. 2; Algorithm 1 line 7")
    tau: float = cite(0.97, "Stage 1, Eq. 3; Implementation Details; Algorithm 1 line 10")
    breadth_max_seconds: float = cite(1200.0, "Temporal Segment Proposal, Breadth-Aware Fallback")
    breadth_max_fraction: float = cite(0.20, "Temporal Segment Proposal, Breadth-Aware Fallback")
    min_crop: float = cite(10.0, "Temporal Segment Proposal; Implementation Details; App. C.2")
    n_budget: float = cite(512.0, "Local Evidence Verification, Eq. 4; Implementation Details; Algorithm 1 line 22")
    r_min: float = cite(1.0, "Eq. 4; Implementation Details")
    r_max: float = cite(8.0, "Eq. 4; Implementation Details")
    delta: float = cite(0.60, "Local Evidence Verification; Implementation Details; Algorithm 1 line 27")
    k_reflections: int = cite(2, "Reflection-based Temporal Search; Implementation Details; App. D")
    f_min: float = cite(0.4, "Relevance-Guided Resampling, Eq. 5")
    f_max: float = cite(1.0, "Eq. 5 (f = min(1.0, P_yes + f_min)); Algorithm 1 line 25")


@dataclass(frozen=True)
class PaperTraining:
    """The Qwen3-VL-SFT recipe (App. A, Table 6 and Data Preprocessing)."""

    model_path: str = cite("Qwen/Qwen3-VL-8B-Instruct", "App. A, Base Model; Table 6")
    full_parameter: bool = cite(True, "Table 6, Fine-tuning type")
    epochs: int = cite(1, "Table 6, Training epochs")
    lr: float = cite(1.0e-5, "Table 6, Learning rate")
    effective_batch: int = cite(16, "Table 6, Effective batch size")
    max_length: int = cite(10_240, "Table 6, Max sequence length")
    warmup_ratio: float = cite(0.1, "Table 6, Warmup ratio")
    lr_scheduler: str = cite("cosine", "Table 6, LR scheduler")
    precision: str = cite("bfloat16", "Table 6, Precision")
    fps: float = cite(1.0, "App. A, Data Preprocessing")
    max_frames: int = cite(4_096, "App. A, Data Preprocessing")
    video_max_pixels: int = cite(65_536, "App. A, Data Preprocessing")
    image_max_pixels: int = cite(262_144, "App. A, Data Preprocessing")


PAPER = PaperInference()
TRAINING = PaperTraining()

# --verifier SELF_VERIFIER: the main model scores its own crops. Not the paper's Stage 2 (a 4B verifier beside the 8B
# main model) and about twice the verifier's cost; report.json and every Stage-2 record say so.
SELF_VERIFIER = "main_model"


@dataclass(frozen=True)
class Departure:
    """A value the code uses where the paper gives none, or that it reads one way of several; `reason` says why.
    A tuple `value` lists the values the configurations it covers take, one each."""

    value: Any
    reason: str

    def allows(self, value) -> bool:
        return value in self.value if isinstance(self.value, tuple) else value == self.value


DEPARTURES: dict[str, Departure] = {
    "model": Departure(None, "no default main model: a run names the model it evaluates (the paper's backbone, or the "
                             "Qwen3-VL-SFT export it fine-tunes), rather than fetch 16 GB unasked"),
    "max_frames": Departure(768, "Stage 1 'follows the backbone's internal visual-frame/token budget' "
                                 "(Implementation Details) without a number: Qwen3-VL's video processor caps a clip at "
                                 "768 frames"),
    "max_pixels": Departure(65_536, "the paper gives pixels per video frame only for training (App. A); inference "
                                    "uses the same budget"),
    "crop_edge": Departure("shift", "the paper does not say what a minimum-length crop does at the video's edges; "
                                    "'shift' keeps the 10 s minimum there too (C.2: 'at least min_crop seconds wide')"),
    "p_yes_mode": Departure("vocab", "C.3 says only 'the token probability of Yes': read as the softmax over the "
                                     "whole vocabulary ('yes_no' renormalises over the two words)"),
    "max_new_tokens_propose": Departure(2048, "not published; a thinking proposal needs room"),
    "max_new_tokens_answer": Departure(2048, "not published; a thinking answer needs room"),
    "decoding": Departure("greedy", "no sampling settings are published; greedy keeps runs reproducible"),
    "frame_rule": Departure("backbone", "the paper says only 'uniformly sampled at 1 fps' (Eq. 1) and 'Sample(C, r2)' "
                                        "(Algorithm 1 line 23): frames are placed as the backbone's own pipeline places "
                                        "them (qwen-vl-utils fetch_video: an even count, endpoint-inclusive times); "
                                        "'bin_centre' is the other reading (docs/method.md)"),
    "trade_rgr_frames_for_speed": Departure(False, "off: every RGR context holds Algorithm 2's counts (App. E); on "
                                                   "trades frames of long videos' contexts for a lighter decode"),
}

# Settings of a run that are not part of the method (how fast, where, how much memory): the paper has nothing to say
# about them, so they are neither paper values nor departures.
NOT_METHOD = frozenset({"decode_workers", "grid_max_bytes", "device", "attn_implementation", "progress", "backend",
                        "vllm_main", "vllm_verifier", "server", "hf_max_batch_tokens", "concurrency"})

# The CPU/tiny configurations: the miniature (tiny Qwen3-VL pair, synthetic data) and the CPU route of the GPU recipe.
MINIATURE_CONFIGS = ("configs/eval/cader_tiny.yaml", "configs/train/cot_mix_tiny.yaml",
                     "configs/train/pretrain_tiny.yaml", "configs/train/cpu.yaml")
_CPU = "a CPU runs bf16 matmuls several times slower than fp32, and the miniature's records were measured in fp32"
MINIATURE: dict[str, Departure] = {
    "dtype": Departure("float32", _CPU),
    "precision": Departure("32-true", _CPU),
    "model": Departure("runs/tiny/sft/export", "the miniature's main model: the tiny Qwen3-VL after its SFT"),
    "model_path": Departure(("runs/tiny/model", "runs/tiny/model_pretrain/random"),
                            "the miniature's backbone: the tiny Qwen3-VL (scripts/make_tiny_model.py), before or after "
                            "its stand-in for pre-training"),
    "verifier": Departure("runs/tiny/verifier", "the miniature's verifier: a narrower tiny Qwen3-VL taught the C.3 "
                                                "role (scripts/make_tiny_model.py --role verifier)"),
    "max_frames": Departure(32, "the tiny model sees at most 32 frames a video, in training and at inference"),
    "max_pixels": Departure(2048, "the synthetic videos are 96 x 64 px"),
    "video_max_pixels": Departure(2048, "the synthetic videos are 96 x 64 px"),
    "image_max_pixels": Departure(2048, "the synthetic images are 96 x 64 px"),
    "max_length": Departure(2048, "32 frames of 2048 px and a short target fit in 2048 tokens"),
    "fps": Departure(2.0, "a 16 s clip at 2 fps has the density of a Stage-2 crop capped at 32 frames"),
    "lr": Departure(0.002, "the tiny model is barely trained: a few CPU minutes need a far larger step"),
    "epochs": Departure((5, 25), "minutes of one core on a few hundred synthetic rows: several passes over them "
                                 "(the SFT 5, the grounding pass 25)"),
    "effective_batch": Departure(8, "8 rows a step on one CPU process"),
    "max_new_tokens_propose": Departure(32, "the trained proposal is 22 tokens with its empty think block and end"),
    "max_new_tokens_answer": Departure(16, "the trained answer is 14 tokens with its empty think block and end"),
}


def section(name: str, paper=PAPER) -> str:
    """Where the paper gives the setting `name` of `paper` (PAPER or TRAINING); KeyError when it is not one."""
    for f in fields(paper):
        if f.name == name:
            return f.metadata["section"]
    raise KeyError(f"{name} is not a paper setting of {type(paper).__name__}")


def paper_values(paper=PAPER) -> dict[str, Any]:
    """{setting: the paper's value} of PAPER or TRAINING."""
    return {f.name: getattr(paper, f.name) for f in fields(paper)}


def is_self_verifier(verifier: str | None, model: str | None) -> bool:
    """Whether `verifier` (a --verifier value) makes the main model `model` verify its own crops: SELF_VERIFIER, or the
    main model's own folder or hub id named again."""
    return verifier == SELF_VERIFIER or (verifier is not None and verifier == model)
