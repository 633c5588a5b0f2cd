"""Which tokens of a chat sequence are trained: every assistant turn, as LLaMA-Factory's supervised processor (each
(prompt, response) pair of a multi-turn row is labelled unless `mask_history`) and TRL's assistant-only loss do.

Pure functions on token ids. A turn is ``<|im_start|>`` + the header ``assistant\\n`` + content + ``<|im_end|>``;
its trained span is the content and the closing ``<|im_end|>`` (the model must learn to stop), never the header.
Working on ids keeps the spans exact whatever the vision placeholders expanded to.
"""
from __future__ import annotations

from collections.abc import Sequence

IGNORE_INDEX = -100  # the label of a position the loss skips (the one definition: collate and loss import it)


def assistant_spans(ids: Sequence[int], im_start: int, im_end: int, header: Sequence[int]) -> list[tuple[int, int]]:
    """[start, end] (inclusive) of every assistant turn's content and its ``<|im_end|>``, in order.

    A turn that is still open at the end of ``ids`` (cut by the length budget) spans to the last token.
    """
    ids, header = list(ids), list(header)
    spans = []
    i, n = 0, len(ids)
    while i < n:
        if ids[i] == im_start and ids[i + 1:i + 1 + len(header)] == header:
            start = i + 1 + len(header)
            end = start
            while end < n and ids[end] != im_end:
                end += 1
            spans.append((start, min(end, n - 1)))
            i = end + 1
        else:
            i += 1
    return [(s, e) for s, e in spans if s <= e]


def labels_for_spans(ids: Sequence[int], spans: Sequence[tuple[int, int]], keep: int | None = None) -> list[int]:
    """Labels: ``ids`` inside the spans, IGNORE_INDEX elsewhere, for the first ``keep`` tokens (all if None)."""
    keep = len(ids) if keep is None else min(keep, len(ids))
    labels = [IGNORE_INDEX] * keep
    for start, end in spans:
        for k in range(start, min(end + 1, keep)):
            labels[k] = ids[k]
    return labels
