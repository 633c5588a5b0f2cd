"""What the router buys: final accuracy against mean compute per sample, over tau (the accuracy-compute frontier).

Input: a uniform_stage2 run (every sample went through Stage 1 and Stage 2, so both outcomes and both costs are
known per sample). At a threshold tau a sample exits after Stage 1 (its Stage-1 answer, Stage-1 FLOPs) when its
margin at the calibration's T is >= tau, and otherwise takes Stage 2 (its Stage-2 answer, all its FLOPs). The curve
runs over every tau from "everyone exits" to "nobody exits" (always Stage 2); marked on it: the certified tau (the
calibration's T and tau), the paper's point (T = 2, tau = 0.97) and always Stage 2.

FLOPs per sample come from calibrate/compute.py (the language model; the main model and the verifier apart, each
at its own size). Writes figures/frontier.png, figures/frontier.csv (a `point` column: curve, certified, paper,
always_stage2, stage1_only) and frontier.md (the table report.md shows).

    python calibrate/frontier.py --predictions runs/uniform_stage2/predictions.jsonl \
        --calibration runs/calib/calibration.json --out runs/frontier
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
from cader.calibrate.compute import record_flops, text_shape_from_config
from cader.calibrate.margin import PAPER_TAU, PAPER_TEMPERATURE, InvalidLogits, margin, validate_logits
from cader.calibrate.plots import DPI, write_csv
from cader.contracts.calibration import NO_EXIT_TAU
from cader.contracts.jsonl import LineProblem, iter_lines
from cader.contracts.records import PredictionRecord, present_field_problem
from cader.vlm.flops import QWEN3_VL_8B_TEXT, RELEASED_TEXT, TextShape

TERA = 1e12
MAX_CURVE_POINTS = 400


def operating_point(margin_values, s1_correct, s2_correct, flops_stage1, flops_full, tau: float) -> dict:
    """Exit rate, final accuracy and mean TFLOPs per sample at one tau (exit iff M >= tau)."""
    exits = np.asarray(margin_values, np.float64) >= tau
    acc = np.where(exits, np.asarray(s1_correct, bool), np.asarray(s2_correct, bool))
    flops = np.where(exits, np.asarray(flops_stage1, np.float64), np.asarray(flops_full, np.float64))
    n = max(exits.size, 1)
    return {"tau": float(tau), "exit_rate": float(exits.sum() / n), "final_accuracy": float(acc.sum() / n),
            "mean_tflops": float(flops.sum() / n / TERA)}


def frontier_curve(margin_values, s1_correct, s2_correct, flops_stage1, flops_full,
                   max_points: int = MAX_CURVE_POINTS) -> list[dict]:
    """``operating_point`` at NO_EXIT_TAU (always Stage 2) and at each distinct margin, descending (each adds
    exits), thinned evenly to at most ``max_points``; sorted by compute."""
    m = np.unique(np.asarray(margin_values, np.float64))[::-1]
    if m.size > max_points:
        m = m[np.unique(np.linspace(0, m.size - 1, max_points).round().astype(int))]
    taus = np.r_[NO_EXIT_TAU, m]
    rows = [operating_point(margin_values, s1_correct, s2_correct, flops_stage1, flops_full, t) for t in taus]
    return sorted(rows, key=lambda r: (r["mean_tflops"], -r["tau"]))


def frontier_table(curve: list[dict], points: Mapping[str, dict]) -> list[dict]:
    """The CSV rows: every curve point, then the marked points, each with its `point` name."""
    keys = ("tau", "exit_rate", "final_accuracy", "mean_tflops")
    return ([{"point": "curve", "temperature": None, **{k: r[k] for k in keys}} for r in curve]
            + [{"point": name, "temperature": r.get("temperature"), **{k: r[k] for k in keys}}
               for name, r in points.items()])


def frontier_markdown(points: Mapping[str, dict], n: int, estimated: int,
                      figure: str | None = "figures/frontier.png") -> str:
    """The table report.md shows: the marked points' accuracy, compute and exit rate (``figure``: where the figure
    is, None when there is none)."""
    lines = ["## Accuracy against compute (uniform_stage2 outcomes)", "",
             (f"{n} samples, language-model FLOPs per sample (main model and verifier; "
              f"{estimated} rows estimated from token totals)." + (f" Figure: `{figure}`." if figure else "")), "",
             "| point | T | tau | exit rate | final accuracy | mean TFLOPs / sample |", "|---|---|---|---|---|---|"]
    for name, r in points.items():
        tau = "no exit" if r["tau"] >= NO_EXIT_TAU else f"{r['tau']:.6g}"
        t = f"{r['temperature']:.3g}" if r.get("temperature") is not None else "–"
        lines.append(f"| {name} | {t} | {tau} | {r['exit_rate']:.3f} | {r['final_accuracy']:.4f} | "
                     f"{r['mean_tflops']:.4g} |")
    return "\n".join(lines) + "\n"


def plot_frontier(out_dir: Path, curve: list[dict], points: Mapping[str, dict], title_note: str = "") -> list[Path]:
    """figures/frontier.png and figures/frontier.csv."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7.2, 4.6))
    ax.plot([r["mean_tflops"] for r in curve], [r["final_accuracy"] for r in curve], "-", color="0.35", lw=1.5,
            label="over tau (calibrated T)")
    styles = {"certified": ("*", "tab:green", 16), "paper": ("D", "tab:orange", 9),
              "always_stage2": ("s", "tab:red", 9), "stage1_only": ("o", "tab:blue", 8)}
    for name, r in points.items():
        marker, color, size = styles.get(name, ("x", "k", 8))
        ax.plot(r["mean_tflops"], r["final_accuracy"], marker, color=color, ms=size, ls="none",
                label=f"{r.get('label', name)}: acc {r['final_accuracy']:.3f}, {r['mean_tflops']:.3g} TFLOPs")
    ax.set_xlabel("mean TFLOPs per sample (language model; main + verifier)")
    ax.set_ylabel("final accuracy")
    ax.set_title("Accuracy against compute over tau" + (f" ({title_note})" if title_note else ""))
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right")
    out_dir.mkdir(parents=True, exist_ok=True)
    png = out_dir / "frontier.png"
    fig.savefig(png, dpi=DPI, bbox_inches="tight")
    plt.close(fig)
    return [png, write_csv(out_dir / "frontier.csv", frontier_table(curve, points))]


# ---- file I/O at the edge ------------------------------------------------------------------------------------------


def uniform_stage2_columns(rows, main: TextShape, verifier: TextShape | None) -> tuple[dict, dict, list]:
    """Per-sample lists from uniform_stage2 rows (record dicts, or LineProblems from a reader): Stage-1 logits,
    Stage-1 and Stage-2 correctness, Stage-1 and full FLOPs; the rows left out by reason (failed, breaks the
    predictions contract, no Stage-2 outcome, no gold, malformed), counted; and (row index, the contract's words)
    for each row left out for breaking the contract."""
    cols = {k: [] for k in ("logits", "s1", "s2", "f1", "full", "estimated")}
    skipped: dict[str, int] = {}
    problems: list[tuple[int, str]] = []
    for index, row in enumerate(rows):
        unusable = _unusable(row)
        if unusable:
            why, detail = unusable
            skipped[why] = skipped.get(why, 0) + 1
            problems += [(index, detail)] if detail else []
            continue
        logits, letters = row["stage1"]["logits"], row["letters"]
        s2_pred = row["stage2"].get("pred") if row["stage2"].get("pred") is not None else row.get("pred")
        flops, estimated = record_flops(row, main, verifier)
        cols["logits"].append(logits)
        cols["s1"].append(letters[int(np.argmax(logits))] == row["answer"])
        cols["s2"].append(s2_pred == row["answer"])
        cols["f1"].append(flops["stage1"])
        cols["full"].append(flops["total"])
        cols["estimated"].append(estimated)
    return cols, skipped, problems


def frontier_from_rows(rows, temperature: float, tau: float, main: TextShape = QWEN3_VL_8B_TEXT,
                       verifier: TextShape | None = None, tau_label: str = "certified") -> dict:
    """The frontier of uniform_stage2 rows at a calibration's T and tau: {"n", "skipped", "problems" ((row index,
    why) of each row that breaks the predictions contract), "estimated_rows", "points" (certified, paper,
    always_stage2, stage1_only), "curve"}; n = 0 when no row is usable. What report.md shows for a uniform_stage2
    run (``frontier_markdown(points, n, estimated_rows)``)."""
    cols, skipped, problems = uniform_stage2_columns(rows, main, verifier)
    n = len(cols["s1"])
    out = {"n": n, "skipped": skipped, "problems": problems, "estimated_rows": int(sum(cols["estimated"])),
           "points": {}, "curve": []}
    if n == 0:
        return out
    m_cal = np.array([margin(z, temperature) for z in cols["logits"]])
    m_paper = np.array([margin(z, PAPER_TEMPERATURE) for z in cols["logits"]])
    args = (cols["s1"], cols["s2"], cols["f1"], cols["full"])
    out["points"] = {
        "certified": {**operating_point(m_cal, *args, tau), "temperature": temperature,
                      "label": f"{tau_label} tau = {tau:.4g}"},
        "paper": {**operating_point(m_paper, *args, PAPER_TAU), "temperature": PAPER_TEMPERATURE,
                  "label": "paper T = 2, tau = 0.97"},
        "always_stage2": {**operating_point(m_cal, *args, NO_EXIT_TAU), "temperature": None, "label": "always Stage 2"},
        "stage1_only": {**operating_point(m_cal, *args, 0.0), "temperature": None, "label": "Stage 1 only"},
    }
    out["curve"] = frontier_curve(m_cal, *args)
    return out


def _unusable(row) -> tuple[str, str | None] | None:
    """Why a row is left out: (reason, the contract's words naming the field when it breaks the predictions
    contract, a NaN or infinite logit or margin among them); None when it is used."""
    if isinstance(row, LineProblem) or not isinstance(row, dict):
        return "malformed", None
    if row.get("error"):
        return "failed", None
    problem = present_field_problem(PredictionRecord, row)
    if problem is not None:
        return problem
    stage1 = row.get("stage1") or {}
    if not stage1.get("logits") or len(stage1["logits"]) != len(row.get("letters") or []):
        return "no_logits", None
    try:
        validate_logits(stage1["logits"])
    except InvalidLogits:  # fewer than two options or more than 26: no margin
        return "invalid_logits", None
    if row.get("answer") is None:
        return "no_gold", None
    if row.get("route") != "stage2" or not isinstance(row.get("stage2"), dict):
        return "no_stage2_outcome", None
    return None


def model_shape(path: str | None) -> TextShape:
    """The language model's sizes from a model folder's config.json, or a released checkpoint's by its hub id (runs
    name the paper's 4B verifier so); Qwen3-VL-8B's when nothing names a model, and, said on stderr, for a name that
    is neither."""
    if path and (Path(path) / "config.json").is_file():
        return text_shape_from_config(json.loads((Path(path) / "config.json").read_text(encoding="utf-8")))
    if path in RELEASED_TEXT:
        return RELEASED_TEXT[path]
    if path:
        print(f"frontier: {path} is neither a model folder nor a released checkpoint "
              f"({', '.join(RELEASED_TEXT)}); its FLOPs use Qwen3-VL-8B's sizes", file=sys.stderr)
    return QWEN3_VL_8B_TEXT


def frontier(predictions: Sequence[str], calibration: str, out: str, model: str | None = None,
             verifier: str | None = None) -> dict:
    """Draw final accuracy against mean TFLOPs per sample over tau from a uniform_stage2 run, with the certified
    tau, the paper's tau = 0.97 and always-Stage-2 marked.

    Args:
        predictions: predictions.jsonl of a uniform_stage2 run (Stage-1 logits and Stage-2 outcomes per sample)
        calibration: calibration.json whose T and certified tau are marked
        out: folder for figures/frontier.png|csv and frontier.md
        model: the main model's folder (its config.json sizes the FLOPs; default: the report.json beside the
            predictions names it; else Qwen3-VL-8B's sizes)
        verifier: the verifier's folder or hub id (default: the one the report.json beside the predictions names,
            the paper's Qwen3-VL-4B-Instruct unless the run chose another; else as model)
    """
    from cader.calibrate.calibration_file import read_calibration
    from cader.calibrate.settings import report_config_beside

    cal = read_calibration(calibration)
    config = report_config_beside(predictions[0]) or {}
    main_shape = model_shape(model or config.get("model"))
    verifier_shape = model_shape(verifier or config.get("verifier") or model or config.get("model"))
    t_cal, tau_cal = float(cal["temperature"]), float(cal["tau"])
    located = [(path, line, row) for path in predictions for line, row in iter_lines(Path(path))]
    rows = [row for _, _, row in located]
    result = frontier_from_rows(rows, t_cal, tau_cal, main_shape, verifier_shape, f"certified ({cal['mode']})")
    for index, why in result["problems"]:
        path, line, row = located[index]
        print(f"{path}:{line}: left out ({why}; sample {row.get('benchmark')}/{row.get('sample_id')})",
              file=sys.stderr)
    n, skipped, estimated, points, curve = (result[k] for k in ("n", "skipped", "estimated_rows", "points", "curve"))
    if n == 0:
        raise ValueError(f"no usable uniform_stage2 row in {list(predictions)} (left out: {skipped}); run "
                         "evaluate/run.py --variant uniform_stage2")
    out_dir = Path(out)
    paths = plot_frontier(out_dir / "figures", curve, points, f"{n} samples, T = {t_cal:.3g}")
    (out_dir / "frontier.md").write_text(frontier_markdown(points, n, estimated), encoding="utf-8")
    summary = {"n": n, "skipped": skipped, "estimated_rows": estimated, "points": points,
               "figures": [str(p) for p in paths]}
    print(f"frontier: {n} samples; certified tau {points['certified']['final_accuracy']:.4f} accuracy at "
          f"{points['certified']['mean_tflops']:.4g} TFLOPs/sample, always Stage 2 "
          f"{points['always_stage2']['final_accuracy']:.4f} at {points['always_stage2']['mean_tflops']:.4g} -> "
          f"{paths[0]}" + (f"; left out: {skipped}" if skipped else ""))
    return summary


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    """`frontier` on the command line; exit 2 on unusable input.

    argv: the flags (default: sys.argv[1:]).
    prog: the program name the usage shows.
    """
    from cader.calibrate.calibration_file import CalibrationFileError
    from cader.cli.function_cli import call_arguments, function_parser

    args = call_arguments(function_parser(frontier, prog, several=("predictions",)), argv)
    try:
        frontier(**args)
    except (CalibrationFileError, OSError, ValueError, KeyError) as exc:
        print(f"calibrate/frontier.py: error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
