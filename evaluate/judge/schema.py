"""Judge output validation (AgentVidBench App. D.3/D.5 output schema) and JSON extraction from model text."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, StrictInt, ValidationError, field_validator

# App. D.3 / D.5: the closed vocabulary of 21 failure tags, in the order the judge prompt lists them.
FAILURE_TAGS: tuple[str, ...] = (
    "misunderstood_condition", "wrong_target_entity", "visual_misrecognition", "ocr_error", "audio_tranerror",
    "unsupported_observation", "counting_error", "duplicate_counting", "excluded_item_counted", "wrong_arithmetic",
    "wrong_option_mapping", "wrong_temporal_segment", "missed_required_segment", "insufficient_full_video_scan",
    "spatial_relation_error", "premature_fixation", "failure_to_expand_search", "failure_to_adjust_granularity",
    "evidence_answer_conflict", "premature_answer", "overconfident_uncertainty",
)
MILESTONE_STATUSES: tuple[str, ...] = ("covered", "partial", "incorrect", "missing")
# App. D.3: soft credit per coverage label.
STATUS_CREDIT = {"covered": 1.0, "partial": 0.5, "incorrect": 0.0, "missing": 0.0}
MAX_FAILURE_TAGS = 8
# Output key -> the P-axis name used in judgments.jsonl.
AXES = {"task_understanding": "P1", "gt_evidence_coverage": "P2", "evidence_grounding": "P3",
        "evidence_completeness": "P4", "reasoning_faithfulness": "P5"}

Score = StrictInt | None
Status = Literal["covered", "partial", "incorrect", "missing"]
Tag = Literal[FAILURE_TAGS]  # type: ignore[valid-type]


class JudgeOutputError(ValueError):
    """The judge's text is not a valid judgment; the message is fed back to the judge on retry."""


class ProcessScores(BaseModel):
    model_config = ConfigDict(extra="ignore")
    task_understanding: StrictInt = Field(ge=0, le=2)
    gt_evidence_coverage: StrictInt = Field(ge=0, le=2)
    evidence_grounding: StrictInt = Field(ge=0, le=2)
    evidence_completeness: Score = Field(default=None, ge=0, le=2)
    reasoning_faithfulness: StrictInt = Field(ge=0, le=2)


class MilestoneCoverage(BaseModel):
    model_config = ConfigDict(extra="ignore")
    milestone_id: str
    status: Status
    evidence_in_prediction: str = ""


class JudgeOutput(BaseModel):
    model_config = ConfigDict(extra="ignore")
    process_scores: ProcessScores
    axis_rationales: dict[str, str | None] = Field(default_factory=dict)
    milestone_coverage: list[MilestoneCoverage]
    failure_tags: list[Tag] = Field(default_factory=list)
    summary: str = ""

    @field_validator("failure_tags")
    @classmethod
    def _dedupe_and_cap(cls, tags: list[str]) -> list[str]:
        unique = list(dict.fromkeys(tags))
        if len(unique) > MAX_FAILURE_TAGS:
            raise ValueError(f"at most {MAX_FAILURE_TAGS} failure tags allowed, got {len(unique)}")
        return unique


def extract_json_object(text: str) -> dict:
    """The first JSON object in `text`: accepts bare JSON, a ```json fence, or prose around the object."""
    stripped = text.strip()
    try:
        value = json.loads(stripped)
        if isinstance(value, dict):
            return value
    except json.JSONDecodeError:
        pass
    decoder = json.JSONDecoder()
    start = stripped.find("{")
    while start != -1:
        try:
            value, _ = decoder.raw_decode(stripped, start)
            if isinstance(value, dict) and "process_scores" in value:
                return value
        except json.JSONDecodeError:
            pass
        start = stripped.find("{", start + 1)
    raise JudgeOutputError("no JSON object with a 'process_scores' key found in the output")


def _describe(error: ValidationError) -> str:
    lines = []
    for item in error.errors()[:10]:
        where = ".".join(str(part) for part in item["loc"]) or "(root)"
        lines.append(f"- {where}: {item['msg']}")
    return "\n".join(lines)


def parse_judgment(text: str, milestone_ids: Sequence[str], sweep: str) -> JudgeOutput:
    """Parse and validate one judge reply against the question's milestone ids and SWEEP_REQUIRED flag.

    P4 is forced to null when the sweep is not required ("no"); it must be scored when required ("yes").
    Raises JudgeOutputError with a message suitable to feed back to the judge.
    """
    raw = extract_json_object(text)
    try:
        out = JudgeOutput.model_validate(raw)
    except ValidationError as error:
        raise JudgeOutputError("schema violations:\n" + _describe(error)) from None
    got = [m.milestone_id for m in out.milestone_coverage]
    if got != list(milestone_ids):
        raise JudgeOutputError(f"milestone_coverage must list exactly {list(milestone_ids)} in this order, "
                               f"got {got}")
    if sweep == "no":
        out.process_scores.evidence_completeness = None
    elif sweep == "yes" and out.process_scores.evidence_completeness is None:
        raise JudgeOutputError("SWEEP_REQUIRED is yes, so process_scores.evidence_completeness (P4) must be an "
                               "integer 0-2, not null")
    return out


def p_scores(out: JudgeOutput) -> dict[str, int | None]:
    scores = out.process_scores.model_dump()
    return {axis: scores[key] for key, axis in AXES.items()}
