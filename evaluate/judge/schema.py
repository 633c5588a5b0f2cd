"""Judge output validation (AgentVidBench App. D.3/D.5 output schema) and JSON extraction from model text.

Where the official judge prompt is more specific than the paper's text, it is followed (github.com/krafton-ai/
agentvidbench, evaluation/prompts/judge_system.md; read at commit 13059bb69fee92de5cc79aeda7836d8aa20ccaeb of its
public mirror jhyeonseo/agentvidbench):
- the audio tag is `audio_transcript_error`; the paper's App. D.5 text shows `audio_tranerror`. Both are accepted
  and stored under the official spelling.
- SWEEP_REQUIRED "unknown": the judge applies the anchor test itself and begins axis_rationales.P4 with
  "FALLBACK SWEEP=YES because ..." or "FALLBACK SWEEP=NO because ..."; P4 is then scored (YES) or null (NO).
- a milestone status is read case-insensitively ("Covered" is covered), as the official judge lower-cases it
  (evaluation/judge.py, `_process_to_canonical`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Literal

from cader.contracts.judgments import FAILURE_TAGS, TAG_ALIASES
from pydantic import BaseModel, ConfigDict, Field, StrictInt, ValidationError, field_validator

# The closed vocabularies (21 failure tags, their aliases, the 4 milestone statuses) are part of the judgments
# contract, so they live there and the judge reads them from it.
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

    @field_validator("status", mode="before")
    @classmethod
    def _lower_case(cls, status):
        # The official harness lower-cases the label before scoring it (evaluation/judge.py,
        # `_process_to_canonical`), so "Covered" is the label covered in both protocols.
        return status.strip().lower() if isinstance(status, str) else status


class JudgeOutput(BaseModel):
    model_config = ConfigDict(extra="ignore")
    process_scores: ProcessScores
    axis_rationales: dict[str, str | None] = Field(default_factory=dict)
    milestone_coverage: list[MilestoneCoverage]
    failure_tags: list[Tag] = Field(default_factory=list)
    summary: str = ""

    @field_validator("failure_tags", mode="before")
    @classmethod
    def _official_spelling(cls, tags):
        if not isinstance(tags, list):
            return tags
        return [TAG_ALIASES.get(t.strip(), t.strip()) if isinstance(t, str) else t for t in tags]

    @field_validator("failure_tags")
    @classmethod
    def _dedupe_and_cap(cls, tags: list[str]) -> list[str]:
        unique = list(dict.fromkeys(tags))
        if len(unique) > MAX_FAILURE_TAGS:
            raise ValueError(f"at most {MAX_FAILURE_TAGS} failure tags allowed, got {len(unique)}")
        return unique


def json_objects(text: str) -> list[dict]:
    """Every top-level JSON object in `text`, in order (bare, inside a ```json fence, or among prose)."""
    stripped = text.strip()
    try:
        value = json.loads(stripped)
        return [value] if isinstance(value, dict) else []
    except json.JSONDecodeError:
        pass
    decoder, found = json.JSONDecoder(), []
    start = stripped.find("{")
    while start != -1:
        try:
            value, end = decoder.raw_decode(stripped, start)
        except json.JSONDecodeError:
            start = stripped.find("{", start + 1)
            continue
        if isinstance(value, dict):
            found.append(value)
        start = stripped.find("{", end)
    return found


def extract_json_object(text: str) -> dict:
    """The one JSON object in `text`. A reply with several objects is refused rather than scored from one of them:
    which one the judge meant is a guess (the official prompt asks for "strict JSON only")."""
    objects = json_objects(text)
    if len(objects) > 1:
        raise JudgeOutputError(f"the output holds {len(objects)} JSON objects; return exactly one JSON object")
    if not objects or "process_scores" not in objects[0]:
        raise JudgeOutputError("no JSON object with a 'process_scores' key found in the output")
    return objects[0]


_FALLBACK = re.compile(r"^\W*(?:FALLBACK\s+)?SWEEP\s*=\s*(YES|NO)\b", re.IGNORECASE)


def fallback_sweep(out: JudgeOutput) -> str | None:
    """"yes"/"no" from the judge's own anchor test (axis_rationales.P4 opening), None when it did not say."""
    match = _FALLBACK.match(out.axis_rationales.get("P4") or "")
    return match.group(1).lower() if match else None


def applied_sweep(out: JudgeOutput, sweep: str) -> str:
    """Whether P4 applied to this judgment: the pre-classification, or the judge's fallback for "unknown"."""
    return (fallback_sweep(out) or "unknown") if sweep == "unknown" else sweep


def _describe(error: ValidationError) -> str:
    lines = []
    for item in error.errors()[:10]:
        where = ".".join(str(part) for part in item["loc"]) or "(root)"
        lines.append(f"- {where}: {item['msg']}")
    return "\n".join(lines)


def parse_judgment(text: str, milestone_ids: Sequence[str], sweep: str) -> JudgeOutput:
    """Parse and validate one judge reply against the question's milestone ids and SWEEP_REQUIRED flag.

    P4 is forced to null when the sweep is not required ("no"); it must be scored when required ("yes"). For
    "unknown" the judge decides (official prompt's fallback rule): its P4 rationale must open with
    "FALLBACK SWEEP=YES/NO because ...", and P4 then follows that decision. Raises JudgeOutputError with a message suitable to feed back to the judge.
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
    if sweep == "unknown":
        decided = fallback_sweep(out)
        if decided is None:
            raise JudgeOutputError("SWEEP_REQUIRED is unknown, so axis_rationales.P4 must begin with "
                                   "'FALLBACK SWEEP=YES because <reason>' or 'FALLBACK SWEEP=NO because <reason>' "
                                   "(apply the anchor test yourself), with P4 scored 0-2 for YES and null for NO")
        sweep, why = decided, f"your fallback says SWEEP={decided.upper()}"
    else:
        why = f"SWEEP_REQUIRED is {sweep}"
    if sweep == "no":
        out.process_scores.evidence_completeness = None
    elif sweep == "yes" and out.process_scores.evidence_completeness is None:
        raise JudgeOutputError(f"{why}, so process_scores.evidence_completeness (P4) must be an integer 0-2, "
                               "not null")
    return out


def p_scores(out: JudgeOutput) -> dict[str, int | None]:
    scores = out.process_scores.model_dump()
    return {axis: scores[key] for key, axis in AXES.items()}
