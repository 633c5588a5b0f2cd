"""The settings Stage-1 margins came from, recorded in calibration.json under ``settings``.

A margin is only as good as the evidence behind it: confidence barely moves when frames are cut while the errors
rise (arXiv 2601.00138), so a tau certified at one frame budget says nothing about another. calibration.json
therefore records what produced its margins, and a run that applies it (evaluate/run.py --calibration) compares
them with its own (``cader.evaluate.calibration_binding``):

- the backbone: its name (the run's --model, from the report.json next to the predictions) and its fingerprint
  (``stage1.fingerprint.model``: the folder's config, weight files and chat template, as Stage-1 reuse checks it);
- the Stage-1 settings: r1, max_frames, max_pixels (``stage1.fingerprint.frames``, else the report's config) and
  whether Stage 1 thinks (always off in CADER's Stage 1; recorded so that a thinking Stage 1 cannot borrow it);
- the benchmarks the rows came from, and the frames Stage 1 actually showed (``stage1.n_frames``).

A field every row agrees on is recorded as that value. Rows that disagree (a calibration pooled over two frame
budgets) record None with the values under ``mixed``; a field no row or report states records None and is listed
under ``unknown``. Either way the run-side check treats it as not matching: nothing says the run's value is the one
the guarantee was certified at.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

STAGE1_FIELDS = ("r1", "max_frames", "max_pixels")
# CADER's Stage 1 prompts with enable_thinking=False (evaluate/method/stage1.py); the chat template that honours or
# patches the switch is part of the backbone fingerprint.
STAGE1_THINKING = False


def _agreed(values: Sequence, field: str, mixed: dict, unknown: list):
    """The one value the known ``values`` agree on; None (and the field noted as mixed or unknown) otherwise."""
    known = sorted({json.dumps(v, sort_keys=True) for v in values if v is not None})
    if len(known) == 1:
        return json.loads(known[0])
    if known:
        mixed[field] = [json.loads(v) for v in known]
    else:
        unknown.append(field)
    return None


def collect_settings(fingerprints: Sequence[dict | None], benchmarks: Sequence[str], n_frames: Sequence[int | None],
                     report_configs: Sequence[dict | None] = ()) -> dict:
    """calibration.json's ``settings`` block from the rows' Stage-1 fingerprints, benchmarks and frame counts (one
    per usable row) and the ``config`` blocks of the report.json files beside the predictions (one per file, None
    where there is none). A row's fingerprint wins over the report: it is what produced that row's logits."""
    configs = [c for c in report_configs if isinstance(c, dict)]
    mixed: dict = {}
    unknown: list = []

    def from_rows(get_row, get_config):
        row_values = [get_row(fp) for fp in fingerprints if isinstance(fp, dict)]
        values = [v for v in row_values if v is not None] or [get_config(c) for c in configs]
        return values

    stage1 = {}
    for name in STAGE1_FIELDS:
        values = from_rows(lambda fp, n=name: (fp.get("frames") or {}).get(n), lambda c, n=name: c.get(n))
        stage1[name] = _agreed(values, name, mixed, unknown)
    stage1["enable_thinking"] = STAGE1_THINKING
    fingerprint = _agreed(from_rows(lambda fp: fp.get("model"), lambda c: None), "backbone.fingerprint", mixed,
                          unknown)
    name = _agreed([c.get("model") for c in configs], "backbone.name", mixed, unknown)
    frames = [int(n) for n in n_frames if n is not None]
    shown = {"min": min(frames), "max": max(frames), "mean": sum(frames) / len(frames)} if frames else None
    return {
        "backbone": {"name": name, "fingerprint": fingerprint},
        "stage1": stage1,
        "benchmarks": sorted(set(benchmarks)),
        "frames_shown": shown,
        "mixed": mixed,
        "unknown": unknown,
    }


def report_config_beside(predictions: str | Path) -> dict | None:
    """The ``config`` block of the report.json in the predictions file's folder, or None (no report, unreadable)."""
    path = Path(predictions).parent / "report.json"
    try:
        config = json.loads(path.read_text(encoding="utf-8")).get("config")
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, AttributeError):
        return None
    return config if isinstance(config, dict) else None


def settings_of(records, predictions: Sequence[str | Path]) -> dict:
    """``collect_settings`` over the loaded Stage-1 records and the reports beside their files."""
    return collect_settings([r.fingerprint for r in records], [r.benchmark for r in records],
                            [r.n_frames for r in records], [report_config_beside(p) for p in predictions])
