"""Calibration figures (matplotlib, Agg backend): each figure is written as PNG next to the CSV behind it.

- accuracy_vs_margin: Stage-1 accuracy per margin bin with 95% Clopper-Pearson bars, on the paper's Table 4 bins
  and on equal-mass bins, n beside each point and under each bin, bins under 10 samples hollow (paper Fig. 5 /
  Table 4); one line per benchmark when several.
- reliability: accuracy vs mean P_top1 in 15 equal-width bins at T = 1, the fitted T and the paper's T = 2, with
  95% Clopper-Pearson bars and the count of each bin, and the histogram of P_top1 underneath.
- risk_coverage: error among exits vs exit rate, with its (1 - delta) upper bound, alpha, the chosen tau and the
  paper's (T = 2, tau = 0.97) point.
- tau_sweep: exit rate and exit accuracy vs tau, and the final accuracy wherever Stage-2 outcomes are known (the
  figure says so when none are).
- per_benchmark_tau: exit rate and exit accuracy vs tau per benchmark (only with several benchmarks).
"""

from __future__ import annotations

import csv
from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
from cader.calibrate.binomial import clopper_pearson_interval, clopper_pearson_upper, wilson_interval
from cader.calibrate.margin import PAPER_TAU
from cader.calibrate.tau import exit_counts_at
from cader.calibrate.temperature import calibration_bins

# Paper "Adaptive Routing via Confidence", Table 4: margin intervals (lower inclusive, upper exclusive)
PAPER_MARGIN_BINS = (
    ("<0.90", -np.inf, 0.90),
    ("[0.90,0.97)", 0.90, 0.97),
    ("[0.97,0.99)", 0.97, 0.99),
    ("[0.99,0.995)", 0.99, 0.995),
    ("≥0.995", 0.995, np.inf),
)
TAU_GRID = np.unique(np.r_[np.linspace(0.01, 0.9, 90), 1.0 - np.logspace(-1, -6, 121)])
TAU_TICKS = (1e-4, 1e-3, 0.01, 0.05, 0.5, 0.9, 0.99, 0.999, 0.9999, 0.99999, 0.999999)
TAU_AXIS_FLOOR, TAU_AXIS_CEIL = 1e-9, 1.0 - 1e-9  # a logit axis cannot reach 0 or 1; tau search goes to 1 - 1e-8
DPI = 120

plt.rcParams.update({"font.size": 11, "axes.titlesize": 12, "axes.labelsize": 11, "legend.fontsize": 9})


def write_csv(path: Path, rows: Sequence[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fields = list(rows[0].keys()) if rows else ["empty"]
    with path.open("w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=fields)
        writer.writeheader()
        writer.writerows(rows)
    return path


def _save(fig, out_dir: Path, name: str, rows: Sequence[dict]) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    png = out_dir / f"{name}.png"
    fig.savefig(png, dpi=DPI, bbox_inches="tight")
    plt.close(fig)
    return [png, write_csv(out_dir / f"{name}.csv", rows)]


def _bin_row(group: str, label: str, lo: float, hi: float, correct: np.ndarray, margin: np.ndarray) -> dict:
    n, k = int(correct.size), int(correct.sum())
    cp_lo, cp_hi = clopper_pearson_interval(k, n)
    w_lo, w_hi = wilson_interval(k, n)
    return {
        "group": group,
        "bin": label,
        "margin_lo": lo,
        "margin_hi": hi,
        "n": n,
        "correct": k,
        "accuracy": k / n if n else float("nan"),
        "mean_margin": float(margin.mean()) if n else float("nan"),
        "cp95_lo": float(cp_lo),
        "cp95_hi": float(cp_hi),
        "wilson95_lo": float(w_lo),
        "wilson95_hi": float(w_hi),
    }


def paper_bin_table(margin: np.ndarray, correct: np.ndarray, group: str = "all") -> list[dict]:
    """Counts and Stage-1 accuracy per Table 4 margin interval."""
    rows = []
    for label, lo, hi in PAPER_MARGIN_BINS:
        sel = (margin >= lo) & (margin < hi)
        rows.append(_bin_row(group, label, lo, hi, correct[sel], margin[sel]))
    return rows


def range_label(lo: float, hi: float) -> str:
    """"lo–hi" with as many significant digits as it takes to tell the ends apart (up to 6), else "≈lo"."""
    for digits in range(2, 7):
        a, b = f"{lo:.{digits}g}", f"{hi:.{digits}g}"
        if a != b:
            return f"{a}–{b}"
    return f"≈{lo:.3g}"


def equal_mass_table(
    margin: np.ndarray, correct: np.ndarray, n_bins: int = 10, group: str = "all"
) -> list[dict]:
    """Bins of (nearly) equal sample count by margin rank."""
    order = np.argsort(margin, kind="stable")
    n_bins = int(max(1, min(n_bins, margin.size)))
    rows = []
    for chunk in np.array_split(order, n_bins):
        if chunk.size == 0:
            continue
        m = margin[chunk]
        label = range_label(float(m.min()), float(m.max()))
        rows.append(_bin_row(group, label, float(m.min()), float(m.max()), correct[chunk], m))
    return rows


SMALL_BIN = 10  # a bin with fewer samples is drawn hollow: its accuracy is a handful of answers


def _bars(ax, x, rows, annotate: bool = True, stack: int = 0, **style):
    """Accuracy per bin with its 95 % Clopper-Pearson bar, and the bin's n written beside the point (an accuracy
    of 1.0 from one sample must not read like one from 47); ``stack`` puts a group's labels in its own row."""
    acc = np.array([r["accuracy"] for r in rows])
    lo = np.array([r["cp95_lo"] for r in rows])
    hi = np.array([r["cp95_hi"] for r in rows])
    n = np.array([r["n"] for r in rows])
    x = np.asarray(x, dtype=np.float64)
    ok = np.isfinite(acc)
    bars = ax.errorbar(x[ok], acc[ok], yerr=[acc[ok] - lo[ok], hi[ok] - acc[ok]], capsize=3, marker="o", **style)
    colour = bars[0].get_color()
    small = ok & (n < SMALL_BIN)
    if small.any():
        ax.plot(x[small], acc[small], "o", ms=9, mfc="white", mec=colour, ls="none")
    if annotate:
        for xi, yi, ni in zip(x[ok], acc[ok], n[ok]):
            dy = -12 - 9 * stack if yi > 0.9 else 6 + 9 * stack
            ax.annotate(f"n={ni}", (xi, yi), textcoords="offset points", xytext=(8, dy), fontsize=7,
                        color=colour)


def plot_accuracy_vs_margin(out_dir, margin, correct, benchmarks, temperature: float) -> list[Path]:
    margin, correct, benchmarks = np.asarray(margin), np.asarray(correct, bool), np.asarray(benchmarks)
    names = sorted(set(benchmarks.tolist()))
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(13, 5))
    rows = paper_bin_table(margin, correct)
    x = np.arange(len(PAPER_MARGIN_BINS))
    _bars(ax1, x, rows, color="black", lw=2, label=f"all (n={margin.size})")
    if len(names) > 1:
        for j, name in enumerate(names):
            sel = benchmarks == name
            b_rows = paper_bin_table(margin[sel], correct[sel], group=name)
            rows += b_rows
            _bars(ax1, x + 0.06 * (j + 1), b_rows, lw=1, alpha=0.8, label=f"{name} (n={int(sel.sum())})",
                  annotate=len(names) <= 3, stack=j + 1)
    ax1.set_xticks(x, [f"{lab}\nn={r['n']}" for (lab, _, _), r in zip(PAPER_MARGIN_BINS, rows)])
    ax1.set_title(f"Paper bins (Table 4), T = {temperature:.3g}; hollow: n < {SMALL_BIN}")
    em_rows = equal_mass_table(margin, correct, group="all (equal-mass)")
    x2 = np.arange(len(em_rows))
    _bars(ax2, x2, em_rows, color="tab:blue", lw=2, annotate=False)  # equal mass: n is in the tick labels
    ax2.set_xticks(x2, [f"{r['bin']}\nn={r['n']}" for r in em_rows], rotation=45, ha="right", fontsize=8)
    ax2.set_title(f"Equal-mass bins by margin, T = {temperature:.3g}")
    for ax in (ax1, ax2):
        ax.set_xlabel("Stage-1 margin M = P_top1 − P_top2 (bin, sample count)")
        ax.set_ylabel("Stage-1 accuracy (95% Clopper–Pearson)")
        ax.set_ylim(-0.02, 1.02)
        ax.grid(alpha=0.3)
    ax1.legend(loc="lower right")
    fig.suptitle("Stage-1 accuracy vs confidence margin (cf. paper Fig. 5)")
    return _save(fig, Path(out_dir), "accuracy_vs_margin", rows + em_rows)


def plot_reliability(out_dir, confidences: dict[str, np.ndarray], correct, n_bins: int = 15) -> list[Path]:
    """``confidences``: label -> P_top1 per sample at that temperature (same samples, same correctness)."""
    correct = np.asarray(correct, bool)
    fig, (ax, axh) = plt.subplots(2, 1, figsize=(7, 8), gridspec_kw={"height_ratios": [3, 1.3]}, sharex=True)
    ax.plot([0, 1], [0, 1], ls="--", color="grey", label="perfect calibration")
    edges = np.linspace(0, 1, n_bins + 1)
    rows = []
    for label, conf in confidences.items():
        conf = np.asarray(conf, dtype=np.float64)
        bins = calibration_bins(conf, n_bins)
        n_b = np.bincount(bins, minlength=n_bins)
        mean_conf = np.bincount(bins, weights=conf, minlength=n_bins) / np.maximum(n_b, 1)
        acc = np.bincount(bins, weights=correct, minlength=n_bins) / np.maximum(n_b, 1)
        k_b = np.bincount(bins, weights=correct, minlength=n_bins).round().astype(np.int64)
        cp_lo, cp_hi = clopper_pearson_interval(k_b, n_b)
        ok = n_b > 0
        line = ax.errorbar(mean_conf[ok], acc[ok], yerr=[acc[ok] - cp_lo[ok], cp_hi[ok] - acc[ok]], marker="o",
                           capsize=3, label=f"{label} (95% Clopper–Pearson)")
        for xb, yb, nb in zip(mean_conf[ok], acc[ok], n_b[ok]):
            ax.annotate(f"{nb}", (xb, yb), textcoords="offset points", xytext=(4, 4), fontsize=7,
                        color=line[0].get_color())
        axh.hist(conf, bins=edges, histtype="step", lw=1.5, label=label)
        for b in range(n_bins):
            rows.append(
                {
                    "temperature": label,
                    "bin_lo": edges[b],
                    "bin_hi": edges[b + 1],
                    "n": int(n_b[b]),
                    "correct": int(k_b[b]),
                    "mean_confidence": float(mean_conf[b]) if n_b[b] else float("nan"),
                    "accuracy": float(acc[b]) if n_b[b] else float("nan"),
                    "cp95_lo": float(cp_lo[b]),
                    "cp95_hi": float(cp_hi[b]),
                }
            )
    ax.set_ylabel("Stage-1 accuracy in bin")
    ax.set_title(f"Reliability of P_top1 ({n_bins} equal-width bins, selection split n = {correct.size}; "
                 "numbers: samples per bin)", fontsize=10)
    ax.set_ylim(-0.02, 1.02)
    ax.grid(alpha=0.3)
    ax.legend(loc="upper left")
    axh.set_xlabel("confidence P_top1")
    axh.set_ylabel("samples")
    axh.grid(alpha=0.3)
    return _save(fig, Path(out_dir), "reliability", rows)


def _grid_stats(margin: np.ndarray, correct: np.ndarray, taus: np.ndarray):
    return exit_counts_at(margin, correct, taus)


def tau_axis_limits(chosen_tau: float) -> tuple[float, float]:
    """x-limits of every tau plot: the standard grid widened so the chosen tau and the paper's 0.97 both show.

    A tau at or above 1 (no threshold qualified: nobody exits) is drawn at the right edge; a tau at or below 0
    (everyone exits) at the left edge.
    """
    lo, hi = float(TAU_GRID[0]), float(TAU_GRID[-1])
    if np.isfinite(chosen_tau) and 0.0 < chosen_tau < 1.0:
        lo, hi = min(lo, chosen_tau / 2.0), max(hi, 1.0 - (1.0 - chosen_tau) / 2.0)
    return max(lo, TAU_AXIS_FLOOR), min(hi, TAU_AXIS_CEIL)


def tau_grid(chosen_tau: float) -> np.ndarray:
    """Taus a sweep is evaluated at: the standard grid, extended to the axis limits, plus the chosen and paper tau."""
    lo, hi = tau_axis_limits(chosen_tau)
    extra = [PAPER_TAU, lo, hi, *np.geomspace(lo, 0.01, 20), *(1.0 - np.geomspace(1e-6, 1.0 - hi, 20))]
    if np.isfinite(chosen_tau) and lo <= chosen_tau <= hi:
        extra.append(chosen_tau)
    grid = np.unique(np.r_[TAU_GRID, extra])
    return grid[(grid >= lo) & (grid <= hi)]


def shown_tau(chosen_tau: float) -> float:
    """Where the chosen tau is drawn: itself, or the nearest axis edge when it lies outside (0, 1)."""
    lo, hi = tau_axis_limits(chosen_tau)
    return float(np.clip(chosen_tau, lo, hi)) if np.isfinite(chosen_tau) else hi


def _tau_axis(ax, chosen_tau: float) -> None:
    """Logit-scaled tau axis with plain decimal tick labels, wide enough for the chosen and the paper's tau."""
    lo, hi = tau_axis_limits(chosen_tau)
    ax.set_xscale("logit")
    ax.set_xlim(lo, hi)
    ticks = [t for t in TAU_TICKS if lo <= t <= hi]
    ax.set_xticks(ticks, [f"{t:g}" for t in ticks], rotation=30)
    ax.minorticks_off()
    ax.set_xlabel("threshold tau (exit iff M ≥ tau; logit scale)")


def _tau_label(label: str, chosen_tau: float) -> str:
    if chosen_tau >= 1.0:
        return f"{label} (no exit: drawn at the right edge)"
    if chosen_tau <= 0.0:
        return f"{label} (everyone exits: drawn at the left edge)"
    return label


def plot_risk_coverage(
    out_dir, margin, correct, delta: float, alpha: float, chosen: dict, paper: dict
) -> list[Path]:
    margin, correct = np.asarray(margin, np.float64), np.asarray(correct, bool)
    order = np.argsort(-margin, kind="stable")
    n_exit = np.arange(1, margin.size + 1)
    n_err = np.cumsum(~correct[order])
    coverage, risk = n_exit / margin.size, n_err / n_exit
    upper = clopper_pearson_upper(n_err, n_exit, delta)
    fig, ax = plt.subplots(figsize=(7.5, 5))
    ax.plot(coverage, risk, label="error among exits (selection split)", color="tab:blue")
    ax.plot(
        coverage, upper, label=f"upper {1 - delta:.0%} Clopper–Pearson bound", color="tab:orange", ls="--"
    )
    ax.axhline(alpha, color="red", lw=1, label=f"alpha = {alpha}")
    for pt, marker, colour in ((chosen, "*", "green"), (paper, "s", "purple")):
        if pt.get("exit_rate") is not None and pt.get("exit_accuracy") is not None:
            ax.plot(
                pt["exit_rate"],
                1 - pt["exit_accuracy"],
                marker=marker,
                ms=13,
                ls="none",
                color=colour,
                label=pt["label"],
            )
    ax.set_xlabel("coverage = exit rate (fraction answered by Stage 1)")
    ax.set_ylabel("risk = Stage-1 error among exits")
    ax.set_title("Risk–coverage of early exit")
    ax.set_xlim(0, 1)
    # the whole bound curve stays on the plot (it starts high where few samples exit)
    top = max(0.2, 1.5 * alpha, float(np.nanmax(upper)) if upper.size else 1.0, float(np.nanmax(risk)) if risk.size else 0)
    ax.set_ylim(0, min(1.02, top * 1.05))
    ax.grid(alpha=0.3)
    ax.legend(loc="upper left")
    rows = [
        {"coverage": c, "risk": r, "upper_bound": u, "threshold": t}
        for c, r, u, t in zip(coverage, risk, upper, margin[order])
    ]
    return _save(fig, Path(out_dir), "risk_coverage", rows)


def plot_tau_sweep(out_dir, margin, correct, chosen: dict, paper: dict, stage2_correct=None,
                   stage2_known=None) -> list[Path]:
    """Exit rate and exit accuracy over a tau grid (logit axis so 0.9 … 0.999999 stay readable), and the final
    accuracy (Stage-1 answer on exits, Stage-2 answer below tau) on the samples whose Stage-2 outcome is known
    (``stage2_known``, default all); without Stage-2 outcomes the figure says the curve is missing and why."""
    margin, correct = np.asarray(margin, np.float64), np.asarray(correct, bool)
    grid = tau_grid(chosen["tau"])
    n_exit, n_err = _grid_stats(margin, correct, grid)
    rate = n_exit / max(margin.size, 1)
    acc = np.where(n_exit > 0, 1 - n_err / np.maximum(n_exit, 1), np.nan)
    rows = [
        {"tau": t, "exit_rate": r, "exit_accuracy": a, "n_exits": int(e)}
        for t, r, a, e in zip(grid, rate, acc, n_exit)
    ]
    fig, ax = plt.subplots(figsize=(9, 5))
    ax.plot(grid, rate, label="exit rate", color="tab:blue")
    ax.plot(grid, acc, label="exit accuracy", color="tab:green")
    known = np.ones(margin.size, bool) if stage2_known is None else np.asarray(stage2_known, bool)
    if stage2_correct is not None and known.any():
        s2, m_k, c_k = np.asarray(stage2_correct, bool)[known], margin[known], correct[known]
        k_exit, k_err = _grid_stats(m_k, c_k, grid)
        _, s2_correct_exit = _grid_stats(m_k, ~s2, grid)  # counts s2 == True among exits
        final = (s2.sum() - s2_correct_exit + (k_exit - k_err)) / known.sum()
        part = "" if known.all() else f", on the {int(known.sum())} of {margin.size} with a Stage-2 outcome"
        ax.plot(grid, final, label=f"final accuracy (Stage 2 below tau{part})", color="black")
        for row, f in zip(rows, final):
            row["final_accuracy"] = f
            row["n_final"] = int(known.sum())
    else:
        ax.text(0.02, 0.03, "no final-accuracy curve: these predictions carry no Stage-2 outcomes\n"
                "(add a uniform_stage2 run's predictions.jsonl to draw it)", transform=ax.transAxes, fontsize=8,
                color="dimgrey", bbox={"facecolor": "white", "edgecolor": "lightgrey", "alpha": 0.9})
    ax.axvline(shown_tau(chosen["tau"]), color="green", ls="--", label=_tau_label(chosen["label"], chosen["tau"]))
    if paper.get("exit_rate") is not None:
        ax.plot([PAPER_TAU], [paper["exit_rate"]], "s", color="purple", ms=9, label=paper["label"] + " exit rate")
    if paper.get("exit_accuracy") is not None:
        ax.plot(
            [PAPER_TAU], [paper["exit_accuracy"]], "D", color="purple", ms=9, label=paper["label"] + " exit acc."
        )
    _tau_axis(ax, chosen["tau"])
    ax.set_ylim(-0.02, 1.02)
    ax.set_ylabel("fraction of samples")
    ax.set_title("Early exit vs threshold (selection split, fitted T)")
    ax.grid(alpha=0.3)
    ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1.0))
    return _save(fig, Path(out_dir), "tau_sweep", rows)


def plot_per_benchmark(out_dir, margin, correct, benchmarks, chosen_tau: float) -> list[Path]:
    margin, correct, benchmarks = (
        np.asarray(margin, np.float64),
        np.asarray(correct, bool),
        np.asarray(benchmarks),
    )
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(13, 5))
    rows = []
    grid = tau_grid(chosen_tau)
    for name in sorted(set(benchmarks.tolist())):
        sel = benchmarks == name
        n_exit, n_err = _grid_stats(margin[sel], correct[sel], grid)
        rate = n_exit / sel.sum()
        acc = np.where(n_exit > 0, 1 - n_err / np.maximum(n_exit, 1), np.nan)
        ax1.plot(grid, rate, label=f"{name} (n={int(sel.sum())})")
        ax2.plot(grid, acc, label=name)
        rows += [
            {"benchmark": name, "tau": t, "exit_rate": r, "exit_accuracy": a, "n_exits": int(e)}
            for t, r, a, e in zip(grid, rate, acc, n_exit)
        ]
    for ax, ylabel in ((ax1, "exit rate"), (ax2, "exit accuracy")):
        label = _tau_label(f"chosen tau = {chosen_tau:.4g}", chosen_tau)
        ax.axvline(shown_tau(chosen_tau), color="green", ls="--", label=label)
        ax.axvline(PAPER_TAU, color="purple", ls=":", label=f"paper tau = {PAPER_TAU}")
        _tau_axis(ax, chosen_tau)
        ax.set_ylim(-0.02, 1.02)
        ax.set_ylabel(ylabel)
        ax.set_title(f"{ylabel.capitalize()} vs tau per benchmark")
        ax.grid(alpha=0.3)
        ax.legend(loc="lower left")
    return _save(fig, Path(out_dir), "per_benchmark_tau", rows)
