"""predictions.jsonl files -> calibration.json + figures + summary.md (the body of calibrate/fit.py).

Temperature is fitted on one part of the samples and tau selected on the other (seeded, stratified by
benchmark; by default each video's questions stay on one side), so the precision guarantee is not spent on data the
temperature already saw. Questions on one video share its difficulty, so by default the guarantees count videos
rather than questions, a video being its file whichever benchmarks ask about it (calibrate/videos.py): each
threshold is tested on effective counts (n / design effect, calibrate/clusters.py).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from cader.calibrate.calibration_file import write_calibration
from cader.calibrate.margin import PAPER_TAU, PAPER_TEMPERATURE, margins, pad_logits, top1_indices, top1_probs
from cader.calibrate.options import (
    STAGE2_NEEDED,
    CalibrationInputError,
    FitOptions,
    OutputOptions,
    Rule,
    SplitOptions,
)
from cader.calibrate.per_video import (
    PerVideoError,
    check_per_video,
    clustered_selection_refusal,
    one_per_video,
)
from cader.calibrate.plots import (
    paper_bin_table,
    plot_accuracy_vs_margin,
    plot_per_benchmark,
    plot_reliability,
    plot_risk_coverage,
    plot_tau_sweep,
)
from cader.calibrate.records import read_predictions
from cader.calibrate.settings import settings_of
from cader.calibrate.summary import _fmt, render_summary  # noqa: F401 (_fmt: tests read it here)
from cader.calibrate.tau import NO_EXIT_TAU, ExitStats, exit_stats
from cader.calibrate.temperature import ECE_BINS, fit_temperature, nll_and_ece
from cader.calibrate.transfer import margin_summary
from cader.calibrate.validity import SplitDraw, plot_validity, validity_runs, validity_summary
from cader.calibrate.verifier import calibrate_verifier
from cader.calibrate.videos import split_fit_select_videos, video_codes
from cader.contracts.provenance import collect_provenance

MIN_SAMPLES = 4


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
    videos: np.ndarray        # a code per video file, whichever benchmarks ask about it; a row without one: its own

    @classmethod
    def of(cls, records) -> Outcomes:
        logits = pad_logits([r.logits for r in records])
        gold = np.array([r.gold for r in records], dtype=np.int64)
        return cls(logits=logits, gold=gold, bench=np.array([r.benchmark for r in records]),
                   s1_correct=top1_indices(logits) == gold,
                   s2_known=np.array([r.stage2_correct is not None for r in records]),
                   s2_correct=np.array([bool(r.stage2_correct) for r in records]), videos=video_codes(records))

    def subset(self, keep: np.ndarray) -> Outcomes:
        return Outcomes(*(getattr(self, name)[keep] for name in self.__dataclass_fields__))


@dataclass
class Parts:
    """T, and the split of the samples into the part that fitted it and the part that selects tau."""

    temperature: float
    fit_block: dict           # calibration.json's "fit"
    fit_idx: np.ndarray
    sel_idx: np.ndarray
    split_by: str             # the unit the split kept together (a video split may fall back to questions)


@dataclass
class Chosen:
    """tau and the selection samples it was chosen and measured on."""

    tau: float
    sel_idx: np.ndarray       # the selection samples (in the per-video mode, one question per video)
    clusters: np.ndarray | None  # their video codes when the bounds count videos
    margin: np.ndarray        # their margins at T
    correct: np.ndarray       # their Stage-1 outcomes
    stats: ExitStats
    block: dict               # calibration.json's "select"
    per_video: dict | None    # calibration.json's "per_video"


def load_outcomes(predictions: Sequence[str], strict: bool, rule: Rule):
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
    if rule.mode == "budget" and rule.budget is None:
        raise CalibrationInputError("--mode budget needs --budget (the largest allowed Stage-2 fraction)")
    if rule.mode == "cascade" and rule.epsilon is None:
        raise CalibrationInputError("--mode cascade needs --epsilon (the largest accuracy loss against always "
                                    "running Stage 2)")
    return loaded, Outcomes.of(loaded.records)


def fit_or_fix_temperature(records, o: Outcomes, temperature: float | None, split: SplitOptions) -> Parts:
    """T fitted on the fit part of the split, or the given T with every sample selecting tau (no split: the unit
    is the one asked for)."""
    if temperature is None:
        fit_idx, sel_idx, used = split_fit_select_videos(records, seed=split.seed, fit_fraction=split.fit_fraction,
                                                         by=split.split_by)
        tfit = fit_temperature(o.logits[fit_idx], o.gold[fit_idx], paper_temperature=PAPER_TEMPERATURE)
        if tfit.at_bound:
            print(f"warning: fitted T = {tfit.temperature:.4g} sits on a search bound {tfit.bounds}", file=sys.stderr)
        return Parts(tfit.temperature, tfit.as_dict(), fit_idx, sel_idx, used)
    t_hat = float(temperature)
    nll, ece = nll_and_ece(o.logits, o.gold, t_hat)
    nll_raw, ece_raw = nll_and_ece(o.logits, o.gold, 1.0)
    fit_block = {"temperature": t_hat, "n": 0, "fixed": True, "nll_before": nll_raw, "ece_before": ece_raw,
                 "nll_after": nll, "ece_after": ece}
    return Parts(t_hat, fit_block, np.zeros(0, np.int64), np.arange(len(o.gold)), split.split_by)


def select_threshold(rule: Rule, m_sel, c_sel, s2_known, s2_correct, clusters=None):
    """tau by the rule (calibrate/tau.py, calibrate/ltt.py) on the select part's margins; a mode that needs
    Stage-2 outcomes selects on the samples that have one. ``clusters``: a video code per sample, or None."""
    if not rule.needs_stage2:
        return rule.choose(m_sel, c_sel, clusters=clusters)
    if not s2_known.any():
        raise CalibrationInputError(f"--mode {rule.mode} needs Stage-2 outcomes for the same samples: " + STAGE2_NEEDED)
    return rule.choose(m_sel[s2_known], c_sel[s2_known], s2_correct[s2_known],
                       clusters=None if clusters is None else clusters[s2_known])


def select_tau(o: Outcomes, parts: Parts, rule: Rule, seed: int) -> Chosen:
    """tau by the rule on the selection part, and its exit statistics there (with the final accuracy where the
    samples have a Stage-2 outcome). Raises CalibrationInputError when a guarantee counting videos has too few."""
    per_video, sel_idx = draw_per_video(rule, o, parts, seed)
    clusters = o.videos[sel_idx] if rule.cluster_bound and not rule.per_video else None
    refusal = clustered_selection_refusal(len(set(o.videos[sel_idx].tolist())))
    if rule.guaranteed_risk is not None and (rule.cluster_bound or rule.per_video) and refusal:
        raise CalibrationInputError(refusal)
    m_sel, c_sel = margins(o.logits[sel_idx], parts.temperature), o.s1_correct[sel_idx]
    known, s2_sel = o.s2_known[sel_idx], o.s2_correct[sel_idx]
    selection = select_threshold(rule, m_sel, c_sel, known, s2_sel, clusters)
    stats = exit_stats(m_sel, c_sel, selection.tau, rule.delta, clusters)
    block = {**stats.as_dict(), "no_exit": selection.no_exit, **selection.details}
    if selection.no_exit and selection.details.get("reason"):
        print(f"calibrate: no exit ({rule.mode} mode): {selection.details['reason']}", file=sys.stderr)
    if known.any():
        s1k, s2k = c_sel[known], s2_sel[known]
        block["final_accuracy"] = _final_accuracy(m_sel[known], s1k, s2k, selection.tau)
        block["n_with_stage2"] = int(known.sum())
        block["accuracy_loss"] = float(np.mean((m_sel[known] >= selection.tau) & ~s1k & s2k))
    return Chosen(selection.tau, sel_idx, clusters, m_sel, c_sel, stats, block, per_video)


def paper_point(o: Outcomes, chosen: Chosen, rule: Rule) -> dict:
    """The paper's operating point (T = 2, tau = 0.97) on the same selection samples, for comparison."""
    m_paper = margins(o.logits[chosen.sel_idx], PAPER_TEMPERATURE)
    stats = exit_stats(m_paper, chosen.correct, PAPER_TAU, rule.delta, chosen.clusters)
    block = {"temperature": PAPER_TEMPERATURE, **stats.as_dict(),
             "meets_alpha": bool(stats.upper_bound_error <= rule.alpha)}
    known = o.s2_known[chosen.sel_idx]
    if known.any():
        block["final_accuracy"] = _final_accuracy(m_paper[known], chosen.correct[known],
                                                  o.s2_correct[chosen.sel_idx][known], PAPER_TAU)
    return block


def measure(predictions: Sequence[str], loaded, o: Outcomes, parts: Parts, chosen: Chosen, rule: Rule,
            fit: FitOptions, split: SplitOptions) -> dict:
    """The calibration.json payload: T and tau with what they were measured on, the paper's point on the same
    samples, the counts and Stage-1 settings behind them, and the per-benchmark taus and verifier threshold when
    asked for."""
    t_hat = parts.temperature
    payload = {
        "temperature": t_hat, "tau": chosen.tau, "mode": rule.mode, "alpha": rule.alpha, "delta": rule.delta,
        "fit": parts.fit_block, "select": chosen.block, "sources": [str(p) for p in predictions], "seed": split.seed,
        "paper_point": paper_point(o, chosen, rule), "budget": rule.budget, "epsilon": rule.epsilon,
        "min_exits": rule.min_exits, "fit_fraction": split.fit_fraction, "split_by": parts.split_by,
        "split_by_requested": split.split_by, "cluster_bound": rule.cluster_bound and not rule.per_video,
        "per_video": chosen.per_video, "settings": settings_of(loaded.records, predictions),
        "rows_without_video": loaded.rows_without_video, **video_counts(o.videos, parts.fit_idx, chosen.sel_idx),
        "n_samples": len(loaded.records), "n_benchmarks": len(set(o.bench.tolist())), "skipped": dict(loaded.skipped),
        "table4_counts": {
            "fitted_T": {r["bin"]: r["n"] for r in paper_bin_table(margins(o.logits, t_hat), o.s1_correct)},
            "paper_T": {r["bin"]: r["n"] for r in paper_bin_table(margins(o.logits, PAPER_TEMPERATURE), o.s1_correct)},
        },
        "select_margins": margin_summary(chosen.margin, t_hat),
    }
    if fit.per_benchmark:
        payload["per_benchmark"] = per_benchmark_taus(rule, o, chosen)
    if fit.verifier_alpha is not None:
        payload["verifier"] = calibrate_verifier(predictions, fit.verifier_alpha, rule.delta, fit.evidence_rule,
                                                 rule.min_exits, rule.cluster_bound)
        if payload["verifier"]["threshold"] is None:
            print(f"calibrate: no verifier threshold certified: {payload['verifier']['reason']}", file=sys.stderr)
    return payload


def write_outputs(out_dir: Path, payload: dict, problems: list, o: Outcomes, chosen: Chosen, rule: Rule,
                  fit: FitOptions, split: SplitOptions, output: OutputOptions) -> None:
    """problems.txt, the figures (guarantee_validity's splits drawn as the run's own split and bound were),
    summary.md, and calibration.json last: its presence means the run finished."""
    draw = SplitDraw(output.validity_splits, split.seed, split.fit_fraction, fit.temperature, payload["split_by"],
                     rule.cluster_bound)
    out_dir.mkdir(parents=True, exist_ok=True)
    if problems:
        (out_dir / "problems.txt").write_text("".join(f"{p}\n" for p in problems), encoding="utf-8")
    figure_paths = write_figures(out_dir, o, chosen.sel_idx, payload) if output.figures else []
    if output.figures and draw.n_splits > 0 and not rule.per_video:  # the splits replay the design-effect procedure
        summary, paths = guarantee_validity(out_dir, o, rule, draw)
        if summary is not None:
            payload["guarantee_validity"] = summary
        figure_paths += paths
    payload["figures"] = [str(p.relative_to(out_dir)) for p in figure_paths]
    payload["provenance"] = collect_provenance()
    (out_dir / "summary.md").write_text(render_summary(payload), encoding="utf-8")
    write_calibration(out_dir / "calibration.json", payload)


def write_figures(out_dir: Path, o: Outcomes, sel_idx, payload: dict) -> list[Path]:
    """The calibration figures (calibrate/plots.py) under out_dir/figures, at the payload's T and tau."""
    fig_dir = out_dir / "figures"
    t_hat, tau, select, paper = payload["temperature"], payload["tau"], payload["select"], payload["paper_point"]
    m_all, m_sel, c_sel = margins(o.logits, t_hat), margins(o.logits[sel_idx], t_hat), o.s1_correct[sel_idx]
    chosen = {"tau": tau, "exit_rate": select["exit_rate"], "exit_accuracy": select["exit_accuracy"],
              "label": f"chosen tau = {tau:.4g} ({payload['mode']}, T = {t_hat:.3g})"}
    paper = {"exit_rate": paper["exit_rate"], "exit_accuracy": paper["exit_accuracy"],
             "label": "paper T = 2, tau = 0.97"}
    paths = plot_accuracy_vs_margin(fig_dir, m_all, o.s1_correct, o.bench, t_hat)
    sel_logits = o.logits[sel_idx]
    paths += plot_reliability(
        fig_dir,
        {"T = 1 (raw logits)": top1_probs(sel_logits, 1.0), f"fitted T = {t_hat:.3g}": top1_probs(sel_logits, t_hat),
         "paper T = 2": top1_probs(sel_logits, PAPER_TEMPERATURE)},
        c_sel,
        n_bins=ECE_BINS,
    )
    paths += plot_risk_coverage(fig_dir, m_sel, c_sel, payload["delta"], payload["alpha"], chosen, paper)
    # the final-accuracy curve on the samples with a Stage-2 outcome (NaN rows mark the others in the sweep)
    known = o.s2_known[sel_idx]
    s2_for_plot = np.where(known, o.s2_correct[sel_idx], False)
    paths += plot_tau_sweep(fig_dir, m_sel, c_sel, chosen, paper, stage2_correct=s2_for_plot if known.any() else None,
                            stage2_known=known)
    if payload["n_benchmarks"] > 1:
        paths += plot_per_benchmark(fig_dir, m_all, o.s1_correct, o.bench, tau)
    return paths


def guarantee_validity(out_dir: Path, o: Outcomes, rule: Rule, draw: SplitDraw):
    """guarantee_validity.png/.csv and its summary (calibrate/validity.py); None when the data cannot show it.
    ``draw`` holds the run's own seed, fit fraction, fixed T, split unit and bound, so the splits and the bound are
    the ones the calibration used (the splits stratified by benchmark, as split_fit_select_videos)."""
    risk, level = rule.guaranteed_risk or ("exit_error", rule.alpha)
    use = o.s2_known if (rule.needs_stage2 or risk == "accuracy_loss") else np.ones(len(o.gold), bool)
    if use.sum() < 2 * MIN_SAMPLES:
        return None, []
    kept = o.subset(use)
    rows = validity_runs(kept.logits, kept.gold, kept.s1_correct, kept.s2_correct if rule.needs_stage2 else None,
                         rule.choose, risk, level, draw, clusters=kept.videos, strata=kept.bench)
    if not rows:
        return None, []
    summary = validity_summary(rows, rule.delta, guaranteed=rule.guaranteed_risk is not None)
    return summary, plot_validity(out_dir / "figures", rows, summary, rule.mode)


def per_benchmark_taus(rule: Rule, o: Outcomes, chosen: Chosen) -> dict:
    """tau chosen by the same rule on each benchmark's part of the selection split (a guarantee per group, each
    holding with probability >= 1 - delta; for all groups at once, run with delta / number of groups)."""
    out = {}
    bench, m_sel, c_sel = o.bench[chosen.sel_idx], chosen.margin, chosen.correct
    for name in sorted(set(bench.tolist())):
        g = bench == name
        g_clusters = None if chosen.clusters is None else chosen.clusters[g]
        try:
            sel = select_threshold(rule, m_sel[g], c_sel[g], o.s2_known[chosen.sel_idx][g],
                                   o.s2_correct[chosen.sel_idx][g], g_clusters)
        except (CalibrationInputError, ValueError) as exc:
            out[name] = {"tau": NO_EXIT_TAU, "no_exit": True, "n": int(g.sum()), "reason": str(exc)}
            continue
        st = exit_stats(m_sel[g], c_sel[g], sel.tau, rule.delta, g_clusters)
        out[name] = {**st.as_dict(), "no_exit": sel.no_exit,
                     **{k: sel.details[k] for k in ("reason", "constraints") if sel.details.get(k)}}
    return out


def calibrate_predictions(predictions: Sequence[str], out: str, rule: Rule | None = None, fit: FitOptions | None = None,
                          split: SplitOptions | None = None, output: OutputOptions | None = None) -> dict:
    """Fit T (CADER Eq. 2) and tau (Algorithm 1 line 10) and write calibration.json, figures/ and summary.md.

    The steps, in order: read the predictions, fit or fix T, select tau, measure the chosen and the paper's
    operating points, write (calibration.json last: its presence means the run finished). The modes and their
    guarantees: `Rule` (and calibrate/fit.py --help); when no tau qualifies, nothing exits and the reason is in
    calibration.json and on stderr.

    Args:
        predictions: predictions.jsonl files holding raw Stage-1 option logits, from a held-out split
        out: output folder for calibration.json, figures/ and summary.md
        rule: how tau is certified (mode, levels, the bound counting videos or questions)
        fit: what else is fitted: T (or a fixed one), a tau per benchmark, the verifier threshold
        split: how the samples are split between fitting T and selecting tau
        output: what is read and drawn

    Each group left out (None) takes its fields' defaults.

    Returns:
        The calibration.json payload.
    """
    rule, fit, split, output = rule or Rule(), fit or FitOptions(), split or SplitOptions(), output or OutputOptions()
    loaded, o = load_outcomes(predictions, output.strict, rule)
    parts = fit_or_fix_temperature(loaded.records, o, fit.temperature, split)
    chosen = select_tau(o, parts, rule, split.seed)
    payload = measure(predictions, loaded, o, parts, chosen, rule, fit, split)
    write_outputs(Path(out), payload, loaded.problems, o, chosen, rule, fit, split, output)
    return payload


def video_counts(videos: np.ndarray, fit_idx, sel_idx) -> dict:
    """Distinct videos in the fit and select parts, and in both (nonzero when the split is by question, or when a
    calibration set from a single video fell back to it)."""
    fit, sel = set(videos[fit_idx].tolist()), set(videos[sel_idx].tolist())
    return {"videos_fit": len(fit), "videos_select": len(sel), "videos_in_both": len(fit & sel)}


def draw_per_video(rule: Rule, o: Outcomes, parts: Parts, seed: int) -> tuple[dict | None, np.ndarray]:
    """The exact per-video mode's selection split (calibrate/per_video.py): one random question per video of it
    (among those with a Stage-2 outcome when the mode needs one), and its calibration.json block; (None, the
    selection part) when the mode is off. Raises CalibrationInputError when it cannot certify."""
    sel_idx = parts.sel_idx
    if not rule.per_video:
        return None, sel_idx
    eligible = sel_idx[o.s2_known[sel_idx]] if rule.needs_stage2 else sel_idx
    n_videos = len(set(o.videos[eligible].tolist()))
    try:
        check_per_video(n_videos, parts.split_by, not parts.fit_block.get("fixed"))
    except PerVideoError as exc:
        raise CalibrationInputError(str(exc)) from None
    drawn = eligible[one_per_video(o.videos[eligible], seed)]
    return {"videos": n_videos, "questions_in_selection": len(sel_idx), "questions_used": len(drawn),
            "draw": "one question per video, uniformly at random (seeded)"}, drawn
