"""The files that join the stages, as pydantic models: a predictions.jsonl record (with its Stage-1 and Stage-2
parts), its wall-clock time in timings.jsonl, the calibration file calibration.json, and a judgments.jsonl record.

Writers build their records through these models and readers validate through them, so a record that breaks the
contract is named by file, line and field where it is read rather than failing somewhere downstream. Every model
keeps unknown keys (a field a newer writer adds survives an older reader) and checks values strictly: a number
must be a JSON number, a flag a JSON boolean. `docs/contracts.md` is generated from these models.

Paper references: "CADER" is the CADER paper (sections named as in its text, supplementary C and E), "AgentVidBench"
the AgentVidBench paper (appendix D).
"""

from __future__ import annotations

import math
from typing import Annotated, Any, Literal

from cader.contracts.calibration import CalibrationFile
from cader.contracts.judgments import JudgmentRecord
from cader.contracts.types import Id, Number, Record, Window
from pydantic import BaseModel, Field, ValidationError, field_validator
from pydantic_core import PydanticCustomError

__all__ = [
    "AnswerParseRecord", "AnswerStep", "CalibrationFile", "Cost", "FramesFingerprint", "JudgmentRecord",
    "PredictionRecord", "ProposeStep", "ResampleStep", "Stage1Fingerprint", "Stage1Record", "Stage2Record",
    "Stage2Step", "TimingRecord", "VerifierUsed", "VerifyStep", "WindowParseRecord", "build_record",
    "describe_errors", "describe_validation_error", "present_field_errors", "present_field_problem", "split_timing",
]

NON_FINITE = "non_finite"  # the error type (and a reader's reason) of a NaN or infinite number the contract refuses


def json_spelling(value: float) -> str:
    """NaN, Infinity or -Infinity: how Python's json module writes a non-finite float (what the file holds)."""
    return "NaN" if math.isnan(value) else "Infinity" if value > 0 else "-Infinity"


def finite_or_refused(value, what: str):
    """`value` (a Number or a list of them) unchanged when every number in it is finite; else a `non_finite`
    error naming the first one. A reader cannot order, sum or threshold a NaN, so a record holding one where the
    method computes (logits, margin) is broken, not merely odd."""
    numbers = value if isinstance(value, list) else [value]
    for position, number in enumerate(numbers):
        if isinstance(number, float) and not math.isfinite(number):
            where = f" at position {position}" if isinstance(value, list) else ""
            raise PydanticCustomError(NON_FINITE, "{what} must be finite, got {got}{where}",
                                      {"what": what, "got": json_spelling(number), "where": where})
    return value


# ---- Stage 1 -------------------------------------------------------------------------------------------------------


class FramesFingerprint(Record):
    """The Stage-1 frame settings a stored Stage-1 result depends on."""

    r1: Number = Field(
        description="Stage-1 frame rate in fps (CADER, Stage 1: Frame Sampling Strategy, Eq. 1)."
    )
    max_frames: int = Field(description="Frame cap: Stage-1 frames are uniformly subsampled down to it.")
    max_pixels: int = Field(description="Pixel budget per frame.")
    frame_rule: Literal["backbone", "bin_centre"] | None = Field(
        default=None, description="Where the frames are placed (docs/video.md, Which frames); absent: bin_centre, the "
                                  "rule of every record written before the rule was named.")


class Stage1Fingerprint(Record):
    """What a stored Stage-1 result depends on; a run reusing it (`--stage1_from`) refuses a mismatch."""

    model: str | None = Field(description="Identity of the main model (config, weight files, chat template).")
    frames: FramesFingerprint = Field(description="The Stage-1 frame settings.")
    sample: str = Field(description="Digest of video, question, options and letters.")


class Stage1Record(Record):
    """Stage 1, global preliminary reasoning (CADER, Stage 1; Algorithm 1 lines 4-12)."""

    logits: list[Number] = Field(
        description="Raw option logits z_i before temperature, one per letter in `letters` order (CADER, Stage 1: "
        "Confidence Estimation via Logit Margin); each finite (NaN and Infinity are refused)."
    )
    pred: str = Field(description="A1, the letter of the largest logit (Algorithm 1 line 9).")
    margin: Number | None = Field(
        description="M = P_top1 - P_top2 of softmax(z / T) (CADER Eq. 2-3), finite; null only in rows that did not "
        "compute it."
    )
    temperature: Number = Field(
        description="T of the temperature-scaled softmax (CADER Eq. 2; paper value 2.0)."
    )
    n_frames: int = Field(
        description="Frames shown to the model: N1 (CADER Eq. 1), capped at the frame budget."
    )
    fps: Number = Field(description="r1, the Stage-1 frame rate in fps (CADER Eq. 1; paper value 1.0).")
    tau: Number = Field(
        default=None,
        description="The early-exit threshold: exit iff M >= tau (CADER, Stage 1; paper value 0.97).",
    )
    fingerprint: Stage1Fingerprint = Field(
        default=None, description="What this result depends on (for reuse)."
    )
    reused: bool = Field(default=None, description="True when the logits came from an earlier run's record.")

    @field_validator("logits", "margin")
    @classmethod
    def _finite(cls, value, info):
        return finite_or_refused(value, "a logit" if info.field_name == "logits" else "the margin")


# ---- Stage 2 -------------------------------------------------------------------------------------------------------


class WindowParseRecord(Record):
    """How a proposal reply was read as a time window (CADER supplementary C.2 asks for `relevant_windows`)."""

    window: Window | None = Field(
        description="[t_s, t_e] in seconds, clipped to the video; null when none was read."
    )
    raw: Window | None = Field(default=None, description="The two numbers as written, in seconds.")
    how: str | None = Field(
        description='Which pattern matched: "keyed", "bracket" or "prose"; null when none did.'
    )
    swapped: bool = Field(default=None, description="The reply gave start > end; the two were swapped.")
    clipped: bool = Field(default=None, description="A value lay outside [0, duration] and was clipped.")
    reason: str | None = Field(default=None, description="Why `window` is null.")
    n_windows: int = Field(default=None, description="Windows in the chosen list (the first is used).")


class AnswerParseRecord(Record):
    """How the final reply was read as a letter (CADER, Final Local Reasoning: structured parsing with a
    single-letter fallback; supplementary C.4)."""

    letter: str | None = Field(description="The letter read; null when the reply holds none.")
    how: str | None = Field(description='Where and by which rule it was read, "<where>/<rule>".')
    reason: str | None = Field(default=None, description="Why `letter` is null.")


class ProposeStep(Record):
    """A temporal segment proposal (CADER, Temporal Segment Proposal; Algorithm 1 lines 17-20)."""

    phase: Literal["propose"] = Field(description="Step kind.")
    iteration: int = Field(
        description="iter of Algorithm 1: 0 for the first proposal, then one per reflection."
    )
    context: Literal["F1", "rgr"] = Field(
        description="Frames the proposal saw: the Stage-1 frames F1, or F_reflect from Relevance-Guided Resampling."
    )
    n_frames: int = Field(description="Frames in that context.")
    tried: list[Window] = Field(
        description="Windows already rejected, shown to the model (spatio-temporal exclusion)."
    )
    raw_output: str = Field(description="The main model's reply, as generated.")
    parsed: WindowParseRecord = Field(description="How the reply was read.")
    window: Window | None = Field(description="The proposed [t_s, t_e] in seconds; null when unparseable.")
    too_broad: bool = Field(
        default=None,
        description="Breadth-Aware Fallback fired: wider than 1200 s or 20 % of the video (CADER, Temporal Segment "
        "Proposal); absent when no window was read.",
    )


class VerifyStep(Record):
    """Crop, budget-aware dense sampling and verification (CADER, Local Evidence Verification; Algorithm 1
    lines 21-27)."""

    phase: Literal["verify"] = Field(description="Step kind.")
    iteration: int = Field(description="iter of Algorithm 1.")
    window: Window = Field(description="The proposed [t_s, t_e] in seconds.")
    crop: Window = Field(
        description="The crop: the window widened symmetrically to at least 10 s, inside the video."
    )
    r2: Number = Field(
        description="r2 = clip(N_budget / D_crop, r_min, r_max), the crop's frame rate (CADER Eq. 4)."
    )
    n_frames: int = Field(description="Frames of the crop shown to the verifier.")
    p_yes: Number | None = Field(
        default=None,
        description="P_yes, the verifier's probability of Yes (CADER, Local Evidence Verification); null when the "
        "variant skips the verifier, absent when the verifier call failed (the record's `error` says why).",
    )
    p_yes_vocab: Number = Field(default=None, description="P(Yes) over the whole vocabulary.")
    p_no_vocab: Number = Field(default=None, description="P(No) over the whole vocabulary.")
    f: Number = Field(
        default=None, description="f = min(1, P_yes + f_min), the segment's RGR frame rate (CADER Eq. 5)."
    )
    accepted: bool = Field(
        default=None,
        description="P_yes >= delta (CADER, Local Evidence Verification; paper delta 0.60); absent when the "
        "verifier call failed.",
    )
    skipped: bool = Field(default=None, description="True when the variant accepts every segment unverified.")


class ResampleStep(Record):
    """The context for the next proposal (CADER, Relevance-Guided Resampling; Algorithm 1 lines 35-37)."""

    phase: Literal["resample"] = Field(description="Step kind.")
    iteration: int = Field(description="The iteration whose proposal this context feeds.")
    mode: Literal["uniform_f1", "rgr"] = Field(
        description='"rgr": Relevance-Guided Resampling (CADER supplementary E, Algorithm 2); "uniform_f1": the '
        "Stage-1 frames again (the w/o RGR variant)."
    )
    fps_map: list[list[Number]] = Field(
        default=None, description="The fused fps map P as [start, end, fps] rows (CADER Eq. 6-7)."
    )
    unexplored: list[Window] = Field(
        default=None, description="Intervals no scored segment covers, sampled at r1."
    )
    n_frames_planned: int = Field(default=None, description="N_reflect before the frame cap (CADER Eq. 9).")
    n_frames: int = Field(description="Frames in the new context.")
    frames_lost: int = Field(
        default=None, description="Under trade_rgr_frames_for_speed only: frames the context lacks of Algorithm 2's "
                                  "count after the frame cap (taken from F1's frames); absent otherwise.")


class AnswerStep(Record):
    """Final local reasoning on the accepted crop (CADER, Final Local Reasoning; Algorithm 1 line 28)."""

    phase: Literal["answer"] = Field(description="Step kind.")
    window: Window = Field(description="The crop the answer was given on, in seconds.")
    n_frames: int = Field(description="Frames of the crop shown to the main model.")
    raw_output: str = Field(description="The main model's reply, as generated.")
    parsed: AnswerParseRecord = Field(description="How the reply was read.")
    pred: str = Field(description="The final answer A: the parsed letter, else A1.")
    fallback_to_stage1: bool = Field(description="True when no letter could be read and A1 was kept.")


Stage2Step = Annotated[ProposeStep | VerifyStep | ResampleStep | AnswerStep, Field(discriminator="phase")]


class VerifierUsed(Record):
    """Which model scored a sample's crops (CADER, Local Evidence Verification: Qwen3-VL-4B-Instruct, App. C.3)."""

    model: str | None = Field(
        description="The verifier's folder or hub id; null for a backend that names no model (a test double)."
    )
    main_model: bool = Field(
        description="True when the main model verified its own crops (--verifier main_model): not the paper's "
        "Stage 2, whose verifier is a separate, smaller model."
    )


class Stage2Record(Record):
    """Stage 2, tool-assisted fine-grained reasoning (CADER, Stage 2; Algorithm 1 lines 14-40)."""

    pred: str | None = Field(
        description="The Stage-2 answer (A1 on a fallback); null when Stage 2 failed part-way (see `error`)."
    )
    accepted: Window | None = Field(
        description="The accepted window [t_s*, t_e*] in seconds; null if none was."
    )
    cycles: int = Field(
        description="Crop-and-verify cycles run, at most K + 1 (CADER, Reflection-based Temporal Search)."
    )
    fallback: Literal["unparseable_proposal", "too_broad", "not_accepted"] | None = Field(
        description="Why A1 was returned: no window read, the Breadth-Aware Fallback, or no segment accepted within "
        "K reflections (Algorithm 1 lines 19 and 40); null when a segment was accepted."
    )
    steps: list[Stage2Step] = Field(description="Every step in the order it happened, told apart by `phase`.")
    verifier: VerifierUsed = Field(
        default=None,
        description="The verifier of this sample's crops; absent when the variant skips the verifier, and in records "
        "written before it was recorded.",
    )


# ---- the prediction record -----------------------------------------------------------------------------------------


class Cost(Record):
    """What one sample cost."""

    forwards: int = Field(description="Model calls (one prefill each).")
    frames_decoded: int = Field(description="Video frames decoded.")
    prompt_tokens: int = Field(description="Prompt tokens over every call.")
    completion_tokens: int = Field(description="Generated tokens over every call.")
    seconds: Number | None = Field(
        default=None,
        description="Wall time of the sample in records written before timings.jsonl held it; absent now, so that "
                    "two machines' predictions files are equal byte for byte (the time is in timings.jsonl).")
    grid_fallback: int | None = Field(
        default=None,
        description="1 when the sample's RGR contexts were decoded on their own because the video's whole-video "
                    "decode (F1 and the r1 lattice) would exceed grid_max_bytes (evaluate/method/whole_video.py); "
                    "absent otherwise.")
    rgr_frames_lost: int | None = Field(
        default=None,
        description="Under trade_rgr_frames_for_speed only: the frames_lost of the sample's RGR contexts, summed "
                    "(report.json sums it over the run); absent otherwise.")
    flops: dict[str, Number] | None = Field(
        default=None,
        description="Language-model FLOPs by role: stage1, main (incl. stage1), verifier, total "
                    "(calibrate/compute.py); absent in records written before it was counted.")
    frames_shared: int | None = Field(
        default=None,
        description="Of frames_decoded, the frames taken from a decode made for an earlier question of the same video "
                    "or another variant of the sample (grouped runs, --variants); decoded for real: frames_decoded - "
                    "frames_shared. Absent when nothing is shared.")
    forwards_shared: int | None = Field(
        default=None,
        description="Of forwards, the calls answered from memory: the same call already made for another variant "
                    "of the sample (--variants). Absent when nothing is shared.")


class PredictionRecord(Record):
    """One line of predictions.jsonl: one benchmark sample through CADER (CADER, Method Overview; Algorithm 1)."""

    benchmark: str = Field(description="Benchmark name as registered (e.g. videomme_long).")
    sample_id: str = Field(description="The sample's id within its benchmark.")
    video: str = Field(description="Video path relative to the benchmark's data root.")
    duration: Number | None = Field(
        description="Video duration D in seconds: as decoded (rounded to ms), else as the benchmark states it."
    )
    question: str = Field(description="The question Q.")
    options: list[str] = Field(description="Option texts O_i, in letter order.")
    letters: list[str] = Field(description="Option letters, one per option.")
    answer: str | None = Field(description="The gold letter; null when the benchmark has none.")
    question_id: Id | None = Field(default=None, description="The benchmark's question id, when it has one.")
    meta: dict[str, Any] = Field(
        default_factory=dict, description="Benchmark-specific fields (task type, ...)."
    )
    stage1: Stage1Record | None = Field(description="Stage 1; null when the sample failed before it.")
    route: Literal["exit", "stage2"] | None = Field(
        description='"exit" when M >= tau (or the variant has no Stage 2), "stage2" otherwise (CADER, Stage 1: '
        "Confidence Estimation via Logit Margin); null when Stage 1 did not finish."
    )
    stage2: Stage2Record | None = Field(description="Stage 2; null when the sample exited after Stage 1.")
    pred: str | None = Field(description="The final answer; null when the sample failed.")
    correct: bool | None = Field(description="pred == answer; null without a gold letter; false when failed.")
    cost: Cost = Field(description="What the sample cost.")
    error: str | None = Field(
        description='Why the sample failed, as "<reason>: <detail>" (video_unreadable, duration_mismatch, '
        "invalid_logits, bad_sample, stage1_failed, stage2_failed); null on success."
    )
    flags: list[str] | None = Field(
        default=None,
        description='Odd but runnable input, each as "<code>: <detail>" (single_frame: a one-frame container); '
        "absent when none.",
    )


class TimingRecord(Record):
    """One line of timings.jsonl, beside predictions.jsonl: a sample's wall-clock time, kept out of its prediction
    record because it differs on every machine and run while everything else in the record does not."""

    benchmark: str = Field(description="Benchmark name, as in the sample's prediction record.")
    sample_id: str = Field(description="The sample's id, as in its prediction record.")
    seconds: Number = Field(description="Wall time of the sample, from its first decode to its record.")


def split_timing(record: dict) -> tuple[dict, dict | None]:
    """(`record` without its wall-clock time, the timings.jsonl line holding it); None when it has none."""
    cost = record.get("cost") or {}
    if cost.get("seconds") is None:
        return record, None
    timing = {"benchmark": record["benchmark"], "sample_id": record["sample_id"], "seconds": cost["seconds"]}
    return {**record, "cost": {k: v for k, v in cost.items() if k != "seconds"}}, timing


# ---- building and describing ---------------------------------------------------------------------------------------


def build_record(model: type[BaseModel], data: dict) -> dict:
    """`data` checked against `model` and dumped back: the keys given, in the model's field order (unknown keys
    after them), values unchanged. Raises pydantic.ValidationError naming the field."""
    return model.model_validate(data).model_dump(mode="json", exclude_unset=True)


def describe_errors(errors: list[dict], limit: int = 5) -> str:
    """'<field path>: <what is wrong>' for the first `limit` of pydantic's error dicts, joined by '; '."""
    parts = []
    for item in errors[:limit]:
        where = ".".join(str(part) for part in item["loc"]) or "(record)"
        message = item["msg"].removeprefix("Value error, ")
        field = str(item["loc"][-1]) if item["loc"] else ""
        names_itself = field and message.startswith((field + " ", f"'{field}' "))
        parts.append(message if names_itself and len(item["loc"]) == 1 else f"{where}: {message}")
    more = len(errors) - limit
    return "; ".join(parts) + (f" (and {more} more)" if more > 0 else "")


def describe_validation_error(error: ValidationError, limit: int = 5) -> str:
    return describe_errors(error.errors(), limit)


def present_field_errors(model: type[BaseModel], data: dict) -> list[dict]:
    """The contract violations of the fields `data` has: absent fields are not counted. For a reader that needs
    only some fields and checks their presence itself (calibration reads Stage-1 logits and the gold letter)."""
    try:
        model.model_validate(data)
    except ValidationError as error:
        return [item for item in error.errors() if item["type"] != "missing"]
    return []


def present_field_problem(model: type[BaseModel], data: dict) -> tuple[str, str] | None:
    """(reason, message) when a field `data` has breaks the contract, None when none does (absent fields are not
    counted): reason "non_finite" when a number the contract wants finite is NaN or infinite, else
    "invalid_record"; the message names each field ('stage1.margin: the margin must be finite, got NaN'). The one
    rule every reader of Stage-1 rows applies (calibration, `cader audit`, `cader frontier`)."""
    errors = present_field_errors(model, data)
    if not errors:
        return None
    non_finite = [item for item in errors if item["type"] == NON_FINITE]
    others = [item for item in errors if item["type"] != NON_FINITE]
    return (NON_FINITE if non_finite else "invalid_record"), describe_errors(non_finite + others)
