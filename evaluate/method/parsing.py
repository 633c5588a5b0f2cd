"""Reading the main model's free text: the proposed window (C.2) and the final letter (C.4).

Both parsers are deterministic and never raise on model text: they return None plus a reason when nothing usable is
found, and the caller applies the paper's fallback (A1), flagged in the record. The rule throughout: a reply that
does not name one answer unambiguously gives no answer. A wrong letter or window would be silent; a missing one is
counted (report.json `answer_parse_fallbacks`, Stage-2 fallback `unparseable_proposal`).

Thinking output: with enable_thinking=True the reply is "<think>...</think> answer" (the opening tag may sit in the
prompt, so only the closing one is relied on). The answer part is searched first; only when it yields nothing is the
thinking text used, and then only through its structured forms (an `<answer>` tag, a `relevant_windows` key or a
single window), since reasoning text names many letters and times it does not choose.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass

from cader.evaluate.method.answer_reading import letter_in, option_texts

_THINK_START = "<think>"
_THINK_END = "</think>"


def split_thinking(text: str) -> tuple[str, str]:
    """(thinking, answer part). Without a closing tag everything is the answer part."""
    if _THINK_END in text:
        head, _, tail = text.rpartition(_THINK_END)
        return head, tail
    return "", text


def _split_for_answer(text: str) -> tuple[str, str]:
    """Like split_thinking, but a reply cut off inside an unclosed `<think>` has an empty answer part: the letters
    in unfinished reasoning are not an answer."""
    if _THINK_END not in text and _THINK_START in text:
        head, _, tail = text.partition(_THINK_START)  # everything after the first opening tag is reasoning
        return tail, head
    return split_thinking(text)


# ---- C.2: the proposed window -----------------------------------------------------------------------------------

# A time value: plain or scientific number ("130", "130.5", "-3", "1e3"), or a clock time ("2:10", "01:02:03.5").
_NUM = r"-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?"
_CLOCK = r"\d{1,3}:\d{2}(?::\d{2})?(?:\.\d+)?"
_TIME = rf"(?:{_CLOCK}|{_NUM})"
# A unit after a number. Minutes and hours are converted: "from 2 to 3 minutes" is [120, 180], never [2, 3].
_UNIT = r"(?:seconds?|secs?|s|minutes?|mins?|m|hours?|hrs?|h)(?![A-Za-z])"
_UNIT_SECONDS = {"s": 1.0, "m": 60.0, "h": 3600.0}
# A time as it may appear in JSON/prose: optionally quoted, optionally followed by a unit.
_TIME_TOKEN = rf"['\"]?\s*({_TIME})\s*({_UNIT})?\s*['\"]?"
_PAIR = rf"\[\s*{_TIME_TOKEN}\s*,\s*{_TIME_TOKEN}\s*\]"

# `"relevant_windows": [[s, e], ...]` (the C.2 format) or the flat `"relevant_windows": [s, e]`.
_KEYED_WINDOW = re.compile(
    rf"relevant_windows?['\"]?\s*[:=]\s*(\[\s*{_PAIR}(?:\s*,\s*{_PAIR})*|{_PAIR})", re.IGNORECASE
)
_BRACKET_WINDOW = re.compile(_PAIR)
_PROSE_WINDOW = re.compile(
    rf"(?:from|between)\s+{_TIME_TOKEN}\s*(?:to|and|-|–)\s*{_TIME_TOKEN}", re.IGNORECASE
)


def parse_time(token: str, unit: str | None = None) -> float:
    """ "130" -> 130.0, "2:10" -> 130.0, "01:02:03.5" -> 3723.5, ("2", "min") -> 120.0; NaN when unreadable.
    A clock time carries its own scale, so a unit after it is ignored."""
    token = token.strip()
    try:
        if ":" in token:
            value = 0.0
            for part in token.split(":"):
                value = value * 60.0 + float(part)
            return value
        scale = _UNIT_SECONDS[unit.strip().lower()[0]] if unit else 1.0
        return float(token) * scale
    except ValueError:
        return math.nan


def _pair_values(start: str, start_unit: str | None, end: str, end_unit: str | None) -> tuple[float, float]:
    # One unit for the pair ("from 2 to 3 minutes", "[2, 3 min]"): a bare number takes its partner's unit.
    start_unit, end_unit = start_unit or end_unit, end_unit or start_unit
    return parse_time(start, start_unit), parse_time(end, end_unit)


@dataclass(frozen=True)
class WindowParse:
    window: tuple[float, float] | None  # clipped to [0, duration], start <= end
    raw: tuple[float, float] | None  # the numbers as written (in seconds)
    how: str | None  # "keyed" | "bracket" | "prose" (which pattern matched)
    swapped: bool = False  # start > end was given
    clipped: bool = False  # a value lay outside [0, duration]
    reason: str | None = None  # why window is None
    n_windows: int = 1  # windows in the chosen `relevant_windows` list (C.2 asks for one; the first is used)

    def to_dict(self) -> dict:
        return {
            "window": list(self.window) if self.window else None,
            "raw": list(self.raw) if self.raw else None,
            "how": self.how,
            "swapped": self.swapped,
            "clipped": self.clipped,
            "reason": self.reason,
            "n_windows": self.n_windows,
        }


def _finite(pair: tuple[float, float]) -> bool:
    return math.isfinite(pair[0]) and math.isfinite(pair[1])


def _keyed_window(text: str) -> tuple[tuple[float, float], int] | None:
    """The last `relevant_windows` list whose first window has numbers (a model that corrects itself writes its
    final JSON last; an echoed template holds placeholders, not numbers). Returns (first window, windows listed)."""
    found = None
    for match in _KEYED_WINDOW.finditer(text):
        pairs = [_pair_values(*m.groups()) for m in _BRACKET_WINDOW.finditer(match.group(1))]
        if pairs and _finite(pairs[0]):
            found = pairs[0], len(pairs)
    return found


def _single_window(text: str, pattern: re.Pattern) -> tuple[tuple[float, float] | None, int]:
    """The one window `pattern` finds in free text; (None, n) when it finds n != 1 distinct windows (two windows in
    prose, say a tried one and a new one, cannot be told apart)."""
    pairs = {_pair_values(*m.groups()) for m in pattern.finditer(text)}
    pairs = {p for p in pairs if _finite(p)}
    return (next(iter(pairs)), 1) if len(pairs) == 1 else (None, len(pairs))


def _find_window(text: str) -> tuple[tuple[float, float] | None, str | None, int]:
    """(window, how, n): the keyed form first, else exactly one bare `[s, e]` pair, else exactly one prose window."""
    keyed = _keyed_window(text)
    if keyed is not None:
        return keyed[0], "keyed", keyed[1]
    for how, pattern in (("bracket", _BRACKET_WINDOW), ("prose", _PROSE_WINDOW)):
        window, n = _single_window(text, pattern)
        if window is not None:
            return window, how, 1
        if n > 1:
            return None, f"ambiguous_{how}", n
    return None, None, 0


def parse_window(text: str | None, duration: float) -> WindowParse:
    """Find the proposed `"relevant_windows": [[s, e]]` in model text and make it a valid window of the video.

    Tolerates prose around it, code fences, quoted numbers, units (s, min, h), clock times, a bare `[s, e]` pair and
    "from s to e" prose. Several different bare pairs or prose windows are ambiguous: no window. Reversed values
    are swapped; values outside [0, duration] are clipped.
    """
    if not text:
        return WindowParse(None, None, None, reason="empty_output")
    if not (math.isfinite(duration) and duration > 0):
        return WindowParse(None, None, None, reason=f"invalid_duration:{duration}")
    thinking, answer = split_thinking(text)
    window, how, n = _find_window(answer)
    # Nothing at all after the reasoning (cut off, or no reply): the thinking text may still hold the window.
    if window is None and how is None and thinking:
        window, how, n = _find_window(thinking)
    if window is None:
        reason = f"{how}_windows:{n}" if how else "no_window_found"
        return WindowParse(None, None, None, reason=reason)
    start, end = window
    swapped = start > end
    if swapped:
        start, end = end, start
    lo, hi = min(max(start, 0.0), duration), min(max(end, 0.0), duration)
    clipped = (lo, hi) != (start, end)
    return WindowParse((lo, hi), window, how, swapped=swapped, clipped=clipped, n_windows=n)


# ---- C.4: the final letter ----------------------------------------------------------------------------------------
# The rules that read the letter out of the answer text are in answer_reading.py.


@dataclass(frozen=True)
class AnswerParse:
    letter: str | None
    # "<where>/<rule>": where in {answer_tag, reply, thinking_tag}; rule in {alone, final, decl, verdict, lead, prose,
    # correction, option_text}
    how: str | None
    reason: str | None = None

    def to_dict(self) -> dict:
        return {"letter": self.letter, "how": self.how, "reason": self.reason}


_TAG_OPEN = re.compile(r"<\s*answer\s*>", re.IGNORECASE)
_TAG_CLOSE = re.compile(r"<\s*/\s*answer\s*>", re.IGNORECASE)


def _last_tag(text: str) -> str | None:
    """The content of the last `<answer>` tag: up to its `</answer>`, or, when the reply was cut off before the
    closing tag, up to the next tag or the end."""
    opens = list(_TAG_OPEN.finditer(text))
    if not opens:
        return None
    rest = text[opens[-1].end() :]
    close = _TAG_CLOSE.search(rest)
    if close is not None:
        return rest[: close.start()]
    return rest.split("<", 1)[0]


def parse_answer(
    text: str | None, letters: Sequence[str], options: Sequence[str] | None = None
) -> AnswerParse:
    """The letter of the final reasoning (C.4): structured parsing of the `<answer>` tag, with a single-letter
    fallback for a reply without one.

    1. The answer part (after `</think>`) holds an `<answer>` tag: the last tag decides, by `_letter_in`.
    2. It holds no tag: the answer part itself, by the same rules.
    3. No letter at all there: the last `<answer>` tag inside the thinking text (a reply that ended inside or right after
       its reasoning).
    Anything else gives no letter, with the reason of the step that decided.

    Args:
        text: the model's reply.
        letters: the option letters, in order.
        options: the option texts in the same order (with or without their own "C." label); when given, a reply that
            names no letter but the text of exactly one option gives that option, and a label followed by another
            option's exact text gives none.
    """
    if not text:
        return AnswerParse(None, None, reason="empty_output")
    valid = {str(letter) for letter in letters}
    by_letter = option_texts(letters, options)
    thinking, answer = _split_for_answer(text)
    tag = _last_tag(answer)
    if tag is not None:
        letter, rule = letter_in(tag, valid, by_letter)
        where = "answer_tag"
    else:
        letter, rule = letter_in(answer, valid, by_letter)
        where = "reply"
        nothing_said = rule in ("empty_answer", "no_valid_letter")
        if letter is None and nothing_said and (thinking_tag := _last_tag(thinking)) is not None:
            letter, rule = letter_in(thinking_tag, valid, by_letter)
            where = "thinking_tag"
    if letter is None:
        return AnswerParse(None, None, reason=f"{where}:{rule}")
    return AnswerParse(letter, f"{where}/{rule}")
