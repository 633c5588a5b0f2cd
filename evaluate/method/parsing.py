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


@dataclass(frozen=True)
class AnswerParse:
    letter: str | None
    how: (
        str | None
    )  # "<where>/<rule>": where in {answer_tag, reply, thinking_tag}, rule in {alone, lead, tail, prose}
    reason: str | None = None

    def to_dict(self) -> dict:
        return {"letter": self.letter, "how": self.how, "reason": self.reason}


_TAG_OPEN = re.compile(r"<\s*answer\s*>", re.IGNORECASE)
_TAG_CLOSE = re.compile(r"<\s*/\s*answer\s*>", re.IGNORECASE)
# Words that may introduce the letter: "Answer: C", "The final answer is (C)", "option C", "Choice: C".
_PREFIX = r"(?i:(?:the\s+)?(?:final\s+|correct\s+|best\s+)?(?:answer|option|choice)(?:\s+is)?)"
# The whole text is one letter, perhaps bracketed, bolded, punctuated or introduced: "C", "(c)", "**C.**",
# "Answer: C". A lone lowercase letter is still that letter (nothing else it could be).
_ALONE = re.compile(rf"[\W_]*(?:{_PREFIX}[\W_]*)?([A-Za-z])[\W_]*")
# The text opens with a capital letter set off as an option label, then goes on: "C: text", "B. the red car",
# "(D) because ...", "Answer: C. The man ...". The label needs its delimiter and a space after it, so the "A" of
# "A man ..." or of "A.I." is no label.
_LEAD = re.compile(
    rf"[\W_]*(?:{_PREFIX}\s*[:\-]?\s*)?(?:\(\s*([A-Z])\s*\)|\[\s*([A-Z])\s*\]|([A-Z])\s*(?:[.:)]|\s[-–—]))(?=\s)"
)
# The text ends by naming its answer: "..., so the answer is C.", "... Answer: (C)".
_TAIL = re.compile(rf"(?<![A-Za-z]){_PREFIX}\s*[:\-]?\s*[(\[]?\s*([A-Z])\s*[)\]]?[\W_]*$")
# A capital letter standing alone in prose: no letter, digit, apostrophe or hyphen joined to it and no part of a
# dotted abbreviation, so "I'm", "A's", "T-shirt", "X-ray", "A4", "A.I." and the capitals inside words never count.
_STANDALONE = re.compile(r"(?<![A-Za-z0-9'’\-])(?<![A-Za-z]\.)([A-Z])(?![A-Za-z0-9'’]|-[A-Za-z]|\.[A-Za-z])")
# "I" followed by one of these is the pronoun, not option I ("I think it is C" names C only). The list is closed
# on purpose: first-person verbs and modals that a letter cannot take as its verb ("I is", "I shows" can).
_PRONOUN_VERB_WORDS = """
    am think thought believe believed guess see saw notice noticed observe observed watched watch can could
    will would should must might need choose chose pick picked select selected conclude concluded feel felt
    found find infer inferred determine determined recall remember agree know knew also first initially finally
    now still do did have had"""
_PRONOUN_VERBS = frozenset(_PRONOUN_VERB_WORDS.split())
# A letter right after an answer word is the option ("option A is right"), whatever follows it.
_AFTER_PREFIX = re.compile(rf"(?<![A-Za-z]){_PREFIX}\s*[:\-]?\s*[(\[]?\s*$")
# A letter right after a negation is an option the text rules out ("not C", "rather than B", "neither C nor D").
_AFTER_NEGATION = re.compile(
    r"(?i:(?<![A-Za-z])(?:not|no|never|neither|nor|except|excluding|than|instead\s+of)|n't)\s*[(\[]?\s*$"
)
_NEXT_WORD = re.compile(r"\s+([a-z]+)")


def _prose_letter(content: str, valid: set[str]) -> tuple[str | None, str]:
    """(letter, reason): the one valid capital standing alone in `content`.

    "A" and "I" are English words as well as option letters. When they are valid letters and read as words
    (followed by a lowercase word: "A man walks", "I noticed") they could be either, and guessing wrong is silent:
    "A red car" (the option text, not necessarily option A) or "A is right, not B" must not give a letter. So such
    an "A" or "I" makes the prose ambiguous, except "I" before a first-person verb ("I think", "I noticed"), which
    is only ever the pronoun, contractions ("I'm", "I'd"), which never stand alone, and a letter right after an
    answer word ("option A is right"). A letter right after a negation ("not C", "rather than B") is one the text
    rules out and is not counted.
    """
    letters = set()
    for match in _STANDALONE.finditer(content):
        letter = match.group(1)
        if letter not in valid:
            continue
        before = content[max(0, match.start() - 40) : match.start()]
        if _AFTER_NEGATION.search(before):
            continue
        following = _NEXT_WORD.match(content, match.end())
        if letter in ("A", "I") and following and not _AFTER_PREFIX.search(before):
            if letter == "I" and following.group(1) in _PRONOUN_VERBS:
                continue
            return None, f"ambiguous_word:{letter}"
        letters.add(letter)
    if len(letters) == 1:
        return letters.pop(), ""
    if letters:
        return None, "ambiguous_letters:" + ",".join(sorted(letters))
    return None, "no_valid_letter"


def _letter_in(content: str, valid: set[str]) -> tuple[str | None, str]:
    """(letter, rule) when `content` names one valid letter, else (None, reason). Rules, most specific first:
    the letter alone, a leading option label, a closing "answer is X", one standalone capital in prose."""
    text = content.strip()
    if not text:
        return None, "empty_answer"
    named = None
    if (alone := _ALONE.fullmatch(text)) is not None:
        named, rule = alone.group(1).upper(), "alone"
    elif (lead := _LEAD.match(text)) is not None:
        named, rule = next(g for g in lead.groups() if g), "lead"
    elif (tail := _TAIL.search(text)) is not None:
        named, rule = tail.group(1), "tail"
    if named is not None:
        # An explicitly named letter that is not an option is no answer; another letter in the text is not it.
        return (named, rule) if named in valid else (None, f"invalid_letter:{named}")
    letter, reason = _prose_letter(text, valid)
    return (letter, "prose") if letter else (None, reason)


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


def parse_answer(text: str | None, letters: Sequence[str]) -> AnswerParse:
    """The letter of the final reasoning (C.4): structured parsing of the `<answer>` tag, with a single-letter
    fallback for a reply without one.

    1. The answer part (after `</think>`) holds an `<answer>` tag: the last tag decides, by `_letter_in`.
    2. It holds no tag: the answer part itself, by the same rules.
    3. No letter at all there: the last `<answer>` tag inside the thinking text (a reply that ended inside or right after
       its reasoning).
    Anything else gives no letter, with the reason of the step that decided.
    """
    if not text:
        return AnswerParse(None, None, reason="empty_output")
    valid = {str(letter) for letter in letters}
    thinking, answer = _split_for_answer(text)
    tag = _last_tag(answer)
    if tag is not None:
        letter, rule = _letter_in(tag, valid)
        where = "answer_tag"
    else:
        letter, rule = _letter_in(answer, valid)
        where = "reply"
        nothing_said = rule in ("empty_answer", "no_valid_letter")
        if letter is None and nothing_said and (thinking_tag := _last_tag(thinking)) is not None:
            letter, rule = _letter_in(thinking_tag, valid)
            where = "thinking_tag"
    if letter is None:
        return AnswerParse(None, None, reason=f"{where}:{rule}")
    return AnswerParse(letter, f"{where}/{rule}")
