"""predictions.jsonl files -> calibration.json + figures + summary.md (the body of calibrate/fit.py).

Temperature is fitted on one part of the samples and tau selected on the other (seeded, stratified by
benchmark), so the precision guarantee is not spent on data the temperature already saw.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Sequence
from pathlib import Path

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


def calibrate_predictions(
    predictions: Sequence[str],
    out: str,
    mode: str = "precision",
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
    out_dir = Path(out)
    loaded = read_predictions(list(predictions), strict=strict)
    for problem in loaded.problems[:20]:
        print(f"skipped {problem}", file=sys.stderr)
    if len(loaded.problems) > 20:
        print(f"... and {len(loaded.problems) - 20} more skipped rows (see problems.txt)", file=sys.stderr)
    records = loaded.records
    if len(records) < MIN_SAMPLES:
        raise CalibrationInputError(
            f"only {len(records)} usable samples in {list(predictions)}; need >= {MIN_SAMPLES}"
        )
    if mode == "budget" and budget is None:
        raise CalibrationInputError("--mode budget needs --budget (the largest allowed Stage-2 fraction)")

    logits = pad_logits([r.logits for r in records])
    gold = np.array([r.gold for r in records], dtype=np.int64)
    bench = np.array([r.benchmark for r in records])
    s1_correct = top1_indices(logits) == gold
    s2_known = np.array([r.stage2_correct is not None for r in records])
    s2_correct = np.array([bool(r.stage2_correct) for r in records])

    if temperature is None:
        fit_idx, sel_idx = split_fit_select(records, seed=seed, fit_fraction=fit_fraction)
        tfit = fit_temperature(logits[fit_idx], gold[fit_idx], paper_temperature=PAPER_TEMPERATURE)
        t_hat = tfit.temperature
        fit_block = tfit.as_dict()
        if tfit.at_bound:
            print(f"warning: fitted T = {t_hat:.4g} sits on a search bound {tfit.bounds}", file=sys.stderr)
    else:  # fixed T: nothing to fit, every sample selects tau
        t_hat = float(temperature)
        fit_idx, sel_idx = np.zeros(0, np.int64), np.arange(len(records))
        nll, ece = nll_and_ece(logits, gold, t_hat)
        nll_raw, ece_raw = nll_and_ece(logits, gold, 1.0)
        fit_block = {
            "temperature": t_hat,
            "n": 0,
            "fixed": True,
            "nll_before": nll_raw,
            "ece_before": ece_raw,
            "nll_after": nll,
            "ece_after": ece,
        }

    m_sel = margins(logits[sel_idx], t_hat)
    c_sel = s1_correct[sel_idx]
    if mode == "precision":
        selection = select_tau_precision(m_sel, c_sel, alpha=alpha, delta=delta, min_exits=min_exits)
    elif mode == "budget":
        selection = select_tau_budget(m_sel, budget)
    elif mode == "accuracy":
        known = s2_known[sel_idx]
        if not known.any():
            raise CalibrationInputError(
                "--mode accuracy needs Stage-2 outcomes for the same samples: pass the predictions.jsonl of a "
                "uniform_stage2 run (rows with route == 'stage2' and stage2.pred)"
            )
        selection = select_tau_accuracy(m_sel[known], c_sel[known], s2_correct[sel_idx][known])
    else:
        raise CalibrationInputError(f"unknown mode {mode!r}; choose precision, budget or accuracy")
    tau = selection.tau

    stats = exit_stats(m_sel, c_sel, tau, delta)
    select_block = {**stats.as_dict(), "no_exit": selection.no_exit, **selection.details}
    m_paper = margins(logits[sel_idx], PAPER_TEMPERATURE)
    paper_stats = exit_stats(m_paper, c_sel, PAPER_TAU, delta)
    paper_block = {
        "temperature": PAPER_TEMPERATURE,
        **paper_stats.as_dict(),
        "meets_alpha": bool(paper_stats.upper_bound_error <= alpha),
    }
    known_sel = s2_known[sel_idx]
    if known_sel.any():
        s1k, s2k = c_sel[known_sel], s2_correct[sel_idx][known_sel]
        select_block["final_accuracy"] = _final_accuracy(m_sel[known_sel], s1k, s2k, tau)
        paper_block["final_accuracy"] = _final_accuracy(m_paper[known_sel], s1k, s2k, PAPER_TAU)
        select_block["n_with_stage2"] = int(known_sel.sum())

    m_all = margins(logits, t_hat)
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
        "n_samples": len(records),
        "n_benchmarks": len(set(bench.tolist())),
        "skipped": dict(loaded.skipped),
        "table4_counts": {
            "fitted_T": {r["bin"]: r["n"] for r in paper_bin_table(m_all, s1_correct)},
            "paper_T": {
                r["bin"]: r["n"] for r in paper_bin_table(margins(logits, PAPER_TEMPERATURE), s1_correct)
            },
        },
    }

    out_dir.mkdir(parents=True, exist_ok=True)
    if loaded.problems:
        (out_dir / "problems.txt").write_text("".join(f"{p}\n" for p in loaded.problems), encoding="utf-8")
    figure_paths: list[Path] = []
    if figures:
        fig_dir = out_dir / "figures"
        chosen = {
            "tau": tau,
            "exit_rate": stats.exit_rate,
            "exit_accuracy": stats.exit_accuracy,
            "label": f"chosen tau = {tau:.4g} ({mode}, T = {t_hat:.3g})",
        }
        paper = {
            "exit_rate": paper_stats.exit_rate,
            "exit_accuracy": paper_stats.exit_accuracy,
            "label": "paper T = 2, tau = 0.97",
        }
        figure_paths += plot_accuracy_vs_margin(fig_dir, m_all, s1_correct, bench, t_hat)
        figure_paths += plot_reliability(
            fig_dir,
            {
                "T = 1 (raw logits)": top1_probs(logits[sel_idx], 1.0),
                f"fitted T = {t_hat:.3g}": top1_probs(logits[sel_idx], t_hat),
                "paper T = 2": top1_probs(logits[sel_idx], PAPER_TEMPERATURE),
            },
            c_sel,
            n_bins=ECE_BINS,
        )
        figure_paths += plot_risk_coverage(fig_dir, m_sel, c_sel, delta, alpha, chosen, paper)
        s2_for_plot = s2_correct[sel_idx] if known_sel.all() else None
        figure_paths += plot_tau_sweep(fig_dir, m_sel, c_sel, chosen, paper, stage2_correct=s2_for_plot)
        if payload["n_benchmarks"] > 1:
            figure_paths += plot_per_benchmark(fig_dir, m_all, s1_correct, bench, tau)
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
