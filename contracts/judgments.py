"""A judgments.jsonl record: the trajectory judge's verdict on one AgentVidBench question (AgentVidBench
appendix D: D.2 process-quality axes, D.3 auxiliary diagnostics, D.5 the judge prompt and its output schema).

A row is written for every question judged, failed ones included: those have `error` set and no scores.
"""

from __future__ import annotations

from typing import Any, Literal

from cader.contracts.types import Id, Number, Record
from pydantic import Field

# App. D.3 / D.5: the closed vocabulary of 21 failure tags, in the order the judge prompt lists them, spelled as in
# the official prompt (evaluation/prompts/judge_system.md).
FAILURE_TAGS: tuple[str, ...] = (
    "misunderstood_condition", "wrong_target_entity", "visual_misrecognition", "ocr_error", "audio_transcript_error",
    "unsupported_observation", "counting_error", "duplicate_counting", "excluded_item_counted", "wrong_arithmetic",
    "wrong_option_mapping", "wrong_temporal_segment", "missed_required_segment", "insufficient_full_video_scan",
    "spatial_relation_error", "premature_fixation", "failure_to_expand_search", "failure_to_adjust_granularity",
    "evidence_answer_conflict", "premature_answer", "overconfident_uncertainty",
)
# Other spellings of a tag -> the official one (the paper's App. D.5 text prints `audio_tranerror`).
TAG_ALIASES = {"audio_tranerror": "audio_transcript_error"}
MILESTONE_STATUSES: tuple[str, ...] = ("covered", "partial", "incorrect", "missing")
Sweep = Literal["yes", "no", "unknown"]
# Rows judged before the official spelling was used carry the paper's alias.
FailureTag = Literal[FAILURE_TAGS + tuple(TAG_ALIASES)]  # type: ignore[valid-type]


class AxisScores(Record):
    """The five process-quality axes, each 0-2 (AgentVidBench D.2)."""

    P1: int = Field(ge=0, le=2, description="Task understanding.")
    P2: int = Field(ge=0, le=2, description="Ground-truth evidence coverage.")
    P3: int = Field(ge=0, le=2, description="Evidence grounding.")
    P4: int | None = Field(
        ge=0, le=2, description="Evidence completeness; null when no full-video sweep is required."
    )
    P5: int = Field(ge=0, le=2, description="Reasoning faithfulness.")


class MilestoneJudgment(Record):
    """The judge's coverage label for one ground-truth milestone (AgentVidBench D.3)."""

    id: str = Field(description="The milestone's id in the question.")
    status: Literal[MILESTONE_STATUSES] = Field(  # type: ignore[valid-type]
        description="covered (credit 1), partial (0.5), incorrect or missing (0)."
    )
    evidence: str = Field(description="Where the prediction shows it, in the judge's words.")


class JudgmentRecord(Record):
    """One line of judgments.jsonl: one question judged (or failed to be)."""

    question_id: Id = Field(description="The AgentVidBench question id.")
    system: str = Field(description="The framework whose prediction was judged (e.g. cader).")
    judge_model: str = Field(description="The judge model asked for.")
    served_model: str | None = Field(
        default=None, description="The model the API says answered; null if unknown."
    )
    scores: AxisScores | None = Field(description="P1-P5 (AgentVidBench D.2); null when judging failed.")
    traj: Number | None = Field(
        description="Traj = mean of the applicable axis scores / 2 (AgentVidBench D.2); null when judging failed."
    )
    mc_rate: Number | None = Field(
        description="Milestone coverage: (covered + 0.5 partial) / milestones (AgentVidBench D.3)."
    )
    milestones: list[MilestoneJudgment] = Field(
        description="Coverage per milestone, in the question's order."
    )
    failure_tags: list[FailureTag] = Field(
        description="Error modes from the closed vocabulary of 21 tags (AgentVidBench D.3, D.5), at most 8."
    )
    summary: str = Field(description="The judge's one-paragraph summary.")
    axis_rationales: dict[str, str | None] = Field(default=None, description="The judge's reason per axis.")
    sweep_required: Sweep = Field(
        default=None, description="SWEEP_REQUIRED from the question's ecom_required (AgentVidBench D.5)."
    )
    sweep_applied: Sweep | None = Field(
        default=None,
        description='Whether P4 applied; for "unknown" the judge\'s own FALLBACK SWEEP decision.',
    )
    attempts: int = Field(description="Calls made to the judge API.")
    waited_s: Number = Field(default=None, description="Seconds spent waiting between retries.")
    cached: bool = Field(default=None, description="The reply came from the judge cache.")
    prompt_hash: str = Field(default=None, description="Hash of the prompt the judge read.")
    judge_config: dict[str, Any] = Field(default=None, description="Provider, model and request parameters.")
    judge_config_hash: str = Field(default=None, description="Hash of judge_config.")
    error: str | None = Field(description="Why no valid judgment came; null on success.")
    trajectory_hash: str = Field(default=None, description="Hash of the rendered prediction alone.")
    judged_because: str = Field(
        default=None,
        description="Why it was judged in this run: new, failed_before, prediction_changed, prompt_changed, "
        "judge_config_changed or forced.",
    )
