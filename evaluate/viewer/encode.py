"""The cards as the page carries them: small columns parsed at load, the rest as lines parsed on demand.

At 20,000 samples one JSON object of cards is tens of MB the browser must parse before it can draw anything. The
page instead carries
- `index`: per filter dimension the distinct values once and one small integer per card (columnar), each card's
  question number and its failure tags: everything filtering, counting and the question view need;
- card lines: one JSON line per card (Stage 1, Stage 2, cost, frames, judgments), parsed when the card is drawn;
- question lines: one JSON line per distinct question (benchmark and sample id): its text, options, gold letter,
  video and ground-truth milestones, shared by every run that answered it.
Lines are JSON with "<" written as \\u003c, so no line can close or confuse its <script> element.
"""

from __future__ import annotations

import json
import math

from cader.evaluate.viewer.collect import FILTERS

QUESTION_FIELDS = ("id", "qid", "video", "q", "opts", "letters", "gold", "ms")
NOT_JUDGED, NO_TAGS = "(not judged)", "(no tags)"


def finite(value):
    """`value` with every NaN or infinite float replaced by None (JSON has no such numbers: a record holding one
    must not cost the page; the card shows '-' there)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite(v) for v in value]
    return value


def script_safe(text: str) -> str:
    return text.replace("<", "\\u003c").replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")


def json_line(payload) -> str:
    """Compact JSON safe inside <script>; the slow pass that replaces NaN runs only for a payload that has one."""
    text = json.dumps(payload, ensure_ascii=False, separators=(",", ":"), allow_nan=True)
    if "NaN" in text or "Infinity" in text:  # a non-finite number (or those words in a string: harmless re-run)
        text = json.dumps(finite(payload), ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    return script_safe(text)


def card_tags(card: dict) -> list[str]:
    """The failure tags of a card's judgments, or why there are none."""
    judgments = card.get("judge") or []
    if not judgments:
        return [NOT_JUDGED]
    tags = sorted({t for j in judgments for t in j.get("tags") or []})
    return tags or [NO_TAGS]


def value_order(dim: str, values: set[str], runs: list[str]) -> list[str]:
    if dim == "run":
        return [r for r in runs if r in values] + sorted(values - set(runs))
    return sorted(values)


def encode(cards: list[dict], runs: list[str]) -> tuple[dict, list[str], list[str]]:
    """(index, card lines, question lines) for `cards` (collect.card_of's dicts, judgments attached)."""
    judged = any(c.get("judge") for c in cards)
    dims = list(FILTERS) + (["tag"] if judged else [])
    tags = [card_tags(c) for c in cards]
    values = {d: value_order(d, {c["f"][d] for c in cards}, runs) for d in FILTERS}
    if judged:
        values["tag"] = sorted({t for ts in tags for t in ts})
    codes = {d: {v: k for k, v in enumerate(values[d])} for d in dims}
    columns = {d: [codes[d][c["f"][d]] for c in cards] for d in FILTERS}
    if judged:
        columns["tag"] = [[codes["tag"][t] for t in ts] for ts in tags]
    question_of: dict[tuple[str, str], int] = {}
    question_lines: list[str] = []
    question_bench: list[int] = []
    question_ids: list[str] = []
    card_question, card_lines = [], []
    for card in cards:
        key = (card["f"]["benchmark"], str(card["id"]))
        if key not in question_of:
            question_of[key] = len(question_lines)
            question_lines.append(json_line({k: card.get(k) for k in QUESTION_FIELDS}))
            question_bench.append(codes["benchmark"][key[0]])
            question_ids.append(key[1])
        card_question.append(question_of[key])
        card_lines.append(json_line({k: v for k, v in card.items() if k not in QUESTION_FIELDS and k != "f"}))
    index = {"dims": dims, "values": values, "columns": columns, "question": card_question,
             "questions": {"benchmark": question_bench, "id": question_ids}, "runs": runs}
    return index, card_lines, question_lines


def decode(page: str) -> list[dict]:
    """The cards of a written page as card_of made them (filter values, question and card fields), for checking a
    page without a browser."""
    import re

    def element(ident: str) -> str:
        found = re.search(rf'<script type="[^"]+" id="{ident}">(.*?)</script>', page, re.DOTALL)
        if found is None:
            raise ValueError(f"the page has no <script id={ident!r}>")
        return found.group(1)

    index = json.loads(element("data"))
    questions = [json.loads(line) for line in element("question-lines").split("\n") if line]
    lines = [json.loads(line) for line in element("card-lines").split("\n") if line]
    cards = []
    for i, line in enumerate(lines):
        f = {d: index["values"][d][index["columns"][d][i]] for d in FILTERS}
        card = {"f": f, **questions[index["question"][i]], **line}
        if "tag" in index["columns"]:
            card["tags"] = [index["values"]["tag"][k] for k in index["columns"]["tag"][i]]
        cards.append(card)
    return cards
