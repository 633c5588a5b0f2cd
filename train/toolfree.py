"""Tool-free filter: the SFT mix keeps only samples without tool traffic (paper supplementary A, "Training Data":
"we retain only samples without external tool calls").
"""
from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from cader.train.formats import Sample

TOOL_MARKERS = ("<tool_call>", "<tool_response>", "<tools>")


def tool_reason(sample: Sample) -> str | None:
    """Why ``sample`` involves tools (None if it is tool-free)."""
    if sample.meta.get("tools"):
        return "tools_declared"
    for turn in sample.turns:
        if turn.role == "tool":
            return "tool_role"
        text = turn.text
        for marker in TOOL_MARKERS:
            if marker in text:
                return f"marker {marker}"
    return None


def filter_tool_free(samples: Iterable[Sample]) -> tuple[list[Sample], Counter]:
    """Keep tool-free samples; return them and the number dropped per source."""
    kept, dropped = [], Counter()
    for sample in samples:
        if tool_reason(sample) is None:
            kept.append(sample)
        else:
            dropped[sample.source] += 1
    return kept, dropped
