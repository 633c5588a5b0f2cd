"""predictions.jsonl files -> calibration.json + figures + summary.md (the body of calibrate/fit.py).

Temperature is fitted on one part of the samples and tau selected on the other (seeded, stratified by
benchmark), so the precision guarantee is not spent on data the temperature already saw.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np
from cader.calibrate.calibration_file import write_calibration
from cader.calibrate.margin import PAPER_TAU, PAPER_TEMPERATURE, margins, pad_logits, top1_indices, top1_probs
from cader.calibrate.plots import (
    paper_bin_table,
    plot_accuracy_vs_margin,
    plot_per_benchmark,
    plot_reliability,
    plot_risk_coverage,
    plot_tau_sweep,
)
from cader.calibrate.records import read_predictions, split_fit_select
from cader.calibrate.tau import (
    NO_EXIT_TAU,
    exit_stats,
    select_tau_accuracy,
    select_tau_budget,
    select_tau_precision,
)
from cader.calibrate.temperature import ECE_BINS, fit_temperature, nll_and_ece

MIN_SAMPLES = 4


class CalibrationInputError(ValueError):
    """The inputs cannot support the requested calibration (too few samples, no Stage-2 outcomes, ...)."""


def _final_accuracy(margin, s1, s2, tau) -> float:
    exits = margin >= tau
    return float(np.mean(np.where(exits, s1, s2)))


@dataclass
class Outcomes:
    """The usable Stage-1 outcomes as arrays, one entry per sample."""

    logits: np.ndarray        # (n, options), padded with -inf
    gold: np.ndarray          # index of the right letter
    bench: np.ndarray         # benchmark name
    s1_correct: np.ndarray    # Stage-1's argmax is right
    s2_known: np.ndarray      # the row carries a Stage-2 outcome
    s2_correct: np.ndarray    # that outcome is right (False where unknown)

    @classmethod
    def of(cls, records) -> Outcomes:
        logits = pad_logits([r.logits for r in records])
        gold = np.array([r.gold for r in records], dtype=np.int64)
        return cls(logits=logits, gold=gold, bench=np.array([r.benchmark for r in records]),
                   s1_correct=top1_indices(logits) == gold,
                   s2_known=np.array([r.stage2_correct is not None for r in records]),
                   s2_correct=np.array([bool(r.stage2_correct) for r in records]))  # fmt: skip


def load_outcomes(predictions: Sequence[str], strict: bool, mode: str, budget: float | None):
    """Read the predictions (reporting skipped rows on stderr) and check they can support the calibration."""
    loaded = read_predictions(list(predictions), strict=strict)
    for problem in loaded.problems[:20]:
        print(f"skipped {problem}", file=sys.stderr)
    if len(loaded.problems) > 20:
        print(f"... and {len(loaded.problems) - 20} more skipped rows (see problems.txt)", file=sys.stderr)
    if len(loaded.records) < MIN_SAMPLES:
        raise CalibrationInputError(
            f"only {len(loaded.records)} usable samples in {list(predictions)}; need >= {MIN_SAMPLES}"
        )
    if mode == "budget" and budget is None:
        raise CalibrationInputError("--mode budget needs --budget (the largest allowed Stage-2 fraction)")
    return loaded, Outcomes.of(loaded.records)


def fit_or_fix_temperature(records, o: Outcomes, temperature: float | None, seed: int, fit_fraction: float):
    """T fitted on the fit part (returns T, its record, fit and select indices), or the given T with every sample
    selecting tau."""
    if temperature is None:
        fit_idx, sel_idx = split_fit_select(records, seed=seed, fit_fraction=fit_fraction)
        tfit = fit_temperature(o.logits[fit_idx], o.gold[fit_idx], paper_temperature=PAPER_TEMPERATURE)
        if tfit.at_bound:
            print(f"warning: fitted T = {tfit.temperature:.4g} sits on a search bound {tfit.bounds}", file=sys.stderr)
        return tfit.temperature, tfit.as_dict(), fit_idx, sel_idx
    t_hat = float(temperature)
    nll, ece = nll_and_ece(o.logits, o.gold, t_hat)
    nll_raw, ece_raw = nll_and_ece(o.logits, o.gold, 1.0)
    fit_block = {"temperature": t_hat, "n": 0, "fixed": True, "nll_before": nll_raw, "ece_before": ece_raw,
                 "nll_after": nll, "ece_after": ece}  # fmt: skip
    return t_hat, fit_block, np.zeros(0, np.int64), np.arange(len(o.gold))


def select_threshold(mode: str, m_sel, c_sel, s2_known, s2_correct, alpha, delta, budget, min_exits):
    """tau by the requested rule (calibrate/tau.py) on the select part's margins."""
    if mode == "precision":
        return select_tau_precision(m_sel, c_sel, alpha=alpha, delta=delta, min_exits=min_exits)
    if mode == "budget":
        return select_tau_budget(m_sel, budget)
    if mode == "accuracy":
        if not s2_known.any():
            raise CalibrationInputError(
                "--mode accuracy needs Stage-2 outcomes for the same samples: pass the predictions.jsonl of a "
                "uniform_stage2 run (rows with route == 'stage2' and stage2.pred)"
            )
        return select_tau_accuracy(m_sel[s2_known], c_sel[s2_known], s2_correct[s2_known])
    raise CalibrationInputError(f"unknown mode {mode!r}; choose precision, budget or accuracy")


def write_figures(out_dir: Path, o: Outcomes, sel_idx, t_hat, tau, mode, stats, paper_stats, delta, alpha,
                  n_benchmarks: int) -> list[Path]:  # fmt: skip
    """The calibration figures (calibrate/plots.py) under out_dir/figures."""
    fig_dir = out_dir / "figures"
    m_all, m_sel, c_sel = margins(o.logits, t_hat), margins(o.logits[sel_idx], t_hat), o.s1_correct[sel_idx]
    chosen = {"tau": tau, "exit_rate": stats.exit_rate, "exit_accuracy": stats.exit_accuracy,
              "label": f"chosen tau = {tau:.4g} ({mode}, T = {t_hat:.3g})"}  # fmt: skip
    paper = {"exit_rate": paper_stats.exit_rate, "exit_accuracy": paper_stats.exit_accuracy,
             "label": "paper T = 2, tau = 0.97"}  # fmt: skip
    paths = plot_accuracy_vs_margin(fig_dir, m_all, o.s1_correct, o.bench, t_hat)
    sel_logits = o.logits[sel_idx]
    paths += plot_reliability(
        fig_dir,
        {"T = 1 (raw logits)": top1_probs(sel_logits, 1.0), f"fitted T = {t_hat:.3g}": top1_probs(sel_logits, t_hat),
         "paper T = 2": top1_probs(sel_logits, PAPER_TEMPERATURE)},
        c_sel,
        n_bins=ECE_BINS,
    )  # fmt: skip
    paths += plot_risk_coverage(fig_dir, m_sel, c_sel, delta, alpha, chosen, paper)
    s2_for_plot = o.s2_correct[sel_idx] if o.s2_known[sel_idx].all() else None
    paths += plot_tau_sweep(fig_dir, m_sel, c_sel, chosen, paper, stage2_correct=s2_for_plot)
    if n_benchmarks > 1:
        paths += plot_per_benchmark(fig_dir, m_all, o.s1_correct, o.bench, tau)
    return paths


def calibrate_predictions(
    predictions: Sequence[str],
    out: str,
    mode: Literal["precision", "budget", "accuracy"] = "precision",
    alpha: float = 0.05,
    delta: float = 0.1,
    budget: float | None = None,
    seed: int = 0,
    min_exits: int = 50,
    fit_fraction: float = 0.5,
    temperature: float | None = None,
    strict: bool = False,
    figures: bool = True,
) -> dict:
    """Fit T (CADER Eq. 2) and tau (Algorithm 1 line 10) and write calibration.json, figures/ and summary.md.

    The steps, in order: read the predictions, fit or fix T, select tau, measure the chosen and the paper's
    operating points, draw, write (calibration.json last: its presence means the run finished).

    Args:
        predictions: predictions.jsonl files holding raw Stage-1 option logits, from a held-out split
        out: output folder for calibration.json, figures/ and summary.md
        mode: how tau is chosen: precision bounds the error among early exits, budget caps the share sent to Stage 2,
            accuracy maximises final accuracy (needs Stage-2 outcomes, i.e. a uniform_stage2 run)
        alpha: precision mode: the largest error allowed among early exits
        delta: precision mode: the allowed probability that the exit error exceeds alpha
        budget: budget mode: the largest share of samples sent to Stage 2 (required in that mode)
        seed: seed of the split into the T-fit part and the tau-selection part
        min_exits: precision mode: the fewest early exits a tau may have
        fit_fraction: share of the samples used to fit T; the rest selects tau
        temperature: fix T to this value instead of fitting it (every sample then selects tau)
        strict: stop at the first malformed row instead of skipping and counting it
        figures: also write figures/*.png and the CSV behind each

    Returns:
        The calibration.json payload.
    """
    out_dir = Path(out)
    loaded, o = load_outcomes(predictions, strict, mode, budget)
    t_hat, fit_block, _fit_idx, sel_idx = fit_or_fix_temperature(loaded.records, o, temperature, seed, fit_fraction)

    m_sel, c_sel = margins(o.logits[sel_idx], t_hat), o.s1_correct[sel_idx]
    known_sel, s2_sel = o.s2_known[sel_idx], o.s2_correct[sel_idx]
    selection = select_threshold(mode, m_sel, c_sel, known_sel, s2_sel, alpha, delta, budget, min_exits)
    tau = selection.tau
    stats = exit_stats(m_sel, c_sel, tau, delta)
    select_block = {**stats.as_dict(), "no_exit": selection.no_exit, **selection.details}

    # the paper's operating point (T = 2, tau = 0.97) on the same samples, for comparison
    m_paper = margins(o.logits[sel_idx], PAPER_TEMPERATURE)
    paper_stats = exit_stats(m_paper, c_sel, PAPER_TAU, delta)
    paper_block = {"temperature": PAPER_TEMPERATURE, **paper_stats.as_dict(),
                   "meets_alpha": bool(paper_stats.upper_bound_error <= alpha)}  # fmt: skip
    if known_sel.any():
        s1k, s2k = c_sel[known_sel], s2_sel[known_sel]
        select_block["final_accuracy"] = _final_accuracy(m_sel[known_sel], s1k, s2k, tau)
        paper_block["final_accuracy"] = _final_accuracy(m_paper[known_sel], s1k, s2k, PAPER_TAU)
        select_block["n_with_stage2"] = int(known_sel.sum())

    payload = {
        "temperature": t_hat,
        "tau": tau,
        "mode": mode,
        "alpha": alpha,
        "delta": delta,
        "fit": fit_block,
        "select": select_block,
        "sources": [str(p) for p in predictions],
        "seed": seed,
        "paper_point": paper_block,
        "budget": budget,
        "min_exits": min_exits,
        "fit_fraction": fit_fraction,
        "n_samples": len(loaded.records),
        "n_benchmarks": len(set(o.bench.tolist())),
        "skipped": dict(loaded.skipped),
        "table4_counts": {
            "fitted_T": {r["bin"]: r["n"] for r in paper_bin_table(margins(o.logits, t_hat), o.s1_correct)},
            "paper_T": {r["bin"]: r["n"] for r in paper_bin_table(margins(o.logits, PAPER_TEMPERATURE), o.s1_correct)},
        },
    }

    out_dir.mkdir(parents=True, exist_ok=True)
    if loaded.problems:
        (out_dir / "problems.txt").write_text("".join(f"{p}\n" for p in loaded.problems), encoding="utf-8")
    figure_paths = (write_figures(out_dir, o, sel_idx, t_hat, tau, mode, stats, paper_stats, delta, alpha,
                                  payload["n_benchmarks"]) if figures else [])  # fmt: skip
    payload["figures"] = [str(p.relative_to(out_dir)) for p in figure_paths]
    (out_dir / "summary.md").write_text(render_summary(payload), encoding="utf-8")
    write_calibration(out_dir / "calibration.json", payload)  # last: its presence means the run finished
    return payload


def _fmt(x, digits: int = 4) -> str:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "–"
    return f"{x:.{digits}g}" if isinstance(x, float) else str(x)


def render_summary(p: dict) -> str:
    fit, sel, paper = p["fit"], p["select"], p["paper_point"]
    tau_txt = "no exit (every sample goes to Stage 2)" if p["tau"] >= NO_EXIT_TAU else _fmt(p["tau"], 6)
    lines = [
        "# CADER calibration",
        "",
        (
            f"Sources: {', '.join(p['sources'])} — {p['n_samples']} usable samples, {p['n_benchmarks']} benchmark(s); "
            f"skipped rows: {p['skipped'] or 'none'}."
        ),
        "",
        (
            f"**T = {_fmt(p['temperature'])}, tau = {tau_txt}** (mode `{p['mode']}`, alpha = {p['alpha']}, "
            f"delta = {p['delta']}, seed = {p['seed']})."
        ),
        "",
        "## Temperature fit (gold-letter NLL; ECE on P_top1, 15 equal-width bins)",
        "",
        "| | n | NLL | ECE |",
        "|---|---|---|---|",
        f"| T = 1 (raw) | {fit.get('n')} | {_fmt(fit.get('nll_before'))} | {_fmt(fit.get('ece_before'))} |",
        f"| paper T = 2 | {fit.get('n')} | {_fmt(fit.get('nll_paper'))} | {_fmt(fit.get('ece_paper'))} |",
        (
            f"| fitted T = {_fmt(p['temperature'], 3)} | {fit.get('n')} | {_fmt(fit.get('nll_after'))} "
            f"| {_fmt(fit.get('ece_after'))} |"
        ),
        "",
        "## Early exit on the selection split",
        "",
        "| | T | tau | n | exit rate | exit accuracy | upper bound on exit error | final accuracy |",
        "|---|---|---|---|---|---|---|---|",
        (
            f"| chosen | {_fmt(p['temperature'], 3)} | {tau_txt} | {sel['n']} | {_fmt(sel['exit_rate'])} | "
            f"{_fmt(sel['exit_accuracy'])} | {_fmt(sel['upper_bound_error'])} | {_fmt(sel.get('final_accuracy'))} |"
        ),
        (
            f"| paper | 2 | 0.97 | {paper['n']} | {_fmt(paper['exit_rate'])} | {_fmt(paper['exit_accuracy'])} | "
            f"{_fmt(paper['upper_bound_error'])} | {_fmt(paper.get('final_accuracy'))} |"
        ),
        "",
        (
            f"Upper bounds are one-sided {1 - p['delta']:.0%} Clopper–Pearson. The paper point "
            f"{'meets' if paper['meets_alpha'] else 'does not meet'} alpha = {p['alpha']} on this data."
        ),
        "",
        "## Samples per margin interval (paper Table 4 bins, all samples)",
        "",
        "| margin | " + " | ".join(p["table4_counts"]["paper_T"]) + " |",
        "|---|" + "---|" * len(p["table4_counts"]["paper_T"]),
        "| paper T = 2 | " + " | ".join(str(v) for v in p["table4_counts"]["paper_T"].values()) + " |",
        f"| fitted T = {_fmt(p['temperature'], 3)} | "
        + " | ".join(str(v) for v in p["table4_counts"]["fitted_T"].values())
        + " |",
        "",
        "## Figures",
        "",
    ]
    lines += [f"- `{f}`" for f in p.get("figures", []) if f.endswith(".png")]
    return "\n".join(lines) + "\n"
