"""One Markdown page that links every artefact of a quickstart run (scripts/quickstart.sh) with its headline numbers."""

from __future__ import annotations

import json
from pathlib import Path

from cader.evaluate.judge.aggregate import NOT_A_REAL_JUDGE
from cader.evaluate.judge.providers import LOOPBACK_MODEL
from cader.vlm.files import write_atomic
from jsonargparse import CLI


def _load(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return None


def _link(root: Path, path: Path) -> str:
    return f"[{path.relative_to(root)}]({path.relative_to(root)})"


def _pct(value) -> str:
    return "–" if value is None else f"{value:.1f}"


def eval_rows(root: Path) -> list[str]:
    rows = []
    for report_path in sorted((root / "eval").glob("**/report.json")):
        report = _load(report_path)
        if report is None:
            rows.append(f"| {report_path.parent.relative_to(root)} | unreadable report | | | | | |")
            continue
        overall = report.get("overall", {})
        run = report_path.parent.relative_to(root / "eval")
        rows.append(
            f"| {run} | {overall.get('n', 0)} | {_pct(overall.get('accuracy'))} | {_pct(overall.get('stage1_accuracy'))}"
            f" | {_pct(overall.get('stage1_exit_rate'))} | {overall.get('failures', 0)}"
            f" | {_link(root, report_path.with_suffix('.md'))} |"
        )
    return rows


def judge_lines(root: Path) -> list[str]:
    """The judge's headline numbers, and, first, a warning when they did not come from a real judge."""
    judge = _load(root / "judge" / "judge_report.json")
    if not judge:
        return ["- **no judge report found**"]
    lines = []
    if judge.get("real_judge") is False or judge.get("judge_model") == LOOPBACK_MODEL:
        lines.append(f"- **{judge.get('warning') or NOT_A_REAL_JUDGE}.** Set JUDGE_BASE_URL and JUDGE_MODEL "
                     "to judge with a real model.")
    failed = judge.get("failed_judgments") or []
    lines.append(
        f"- {_link(root, root / 'judge' / 'judge_report.md')}: judge `{judge.get('judge_model')}`, n = {judge['n']}, "
        f"accuracy {_number(judge.get('accuracy'))}, Traj {_number(judge.get('traj'))}, "
        f"MC-rate {_number(judge.get('mc_rate'))}, failed judgments {len(failed)}"
    )
    if (judge.get("rerun") or {}).get("summary"):
        lines.append(f"- last judge run: {judge['rerun']['summary']}")
    return lines


def _number(value) -> str:
    return "–" if value is None else f"{value:.3f}"


def summarize(root: Path) -> str:
    lines = [f"# Quickstart summary: `{root}`", ""]
    export = root / "sft" / "export"
    lines += ["## 1. Tiny SFT", ""]
    if (export / "config.json").exists():
        lines.append(f"- exported model: {_link(root, export)}")
        metrics = sorted((root / "sft").glob("logs/**/metrics.csv"))
        if metrics:
            lines.append(f"- training log: {_link(root, metrics[-1])}")
    else:
        lines.append("- **no export found**")

    lines += ["", "## 2. Calibration", ""]
    calibration = _load(root / "calibration" / "calibration.json")
    if calibration:
        select = calibration.get("select", {})
        lines.append(
            f"- {_link(root, root / 'calibration' / 'calibration.json')}: T = {calibration['temperature']:.3f}, "
            f"τ = {calibration['tau']:.4f} (mode {calibration.get('mode')}), exit rate on the selection split "
            f"{select.get('exit_rate')}"
        )
        for figure in sorted((root / "calibration" / "figures").glob("*.png")):
            lines.append(f"- figure: {_link(root, figure)}")
    else:
        lines.append("- **no calibration.json found**")

    lines += ["", "## 3. CADER runs (accuracy and exit rate in %)", "",
              "| run | n | accuracy | Stage-1 accuracy | Stage-1 exit | failures | report |",
              "|---|---|---|---|---|---|---|", *eval_rows(root)]  # fmt: skip

    lines += ["", "## 4. AgentVidBench judge", "", *judge_lines(root)]
    return "\n".join(lines) + "\n"


def main(root: str = "runs/tiny") -> Path:
    """Write <root>/SUMMARY.md.

    Args:
        root: The quickstart output folder.
    """
    base = Path(root)
    text = summarize(base)
    out = base / "SUMMARY.md"
    write_atomic(out, text)
    print(text)
    return out


if __name__ == "__main__":
    CLI(main, as_positional=False)
