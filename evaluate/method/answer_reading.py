r"""Reading the final letter (C.4) out of the answer text: the rules a careful reader follows.

The rules, in order:
- the reply is one letter, however dressed ("C", "(c)", "**C.**", "Answer: C", "\boxed{C}", '{"answer": "C"}');
- after a correction ("No wait", "Actually", "On second thought") the text after it decides;
- an answer statement ("Answer: C", "the correct option is C", "I choose C") or a verdict ("C is correct",
  "C: yes") names the answer; an earlier different one is overridden only by an explicit final form (an answer line,
  "Final answer", \boxed, a JSON key), and a different letter left standing after it makes the reply ambiguous;
- otherwise a leading option label ("C. green") names it, unless other options are named too (echoed options);
- otherwise the one capital option letter standing alone in prose, and, failing any letter, the one option whose
  text appears (whole words, case-insensitive).
Letters that a reply rules out ("not C", "B is wrong", "A: no") name nothing.

Pure functions on text; `parsing.parse_answer` finds the answer text (tag, reply, thinking) and calls `letter_in`.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass

# Cleaning: markup that dresses a letter is dropped, fullwidth forms become ASCII (NFKC), a \boxed{} answer becomes
# an answer line, and the Chinese answer words become English ones, so one set of patterns reads them all.
_BRACKETS = str.maketrans(
    {"【": "(", "】": ")", "〔": "(", "〕": ")", "「": '"', "」": '"', "。": ".", "、": ","}
)
_CJK_ANSWER = re.compile(r"(?:最终|正确)?答案\s*(?:是|为|為)?")
_LATEX_WRAP = re.compile(r"\\(?:text|textbf|mathrm|mathbf|mbox)\s*\{([^{}]*)\}")
_BOXED = re.compile(r"\\(?:boxed|fbox)\s*\{([^{}]*)\}")
_MARKUP = re.compile(r"[*`$]+|^[ \t]*#+", re.MULTILINE)


def _clean(text: str) -> str:
    text = unicodedata.normalize("NFKC", text).translate(_BRACKETS)
    text = _CJK_ANSWER.sub(" answer: ", text)
    text = _MARKUP.sub("", text)
    text = _LATEX_WRAP.sub(r"\1", _LATEX_WRAP.sub(r"\1", text))
    return _BOXED.sub(lambda m: f"\nFinal answer: {m.group(1)}\n", text)


# Words that may introduce the letter: "Answer: C", "The final answer is (C)", "option C", "Choice: C".
_PREFIX = (
    r"(?i:(?:the\s+)?(?:final[\s_]+|correct[\s_]+|best[\s_]+)?(?:answer|option|choice)(?![A-Za-z])(?:\s+is)?)"
)
# The whole text (or a whole line) is one letter, perhaps bracketed, bolded, punctuated or introduced: "C", "(c)",
# "C.", "Answer: C", '{"answer": "C"}'. A lone lowercase letter is still that letter (nothing else it could be).
_ALONE = re.compile(rf"[\W_]*(?:{_PREFIX}[\W_]*)?([A-Za-z])[\W_]*")
# An answer statement: what names the answer, then the letter. "option"/"choice" alone do not state an answer ("option
# B is wrong"); with "correct", "best", ... they do.
_ADJ = r"(?:final|correct|best|right|true|only|most[\s_]+likely)[\s_]+"
_STATER = (
    rf"(?:(?:the|my|our)\s+)?(?:{_ADJ})?answer(?:[\s_]+(?:option|choice|letter))?(?![A-Za-z])"
    rf"|(?:the\s+)?{_ADJ}(?:option|choice)(?![A-Za-z])"
    r"|(?:i|we)(?:'ll|'d|\s+will|\s+would|\s+shall)?\s+(?:choose|pick|select|go\s+with|opt\s+for)"
    r"|(?:my|our)\s+(?:choice|pick|selection)"
)
_STATEMENT = re.compile(
    rf"(?i:(?<![A-Za-z])({_STATER})['\"]?\s*(?:(?:is|was|would\s+be|should\s+be|must\s+be|will\s+be)\s*)?[:=\-–]?"
    r"\s*(?:(?:option|choice|letter)\s*)?['\"(\[]*\s*)(?<![A-Za-z])([A-Za-z])(?![A-Za-z0-9'’])"
)
# A capital letter standing alone in prose: no letter, digit, apostrophe or hyphen joined to it and no part of a
# dotted or slashed abbreviation, so "I'm", "A's", "T-shirt", "X-ray", "A4", "A.I.", "N/A" and the capitals inside
# words never count ("B/C" names neither).
_STANDALONE = re.compile(
    r"(?<![A-Za-z0-9'’\-])(?<![A-Za-z][./])([A-Z])(?![A-Za-z0-9'’]|-[A-Za-z]|\.[A-Za-z]|/[A-Za-z])"
)
# An option label at the start of a line: "C. green", "(C) green", "C) green", "C: green", "C - green".
_LABEL_AFTER = re.compile(r"\s*(?:[.:)\]]|\s[-–—])(?=\s|$)")
_LINE_HEAD = re.compile(rf"[^\S\n]*(?:[-•>][^\S\n]*)?(?:{_PREFIX}\s*[:\-]?\s*)?[(\[]?\s*$")
_LOWER_LEAD = re.compile(rf"[\W_]*(?:{_PREFIX}\s*[:\-]?\s*)?(?:\(\s*([a-z])\s*\)|([a-z])\s*[.:)])(?=\s)")
# Verdicts on a letter: after it ("B is wrong", "A: no", "C is correct", "C: yes"), or before it ("not C").
_VERDICT_HEAD = r"\s*(?:[:)\].,|\-–—]\s*)?"
# A list of further letters, each perhaps with its text in brackets, may stand between a letter and its verdict:
# "A, B and D do not match", "A (red) and B (blue) can be excluded".
_GLOSS = r"(?:\s*\([^()\n]{1,40}\))?"
# (Each part of the list has one way to match, so a failing match backtracks in linear time.)
_LIST_SEP = r"\s*(?:,\s*(?:(?:and|or)\s+)?|(?:and|or)\s+|&\s*)"
_LETTER_LIST = _GLOSS + rf"(?:{_LIST_SEP}(?:option\s+)?[(\[]?[A-Z][)\]]?{_GLOSS})*"
# Only verdicts on the option count, not descriptions: "A is not red" or "C doesn't appear" may be the answer to a
# question that asks which is NOT shown.
_VERDICT_WORDS = r"(?:the\s+)?(?:correct|right|true|answer|case|possible|supported|consistent)\b"
_NEG_AFTER = re.compile(
    _LETTER_LIST
    + _VERDICT_HEAD
    + r"(?i:(?:is|are|seems|looks)\s+(?:incorrect|wrong|false|unlikely|impossible|ruled\s+out|eliminated|excluded)\b"
    rf"|(?:is|are|seems|looks)(?:\s+not|n't)\s+{_VERDICT_WORDS}"
    r"|(?:do|does)(?:\s+not|n't)\s+(?:match|fit|apply|hold|correspond|agree|make\s+sense)\b"
    r"|can\s*(?:not|'t)\s+be\s+(?:right|correct|true|the\s+answer)\b|can\s+be\s+(?:ruled\s+out|eliminated|excluded)"
    r"|(?:incorrect|wrong|false)\b|no(?=[^\S\n]*(?:[.,;:!)|\n]|\Z))|[✗✘❌])"
)
# "All options except C are wrong": the verdict that follows is not on C.
_EXCEPTED = re.compile(
    r"(?i:(?<![A-Za-z])(?:except|excluding|other\s+than|apart\s+from|besides))\s*(?:option\s+)?[(\[]?\s*\Z"
)
# ("right" of place is no verdict: "B is right next to the door".)
_PLACE = r"(?!\s+(?:next|there|here|behind|beside|in|on|at|above|below|by|after|before|of|side|now)\b)"
_AFFIRM_AFTER = re.compile(
    _VERDICT_HEAD + rf"(?i:(?:is|seems|looks)\s+(?:the\s+)?(?:correct|right|true|best|answer)\b{_PLACE}|"
    rf"(?:yes|correct|right|true)\b{_PLACE}|[✓✔✅])"
)
_NEG_BEFORE = re.compile(
    r"(?i:(?<![A-Za-z])(?:not|no|never|neither|nor|than|instead\s+of|rule\s+out|rules\s+out|"
    r"ruling\s+out|ruled\s+out|eliminat\w*)|n't)[^\S\n]*(?:(?:option|choice)[^\S\n]+)?[(\[]?[^\S\n]*\Z"
)
# A letter right after an option word is the option ("option A shows"), whatever follows it ("Answer: A man" may
# still be the article).
_AFTER_OPTION_WORD = re.compile(r"(?i:(?<![A-Za-z])(?:option|choice|letter)s?)\s*[:\-]?\s*[(\[]?\s*$")
_NEXT_WORD = re.compile(r"[^\S\n]+([a-z]+|[A-Z]{2,})(?![A-Za-z])")
# "A"/"I" followed by a lowercase word read as the article or pronoun ("A man walks", "I noticed"), except before these
# words, which only follow a letter ("A is", "A could be", "A because"). "I" before a first-person verb is the pronoun.
_LETTER_FOLLOWER_WORDS = """is was seems looks appears shows describes matches fits says states mentions could might may would can should
    also and or nor vs versus because since as so given which that here there then therefore"""
_LETTER_FOLLOWERS = frozenset(_LETTER_FOLLOWER_WORDS.split())
_PRONOUN_VERB_WORDS = """am think thought believe believed guess see saw notice noticed observe observed watched watch can could will
    would should must might need choose chose pick picked select selected conclude concluded feel felt found find infer
    inferred determine determined recall remember agree know knew also first initially finally now still do did have
    had"""
_PRONOUN_VERBS = frozenset(_PRONOUN_VERB_WORDS.split())
# A correction: the text after the last one decides. "Actually" and "hmm" are soft: with no letter after them the
# text before still stands; after the others ("wait", "no,", "on second thought") it does not.
_CORRECTION = re.compile(
    r"(?i:(?:^|(?<=[.!?;,\n…]))\s*(?:\(\s*)?(no,?\s+wait|wait|hold\s+on|correction|sorry|scratch\s+that|i\s+mean|"
    r"on\s+(?:second|further)\s+thoughts?|on\s+reflection|on\s+closer\s+(?:look|inspection)|looking\s+(?:again|more"
    r"\s+closely)|re-?checking|upon\s+(?:further\s+)?(?:review|reflection|inspection)|i\s+was\s+wrong|my\s+mistake|"
    r"let\s+me\s+(?:re-?consider|re-?check|re-?think|re-?evaluate|double[\s-]check|check\s+again|look\s+again)|"
    r"actually|hmm+)\b|(?:^|(?<=[.!?\n]))\s*(no)(?=\s*[,.!]))",
    re.MULTILINE,
)
_SOFT_CORRECTIONS = ("actually", "hmm")
# A correction that only adds a possibility ("Wait, it could also be C") leaves the first answer standing too.
_HEDGE = re.compile(r"(?i)\b(?:also|too|as\s+well|either|might|maybe|perhaps|possibly|could)\b")


@dataclass(frozen=True)
class _Mention:
    pos: int
    letter: str
    kind: str  # final | decl | verdict | lead | label | plain | word | negated


@dataclass(frozen=True)
class _Reading:
    letter: str | None
    rule: str  # the rule that decided, or the reason there is no letter
    named: bool = False  # the text names some letter it does not rule out (so it is not silent)
    negated: frozenset = frozenset()


def _option_words(text: str) -> str:
    return " ".join(re.findall(r"\w+", unicodedata.normalize("NFKC", text).lower()))


def option_texts(letters: Sequence[str], options: Sequence[str] | None) -> dict[str, str]:
    """{letter: option text without its own "C." label}; empty when there are no texts or they do not pair up."""
    if options is None or len(options) != len(letters):
        return {}
    texts = {}
    for letter, option in zip(map(str, letters), map(str, options)):
        match = re.match(rf"\s*(?:\(\s*{re.escape(letter)}\s*\)|{re.escape(letter)}\s*[.):])\s*", option)
        texts[letter] = (option[match.end() :] if match else option).strip()
    return texts


def _mask_options(text: str, options: dict[str, str]) -> str:
    """The text with every option text that holds a capital letter of its own blanked out ("Person A hands the box
    to Person B"), so those capitals are not read as letters. Positions are kept."""
    for option in options.values():
        if len(option) >= 3 and _STANDALONE.search(option) and not _ALONE.fullmatch(option):
            pattern = r"\s+".join(re.escape(word) for word in option.split())
            text = re.sub(pattern, lambda m: "~" * len(m.group(0)), text, flags=re.IGNORECASE)
    return text


def _reads_as_word(following: re.Match | None) -> bool:
    """Whether an "A" or "I" followed by this word reads as the article or pronoun ("A man", "A RED CUP")."""
    return following is not None and following.group(1).lower() not in _LETTER_FOLLOWERS


def _verdict(after: str) -> bool:
    return bool(_NEG_AFTER.match(after) or _AFFIRM_AFTER.match(after))


def _statements(text: str) -> list[_Mention]:
    found = []
    for match in _STATEMENT.finditer(text):
        letter, pos = match.group(2), match.start(2)
        following = _NEXT_WORD.match(text, match.end(2))
        if letter in "aAiI" and _reads_as_word(following):
            continue  # "the answer is a man", "The answer is A red car": the article, not a letter
        if _NEG_AFTER.match(text[match.end(2) : match.end(2) + 80]):
            continue  # "Answer A is wrong": a letter ruled out
        line_head = text[text.rfind("\n", 0, match.start()) + 1 : match.start()]
        final = "final" in match.group(1).lower() or not re.search(r"[A-Za-z0-9]", line_head)
        found.append(_Mention(pos, letter.upper(), "final" if final else "decl"))
    for match in re.finditer(r"[^\n]+", text):  # a line that is one letter: "Answer: C" (final) or "C"
        alone = _ALONE.fullmatch(match.group(0))
        if alone is not None and not _verdict(match.group(0)[alone.end(1) : alone.end(1) + 80]):
            prefixed = re.sub(r"[^A-Za-z]", "", match.group(0)) != alone.group(1)
            kind = "final" if prefixed else "decl"
            found.append(_Mention(match.start() + alone.start(1), alone.group(1).upper(), kind))
    return found


def _mentions(text: str, valid: set[str]) -> list[_Mention]:
    """Every letter the text names, in order, with the role it plays."""
    stated = {m.pos: m for m in _statements(text)}
    found = list(stated.values())
    start = _LOWER_LEAD.match(text)
    if start is not None:
        pos = start.start(1) if start.group(1) else start.start(2)
        if pos not in stated:
            found.append(_Mention(pos, text[pos].upper(), "lead"))
    first_word = re.search(r"[A-Za-z0-9]", text)
    for match in _STANDALONE.finditer(text):
        letter, pos = match.group(1), match.start(1)
        if pos in stated:
            continue
        before, after = text[max(0, pos - 40) : pos], text[match.end() : match.end() + 60]
        line_start = text.rfind("\n", 0, pos) + 1
        line_head = text[line_start:pos] if pos - line_start < 40 else "-"
        following = _NEXT_WORD.match(text, match.end())
        if _EXCEPTED.search(before):
            kind = "plain"
        elif _NEG_BEFORE.search(before) or _NEG_AFTER.match(after):
            kind = "negated"
        elif _AFFIRM_AFTER.match(after):
            kind = "verdict"
        elif _LINE_HEAD.fullmatch(line_head) and _LABEL_AFTER.match(after):
            first = first_word.start() >= line_start and not any(m.pos < pos for m in found)
            kind = "lead" if first else "label"
        elif letter in "AI" and following and not _AFTER_OPTION_WORD.search(before):
            if letter == "I" and following.group(1).lower() in _PRONOUN_VERBS:
                continue
            kind = "word" if _reads_as_word(following) else "plain"
        else:
            kind = "plain"
        if letter in valid or kind == "lead":
            found.append(_Mention(pos, letter, kind))
    return sorted(found, key=lambda m: m.pos)


def _conflicting_text(clean: str, mention: _Mention, options: dict[str, str]) -> str | None:
    """The other letter whose option text is exactly what follows this label ("B. green" when green is C's)."""
    if not options:
        return None
    end = clean.find("\n", mention.pos)
    rest = _option_words(clean[mention.pos + 1 : end if end >= 0 else None])
    own = _option_words(options.get(mention.letter, ""))
    if not rest or rest == own:
        return None
    return next((letter for letter, text in options.items() if _option_words(text) == rest), None)


_NEGATED_TEXT = re.compile(r"(?:^|\s)(?:not|no|never|neither|nor|than|n t)$")  # "green, not blue" names green


def _option_text_letter(text: str, options: dict[str, str]) -> _Reading:
    """The one option whose text appears in `text` as whole words; an appearance inside a longer option's
    appearance ("red" inside "red car") is that longer option's."""
    padded = f" {_option_words(text)} "
    spans = []
    for letter, option in options.items():
        words = _option_words(option)
        if words:
            found = re.finditer(f" {re.escape(words)} ", padded)
            spans += [
                (m.start(), m.end(), letter) for m in found if not _NEGATED_TEXT.search(padded[: m.start()])
            ]
    letters = {
        letter for start, end, letter in spans
        if not any(s <= start and end <= e and (e - s) > (end - start) for s, e, _ in spans)
    }
    if len(letters) == 1:
        return _Reading(letters.pop(), "option_text", named=True)
    if letters:
        return _Reading(None, "ambiguous_option_text:" + ",".join(sorted(letters)), named=True)
    return _Reading(None, "no_valid_letter")


def _read(clean: str, valid: set[str], options: dict[str, str]) -> _Reading:
    """The answer named by text holding no correction (see the rules at the top of this section)."""
    text = clean.strip()
    if not text:
        return _Reading(None, "empty_answer")
    if (alone := _ALONE.fullmatch(text)) is not None:
        named = alone.group(1).upper()
        return (
            _Reading(named, "alone", True)
            if named in valid
            else _Reading(None, f"invalid_letter:{named}", True)
        )
    masked = _mask_options(clean, options)
    mentions = _mentions(masked, valid)
    negated = frozenset(m.letter for m in mentions if m.kind == "negated")
    standing = [m for m in mentions if m.kind not in ("negated", "word")]
    strong = [m for m in standing if m.kind in ("final", "decl", "verdict")]
    if strong:
        last = strong[-1]
        rule = {"final": "final", "decl": "decl", "verdict": "verdict"}[last.kind]
        others = sorted({m.letter for m in strong} - {last.letter})
        later = sorted({m.letter for m in standing if m.pos > last.pos} - {last.letter})
        if last.letter not in valid:
            return _Reading(None, f"invalid_letter:{last.letter}", True, negated)
        if others and last.kind != "final":
            return _Reading(
                None, "conflicting_answers:" + ",".join(sorted([*others, last.letter])), True, negated
            )
        if later:
            return _Reading(None, "letters_after_answer:" + ",".join(later), True, negated)
        if any(m.letter == last.letter and m.pos > last.pos for m in mentions if m.kind == "negated"):
            return _Reading(None, f"answer_ruled_out:{last.letter}", True, negated)
    elif standing and standing[0].kind == "lead":
        last, rule = standing[0], "lead"
        if last.letter not in valid:
            return _Reading(None, f"invalid_letter:{last.letter}", True, negated)
        if others := sorted({m.letter for m in standing} - {last.letter}):
            kind = "echoed_options" if any(m.kind == "label" for m in standing) else "ambiguous_letters"
            return _Reading(None, f"{kind}:" + ",".join([last.letter, *others]), True, negated)
    else:
        words = [m for m in mentions if m.kind == "word"]
        letters = sorted({m.letter for m in standing})
        if words or len(letters) > 1:
            reason = (
                f"ambiguous_word:{words[0].letter}" if words else "ambiguous_letters:" + ",".join(letters)
            )
            if options and not letters:  # "A red car": the option text may still name one option
                by_text = _option_text_letter(text, options)
                if by_text.letter:
                    return by_text
            return _Reading(None, reason, True, negated)
        if not letters:
            reading = _option_text_letter(text, options)
            return _Reading(reading.letter, reading.rule, reading.named, negated)
        last, rule = standing[0], "prose"
    if (other := _conflicting_text(clean, last, options)) is not None:
        return _Reading(None, f"letter_text_conflict:{last.letter},{other}", True, negated)
    return _Reading(last.letter, rule, True, negated)


def _after_correction(before: _Reading, after: _Reading, tail: str, marker: str) -> _Reading:
    """What a correction leaves: the reading `after` it decides when it names a letter; when it names nothing, the
    reading `before` it stands after a soft correction ("Actually, ...") or when `after` only rules letters out,
    unless it rules out that letter."""
    if after.letter is not None:
        if before.letter not in (None, after.letter):
            if _HEDGE.search(tail):  # "Wait, it could also be C"
                return _Reading(None, f"hedged_correction:{before.letter},{after.letter}", True)
            concluding = re.search(rf"(?<![A-Za-z]){after.letter}[^A-Za-z]*\Z", tail)
            if (
                after.rule in ("prose", "option_text") and not concluding
            ):  # "Wait, option B shows a blue cup."
                return _Reading(None, f"unclear_correction:{before.letter},{after.letter}", True)
        return _Reading(after.letter, "correction", True)
    if after.named:
        return _Reading(None, f"after_correction:{after.rule}", True)
    if before.letter is not None and before.letter in after.negated:
        return _Reading(None, f"retracted:{before.letter}", True)
    if before.letter is not None and not (after.negated or marker.startswith(_SOFT_CORRECTIONS)):
        return _Reading(None, f"retracted:{before.letter}", True)
    return before


def _resolve(clean: str, valid: set[str], options: dict[str, str]) -> _Reading:
    """Like `_read`, but the text is read correction by correction, each one applied to the reading before it."""
    corrections = list(_CORRECTION.finditer(clean))
    reading = _read(clean[: corrections[0].start()] if corrections else clean, valid, options)
    for i, correction in enumerate(corrections):
        tail = clean[correction.end() : corrections[i + 1].start() if i + 1 < len(corrections) else None]
        marker = (correction.group(1) or correction.group(2) or "").lower()
        reading = _after_correction(reading, _read(tail, valid, options), tail, marker)
    return reading


def letter_in(content: str, valid: set[str], options: dict[str, str]) -> tuple[str | None, str]:
    """(letter, rule) when `content` names one valid letter, else (None, reason)."""
    reading = _resolve(_clean(content), valid, options)
    return reading.letter, reading.rule
