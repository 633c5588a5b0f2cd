"""Render one predictions.jsonl record into the common judge text (AgentVidBench App. D.1).

The text holds the system's final answer and every observation, tool call and reasoning step in order. Fields
that carry the gold answer (or whether the prediction matched it) are never rendered, at any depth.
"""

from __future__ import annotations

import json

# Keys that reveal the gold letter or correctness; dropped at every nesting level.
GOLD_KEYS = frozenset({
    "answer", "answers", "correct", "is_correct", "gold", "gold_answer", "gold_letter", "ground_truth",
    "groundtruth", "gt", "gt_answer", "answer_key", "answer_idx", "answer_index", "label", "target_answer",
})
# Record-level bookkeeping that is not part of the trajectory (the question and options are in the prompt already).
SKIPPED_TOP_KEYS = frozenset({
    "benchmark", "sample_id", "question_id", "video", "duration", "question", "options", "letters", "cost",
    "meta", "system", "framework", "route", "stage1", "stage2", "pred", "error",
})
# Free-text fields a single-turn system or another framework's log may use, in order of preference.
TEXT_FIELDS = ("trajectory", "log", "response", "output", "completion", "raw_output", "text", "reasoning")
LONG_TEXT = 80


def redact(value):
    """A copy of `value` with every gold-revealing key removed, recursively."""
    if isinstance(value, dict):
        return {k: redact(v) for k, v in value.items() if str(k).lower() not in GOLD_KEYS}
    if isinstance(value, list):
        return [redact(v) for v in value]
    return value


def _inline(value) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def render_step(index: int, step) -> str:
    """One trajectory step: a header naming its phase/type, then its fields in their original order."""
    step = redact(step)
    if not isinstance(step, dict):
        return f"STEP {index}:\n  {_inline(step)}"
    kind = step.get("phase") or step.get("type") or step.get("role") or step.get("tool") or "step"
    lines = [f"STEP {index} [{kind}]"]
    for key, value in step.items():
        if key in ("phase", "type") and value == kind:
            continue
        text = _inline(value)
        if "\n" in text or len(text) > LONG_TEXT:
            lines.append(f"  {key}:")
            lines.extend("    " + line for line in text.splitlines() or [""])
        else:
            lines.append(f"  {key}: {text}")
    return "\n".join(lines)


def _render_stage1(stage1: dict) -> dict:
    stage1 = redact(stage1)
    step = {"phase": "stage1 whole-video pass"}
    if stage1.get("n_frames") is not None:
        step["frames_sampled"] = stage1["n_frames"]
    if stage1.get("fps") is not None:
        step["sampling_fps"] = stage1["fps"]
    if stage1.get("pred") is not None:
        step["predicted_option"] = stage1["pred"]
    if stage1.get("margin") is not None:
        step["confidence_margin"] = stage1["margin"]
    for key, value in stage1.items():  # anything else the runner recorded (except the raw logit vector)
        if key not in ("n_frames", "fps", "pred", "margin", "logits", "temperature"):
            step[key] = value
    return step


def _free_text_steps(value) -> list:
    if isinstance(value, str):
        return [{"phase": "log", "text": value}]
    if isinstance(value, list):
        return value
    return [value]


def render_prediction(record: dict) -> str:
    """The judge text for a CADER trajectory, a single-turn answer text, or another framework's log."""
    steps: list = []
    if isinstance(record.get("stage1"), dict):
        steps.append(_render_stage1(record["stage1"]))
    if record.get("route"):
        steps.append({"phase": "route", "decision": record["route"],
                      "meaning": "answered from stage 1" if record["route"] == "exit"
                      else "escalated to stage-2 evidence search"})
    stage2 = record.get("stage2")
    if isinstance(stage2, dict):
        stage2 = redact(stage2)
        steps.extend(stage2.get("steps") or [])
        summary = {k: v for k, v in stage2.items() if k != "steps"}
        if summary:
            steps.append({"phase": "stage2 result", **summary})
    for name in TEXT_FIELDS:
        if record.get(name) not in (None, "", []):
            steps.extend(_free_text_steps(record[name]))
    extra = {k: v for k, v in redact(record).items()
             if k not in SKIPPED_TOP_KEYS and k not in TEXT_FIELDS and v not in (None, "", [], {})}
    if extra:
        steps.append({"phase": "other recorded fields", **extra})

    parts = [render_step(i, step) for i, step in enumerate(steps, start=1)]
    if not parts:
        parts.append("(no intermediate steps recorded)")
    if record.get("error"):
        parts.append(f"RUN ERROR: {record['error']}")
    pred = record.get("pred")
    parts.append(f"FINAL ANSWER: {pred if pred not in (None, '') else '(none)'}")
    return "\n".join(parts)
