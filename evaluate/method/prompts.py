"""CADER prompt templates, verbatim from the paper's supplementary C (C.1-C.4).

The paper's text (extracted from the PDF) loses line breaks and the braces around placeholders. Choices made here,
documented because the paper cannot settle them:
- Sentences are kept word for word; a line break separates the blocks the paper typesets on separate lines
  (question, options, instructions).
- `{options}` is rendered one option per line as "A. text", starting on the line after "Options:".
  An option text that already starts with its own letter ("A. ", "(A)", "A)") is not prefixed twice.
- Times are written in seconds with at most one decimal ("2100", "2100.5").
- C.2 (Reflection) reads "at least min_crops wide": that is `{min_crop}s wide`, i.e. "10s wide".
- C.4 "(start_ts ∼ end_ts)": the PDF's ∼ is LaTeX's \\sim; we write an ASCII "~" with seconds, "(2300s ~ 2330s)".
- Tried ranges in the reflection prompt are listed as "[2100, 2130], [2300, 2330]".
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence

# ---- C.1 Stage 1: Global Reasoning --------------------------------------------------------------------------
STAGE1_SYSTEM = (
    "You are a video question answering assistant. Watch the video carefully and answer the multiple-choice "
    "question. Output ONLY a single capital letter corresponding to your answer. No explanation. No punctuation. "
    "Nothing else."
)
STAGE1_USER = "Question: {question}\nOptions:\n{options}\nAnswer:"

# ---- C.2 Stage 2: Temporal Segment Proposal ------------------------------------------------------------------
GROUNDING_SYSTEM = (
    "You are a video temporal grounding assistant. Your task is to identify the time window in the video that "
    "contains the key visual evidence to answer the given multiple-choice question. Output ONLY a single window in "
    "JSON format. Do NOT include explanations or multiple windows."
)
WINDOW_FORMAT = '"relevant_windows": [["<start_seconds>", "<end_seconds>"]]'
GROUNDING_FIRST_USER = (
    "Question: {question}\nOptions:\n{options}\n"
    "The video is {duration} seconds long. Identify the time window containing the visual evidence that "
    "distinguishes between the options above. The window must be at least {min_crop} seconds wide.\n"
    "After thinking, output your answer in this format: " + WINDOW_FORMAT
)
GROUNDING_REFLECTION_USER = (
    "The following time windows have already been tried and failed: {tried_ranges}\n"
    "Please identify a different time window that is less likely to overlap with the above. "
    "Pick ONLY ONE single time window.\n"
    "The video is {duration} seconds long. The window must be at least {min_crop}s wide.\n"
    "Question: {question}\nOptions:\n{options}\n"
    "After thinking, output your answer in this format: " + WINDOW_FORMAT
)

# ---- C.3 Verifier --------------------------------------------------------------------------------------------
VERIFIER_SYSTEM = "You are a video question answering assistant. Watch the video carefully and answer the multiple-choice question."
VERIFIER_USER = (
    "Does this video clip contain relevant visual evidence for answering the question below?\n"
    "Question: {question}\nOptions:\n{options}\nAnswer Yes or No only."
)

# ---- C.4 Stage 2: Final Reasoning ----------------------------------------------------------------------------
FINAL_SYSTEM = VERIFIER_SYSTEM
FINAL_USER = (
    "This is the most relevant segment of the video ({start_ts} ~ {end_ts}). Watch it carefully and answer the "
    "question.\nQuestion: {question}\nOptions:\n{options}\n"
    "After thinking, output your answer in this format: <answer>X</answer>\n"
    "Where X is a single capital letter: {valid_letters}."
)


def format_seconds(t: float) -> str:
    """2100.0 -> "2100", 2100.46 -> "2100.5"."""
    if not math.isfinite(t):
        raise ValueError(f"time must be finite, got {t}")
    text = f"{round(float(t), 1):.1f}"
    return text.removesuffix(".0")


def _strip_own_letter(letter: str, text: str) -> str:
    match = re.match(rf"^\s*(?:\(\s*{letter}\s*\)|{letter}\s*[.):])\s*", text)
    return text[match.end() :] if match else text


def format_options(options: Sequence[str], letters: Sequence[str]) -> str:
    if len(options) != len(letters):
        raise ValueError(f"{len(options)} options but {len(letters)} letters")
    return "\n".join(
        f"{letter}. {_strip_own_letter(letter, str(text)).strip()}" for letter, text in zip(letters, options)
    )


def stage1_prompt(question: str, options: Sequence[str], letters: Sequence[str]) -> tuple[str, str]:
    """(system, user) for C.1."""
    return STAGE1_SYSTEM, STAGE1_USER.format(question=question, options=format_options(options, letters))


def proposal_prompt(
    question: str,
    options: Sequence[str],
    letters: Sequence[str],
    duration: float,
    min_crop: float,
    tried: Sequence[tuple[float, float]] = (),
) -> tuple[str, str]:
    """(system, user) for C.2: the first-proposal prompt, or the reflection prompt once ranges were tried."""
    fields = {
        "question": question,
        "options": format_options(options, letters),
        "duration": format_seconds(duration),
        "min_crop": format_seconds(min_crop),
    }
    if not tried:
        return GROUNDING_SYSTEM, GROUNDING_FIRST_USER.format(**fields)
    tried_ranges = ", ".join(f"[{format_seconds(s)}, {format_seconds(e)}]" for s, e in tried)
    return GROUNDING_SYSTEM, GROUNDING_REFLECTION_USER.format(tried_ranges=tried_ranges, **fields)


def verifier_prompt(question: str, options: Sequence[str], letters: Sequence[str]) -> tuple[str, str]:
    """(system, user) for C.3."""
    return VERIFIER_SYSTEM, VERIFIER_USER.format(question=question, options=format_options(options, letters))


def final_prompt(
    question: str, options: Sequence[str], letters: Sequence[str], start: float, end: float
) -> tuple[str, str]:
    """(system, user) for C.4."""
    user = FINAL_USER.format(
        start_ts=f"{format_seconds(start)}s",
        end_ts=f"{format_seconds(end)}s",
        question=question,
        options=format_options(options, letters),
        valid_letters=", ".join(letters),
    )
    return FINAL_SYSTEM, user
