"""Per-source accounting of the SFT mix: what each source lost and why, which sources cannot train at all, which
lose more than the allowed fraction, and the one-line summary `--plan_only` prints. Pure functions on counts.

A report entry (one per source, written to data_report.json) holds:
  rows                every row of the file; tool_calls_dropped: rows the tool-free filter removed (supplementary A);
  skipped / skipped_ids  per reason: row errors ("format", "audio", "media_outside_root") and planning skips
                      ("missing_media", "bad_video", "over_budget", ...), with the row ids / messages;
  trainable           rows left after all of that (before `ratio`), train_samples: after `ratio`;
  budget_reductions   how many kept samples lost frames / pixels / target tokens to the token budget.
"""
from __future__ import annotations

from collections import defaultdict


def errors_by_kind(errors) -> dict[str, list[str]]:
    """FormatErrors grouped by their counter (kind), as messages naming file and row."""
    out: dict[str, list[str]] = defaultdict(list)
    for err in errors:
        out[getattr(err, "kind", "format")].append(str(err))
    return out


def read_report(n_rows: int, tool_dropped: int, skipped: dict[str, list[str]]) -> dict:
    return {"rows": n_rows, "tool_calls_dropped": tool_dropped,
            "skipped": {k: len(v) for k, v in skipped.items()}, "skipped_ids": {k: list(v) for k, v in skipped.items()}}


def failed_sources(report: dict[str, dict]) -> list[str]:
    """One message per source in ``report`` (the ones with nothing to train), saying why."""
    out = []
    for name, entry in report.items():
        rows, tools = entry["rows"], entry["tool_calls_dropped"]
        if rows == 0:
            out.append(f"source {name!r}: the file has no rows")
            continue
        reasons = [f"{n} {reason}" for reason, n in sorted(entry["skipped"].items(), key=lambda kv: -kv[1])]
        if tools:
            reasons.append(f"{tools} call tools (dropped by the tool-free filter)")
        examples = [ids[0] for ids in entry.get("skipped_ids", {}).values() if ids][:2]
        example = f"; e.g. {' | '.join(examples)}" if examples else ""
        out.append(f"source {name!r}: none of its {rows} rows can be trained ({', '.join(reasons)}){example}")
    return out


def lost_fraction(entry: dict) -> float:
    """Share of the tool-free rows that did not make it to training (row errors, media, budget)."""
    base = entry["rows"] - entry["tool_calls_dropped"]
    if base <= 0 or "trainable" not in entry:
        return 0.0
    return (base - entry["trainable"]) / base


def loss_warnings(report: dict[str, dict], max_loss: float) -> list[str]:
    out = []
    for name, entry in report.items():
        frac = lost_fraction(entry)
        if frac > max_loss:
            base = entry["rows"] - entry["tool_calls_dropped"]
            out.append(f"WARNING: source {name!r} loses {base - entry['trainable']} of its {base} tool-free rows "
                       f"({frac:.1%} > max_source_loss {max_loss:.1%}): {entry['skipped']}; see data_report.json")
    return out


def summary_line(name: str, entry: dict) -> str:
    """What `--plan_only` prints for one source: every count a user holds against the release's figures."""
    skipped = entry["skipped"]
    row_errors = {k: v for k, v in skipped.items() if k in ("format", "audio", "media_outside_root")}
    budget = skipped.get("over_budget", 0)
    media = {k: v for k, v in skipped.items() if k not in row_errors and k != "over_budget"}
    return (f"{name}: {entry['rows']} rows, {entry['tool_calls_dropped']} tool-call rows dropped, "
            f"row errors {row_errors or 0}, media/decode skips {media or 0}, {budget} over the token budget, "
            f"{entry['trainable']} trainable, {entry['train_samples']} to train "
            f"(budget reduced: {entry.get('budget_reductions') or 'none'})")


def group_totals(report: dict[str, dict]) -> dict[str, dict[str, int]]:
    """Sums per group (sources with a non-empty "group"), for comparing several files with one published count."""
    out: dict[str, dict[str, int]] = {}
    for entry in report.values():
        group = entry.get("group")
        if group:
            tot = out.setdefault(group, {"rows": 0, "tool_calls_dropped": 0, "trainable": 0, "train_samples": 0})
            for key in tot:
                tot[key] += entry.get(key, 0)
    return out
