"""Render one predictions.jsonl record into the common judge text (AgentVidBench App. D.1), by allow-list.

App. D.1: the judge input holds "the predicted final answer and all available intermediate observations,
retrieved evidence, tool calls, and reasoning traces"; the gold answer is never provided (App. D, opening). So the
renderer names, for each place a trajectory can live, the fields that are one of those things, and shows nothing
else: a key it does not know (a gold letter under any name, the milestones, a correctness flag, bookkeeping) never
reaches the judge, at any depth. Another framework's output is first mapped onto these fields by an explicit
adapter (adapters.py).

Where a trajectory lives in a record:
- CADER (predictions.jsonl contract): `stage1`, `route`, `stage2` (its `steps` by phase, as evaluate/method/stage2.py
  writes them), `pred`, `error`.
- A single-turn answer: `response` (the model's text).
- Any other agent, after its adapter: `trajectory`, a list of steps whose `phase` and per-phase keys are those of the
  official harness's normalized trajectory (framework/_shared/trajectory_schema.py, PHASE_DATA_KEYS, in
  github.com/krafton-ai/agentvidbench; read at commit 13059bb69fee92de5cc79aeda7836d8aa20ccaeb of its public mirror
  jhyeonseo/agentvidbench), or a plain text log.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

# CADER Stage 1: what the whole-video pass observed and concluded (the raw logits and temperature are not
# trajectory, they are the router's internals).
STAGE1_FIELDS = {"n_frames": "frames_sampled", "fps": "sampling_fps", "pred": "predicted_option",
                 "margin": "confidence_margin"}
STAGE2_SUMMARY_FIELDS = ("pred", "accepted", "cycles", "fallback")
# CADER Stage 2 steps (evaluate/method/stage2.py): tool calls (propose/verify/resample), what they returned, and the
# model's own text (raw_output is its reasoning trace).
PARSED_FIELDS = ("window", "raw", "how", "swapped", "clipped", "reason", "letter")
CADER_STEP_FIELDS: dict[str, tuple[str, ...]] = {
    "propose": ("iteration", "context", "n_frames", "tried", "raw_output", "parsed", "window", "too_broad"),
    "verify": ("iteration", "window", "crop", "r2", "n_frames", "p_yes", "f", "accepted", "skipped"),
    "resample": ("iteration", "mode", "fps_map", "unexplored", "n_frames_planned", "n_frames"),
    "answer": ("window", "n_frames", "raw_output", "parsed", "pred", "fallback_to_stage1"),
}
# Other agents' steps: the official normalized trajectory's phases and their data keys (observations, evidence,
# tool calls, reasoning; PHASE_DATA_KEYS), plus `log` for a plain text trace.
AGENT_STEP_FIELDS: dict[str, tuple[str, ...]] = {
    "thinking": ("text",),
    "tool_call": ("tool", "arguments"),
    "tool_result": ("tool", "success", "result_text", "fps", "time_range", "coverage", "suggested_answer",
                    "confidence"),
    "plan": ("watch_config", "rationale", "completion_criteria"),
    "observe": ("key_evidence", "reasoning", "model_call"),
    "reflect": ("sufficient", "query_confidence", "rationale"),
    "answer": ("letter", "reasoning", "evidence_ts", "cited_evidence_ids"),
    "log": ("text",),
}
# A step of a phase the protocol does not name still shows its text, under its phase name, and nothing else.
UNKNOWN_PHASE_FIELDS = ("text",)
LONG_TEXT = 80
# What str.splitlines() breaks a line at (and so may a model reading the text).
LINE_BREAKS = frozenset("\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029")


def _inline(value) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def render_step(index: int, kind: str, fields: Mapping) -> str:
    """One trajectory step: a header naming its phase, then the given (already allow-listed) fields in order."""
    lines = [f"STEP {index} [{kind}]"]
    for key, value in fields.items():
        text = _inline(value)
        if "\n" in text or len(text) > LONG_TEXT:
            lines.append(f"  {key}:")
            lines.extend("    " + line for line in text.splitlines() or [""])
        else:
            lines.append(f"  {key}: {text}")
    return "\n".join(lines)


def pick(source: Mapping, names) -> dict:
    """The allow-listed fields of `source` that are present, in allow-list order."""
    return {name: source[name] for name in names if name in source and source[name] is not None}


def _stage1_step(stage1: Mapping) -> tuple[str, dict]:
    return "stage1 whole-video pass", {label: stage1[key] for key, label in STAGE1_FIELDS.items()
                                       if stage1.get(key) is not None}


def _cader_step(step) -> tuple[str, dict]:
    if not isinstance(step, Mapping):
        return "step", {}
    phase = str(step.get("phase") or "step")
    fields = pick(step, CADER_STEP_FIELDS.get(phase, UNKNOWN_PHASE_FIELDS))
    if isinstance(fields.get("parsed"), Mapping):
        fields["parsed"] = pick(fields["parsed"], PARSED_FIELDS)
    return phase, fields


def _agent_step(step) -> tuple[str, dict]:
    if isinstance(step, str):
        return "log", {"text": step}
    if not isinstance(step, Mapping):
        return "step", {}
    phase = str(step.get("phase") or "step")
    return phase, pick(step, AGENT_STEP_FIELDS.get(phase, UNKNOWN_PHASE_FIELDS))


def trajectory_steps(record: Mapping) -> list[tuple[str, dict]]:
    """(phase, allow-listed fields) for every step the record holds, in order."""
    steps: list[tuple[str, dict]] = []
    if isinstance(record.get("stage1"), Mapping):
        steps.append(_stage1_step(record["stage1"]))
    if record.get("route") in ("exit", "stage2"):
        steps.append(("route", {"decision": record["route"],
                                "meaning": "answered from stage 1" if record["route"] == "exit"
                                else "escalated to stage-2 evidence search"}))
    stage2 = record.get("stage2")
    if isinstance(stage2, Mapping):
        steps.extend(_cader_step(step) for step in stage2.get("steps") or [])
        summary = pick(stage2, STAGE2_SUMMARY_FIELDS)
        if summary:
            steps.append(("stage2 result", summary))
    if isinstance(record.get("response"), str) and record["response"].strip():
        steps.append(("response", {"text": record["response"]}))
    trajectory = record.get("trajectory")
    if isinstance(trajectory, str) and trajectory.strip():
        steps.append(("log", {"text": trajectory}))
    elif isinstance(trajectory, list):
        steps.extend(_agent_step(step) for step in trajectory)
    return steps


def render_prediction(record: Mapping) -> str:
    """The judge text for a CADER trajectory, a single-turn answer, or an adapted agent trajectory."""
    parts = [render_step(i, kind, fields) for i, (kind, fields) in enumerate(trajectory_steps(record), start=1)]
    if not parts:
        parts.append("(no intermediate steps recorded)")
    if record.get("error"):
        parts.append(f"RUN ERROR: {one_line(record['error'])}")
    pred = record.get("pred")
    parts.append(f"FINAL ANSWER: {one_line(pred) if pred not in (None, '') else '(none)'}")
    return "\n".join(parts)


def one_line(value) -> str:
    """A value for a one-line slot (the answer, the run error): as is when it is one line, else JSON-escaped, so
    a prediction cannot start a line of its own there (a second "FINAL ANSWER:", a "STEP" header)."""
    text = _inline(value)
    if not any(c in LINE_BREAKS for c in text):
        return text
    # json.dumps escapes the control characters but leaves U+0085, U+2028 and U+2029 as they are
    return "".join(f"\\u{ord(c):04x}" if c in LINE_BREAKS else c for c in json.dumps(text, ensure_ascii=False))
