"""Reading the main model's free text: the proposed window (C.2) and the final letter (C.4).

Both parsers are deterministic and never raise on model text: they return None plus a reason when nothing usable is
found, and the caller applies the paper's fallback (A1).

Thinking output: with enable_thinking=True the reply is "<think>...</think> answer". The answer part is searched
first; only when it yields nothing is the whole text searched (a reply cut off inside the thinking block may still
hold a usable window or letter).
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass

_THINK_END = "</think>"

# A time value: plain or scientific number ("130", "130.5", "-3", "1e3"), or a clock time ("2:10", "01:02:03.5").
_NUM = r"-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?"
_CLOCK = r"\d{1,3}:\d{2}(?::\d{2})?(?:\.\d+)?"
_TIME = rf"(?:{_CLOCK}|{_NUM})"
# A time as it may appear in JSON/prose: optionally quoted, optionally followed by a seconds unit.
_TIME_TOKEN = rf"['\"]?\s*({_TIME})\s*(?:s|sec|secs|seconds)?\s*['\"]?"
_PAIR = rf"\[\s*{_TIME_TOKEN}\s*,\s*{_TIME_TOKEN}\s*\]"

_KEYED_WINDOW = re.compile(rf"relevant_windows['\"]?\s*[:=]\s*\[\s*{_PAIR}", re.IGNORECASE)
_BRACKET_WINDOW = re.compile(_PAIR)
_PROSE_WINDOW = re.compile(
    rf"(?:from|between)\s+{_TIME_TOKEN}\s*(?:to|and|-|–)\s*{_TIME_TOKEN}", re.IGNORECASE
)


def split_thinking(text: str) -> tuple[str, str]:
    """(thinking, answer part). Without a closing tag everything is the answer part."""
    if _THINK_END in text:
        head, _, tail = text.rpartition(_THINK_END)
        return head, tail
    return "", text


def parse_time(token: str) -> float:
    """ "130" -> 130.0, "2:10" -> 130.0, "01:02:03.5" -> 3723.5; NaN when unreadable."""
    token = token.strip()
    try:
        if ":" in token:
            value = 0.0
            for part in token.split(":"):
                value = value * 60.0 + float(part)
            return value
        return float(token)
    except ValueError:
        return math.nan


@dataclass(frozen=True)
class WindowParse:
    window: tuple[float, float] | None  # clipped to [0, duration], start <= end
    raw: tuple[float, float] | None  # the numbers as written
    how: str | None  # "keyed" | "bracket" | "prose" (which pattern matched)
    swapped: bool = False  # start > end was given
    clipped: bool = False  # a value lay outside [0, duration]
    reason: str | None = None  # why window is None

    def to_dict(self) -> dict:
        return {
            "window": list(self.window) if self.window else None,
            "raw": list(self.raw) if self.raw else None,
            "how": self.how,
            "swapped": self.swapped,
            "clipped": self.clipped,
            "reason": self.reason,
        }


def _first_window(text: str) -> tuple[tuple[float, float], str] | None:
    for how, pattern in (("keyed", _KEYED_WINDOW), ("bracket", _BRACKET_WINDOW), ("prose", _PROSE_WINDOW)):
        for match in pattern.finditer(text):
            start, end = parse_time(match.group(1)), parse_time(match.group(2))
            if math.isfinite(start) and math.isfinite(end):
                return (start, end), how
    return None


def parse_window(text: str | None, duration: float) -> WindowParse:
    """Find the proposed `"relevant_windows": [[s, e]]` in model text and make it a valid window of the video.

    Tolerates prose around it, code fences, quoted numbers, "s" units, clock times, bare `[s, e]` pairs and
    "from s to e" prose. Reversed values are swapped; values outside [0, duration] are clipped.
    """
    if not text:
        return WindowParse(None, None, None, reason="empty_output")
    if not (math.isfinite(duration) and duration > 0):
        return WindowParse(None, None, None, reason=f"invalid_duration:{duration}")
    _, answer = split_thinking(text)
    found = _first_window(answer) or (_first_window(text) if _THINK_END in text else None)
    if found is None:
        return WindowParse(None, None, None, reason="no_window_found")
    (start, end), how = found
    swapped = start > end
    if swapped:
        start, end = end, start
    lo, hi = min(max(start, 0.0), duration), min(max(end, 0.0), duration)
    clipped = (lo, hi) != (start, end)
    return WindowParse((lo, hi), found[0], how, swapped=swapped, clipped=clipped)


@dataclass(frozen=True)
class AnswerParse:
    letter: str | None
    how: str | None  # "answer_tag" | "bare_letter" | "answer_is" | "option_marker" | "last_letter"
    reason: str | None = None

    def to_dict(self) -> dict:
        return {"letter": self.letter, "how": self.how, "reason": self.reason}


_ANSWER_TAG = re.compile(r"<answer>\s*\(?\s*([A-Za-z])\s*\)?[^<]*</answer>", re.IGNORECASE)
_ANSWER_TAG_OPEN = re.compile(r"<answer>\s*\(?\s*([A-Z])\b")
_BARE_LETTER = re.compile(r"^\W*\(?([A-Z])\)?[.:)]?\W*$")
_ANSWER_IS = re.compile(r"answer\s*(?:is|:)?\s*(?:option\s*)?[:\s]*\(?\s*([A-Z])\b", re.IGNORECASE)
_OPTION_MARKER = re.compile(r"(?<![A-Za-z])\(?([A-Z])[.)](?!\w)")
_STANDALONE = re.compile(r"(?<![A-Za-z'])([A-Z])(?![A-Za-z'])")


def _search_letter(text: str, valid: set[str]) -> AnswerParse | None:
    tags = [m.group(1).upper() for m in _ANSWER_TAG.finditer(text)]
    tags += [m.group(1) for m in _ANSWER_TAG_OPEN.finditer(text)]
    tags = [t for t in tags if t in valid]
    if tags:
        return AnswerParse(tags[-1], "answer_tag")
    # Single-letter fallback (C.4), restricted to the valid letters, most specific pattern first.
    bare = _BARE_LETTER.match(text.strip())
    if bare and bare.group(1) in valid:
        return AnswerParse(bare.group(1), "bare_letter")
    for how, pattern in (("answer_is", _ANSWER_IS), ("option_marker", _OPTION_MARKER)):
        hits = [m.group(1) for m in pattern.finditer(text) if m.group(1) in valid]
        if hits:
            return AnswerParse(hits[-1], how)
    hits = [m.group(1) for m in _STANDALONE.finditer(text) if m.group(1) in valid]
    if hits:
        return AnswerParse(hits[-1], "last_letter")
    return None


def parse_answer(text: str | None, letters: Sequence[str]) -> AnswerParse:
    """The letter in `<answer>X</answer>`, else a single valid capital letter found in the text (C.4)."""
    if not text:
        return AnswerParse(None, None, reason="empty_output")
    valid = set(letters)
    _, answer = split_thinking(text)
    found = _search_letter(answer, valid)
    if found is None and _THINK_END in text:
        found = _search_letter(text, valid)
    return found or AnswerParse(None, None, reason="no_valid_letter")
