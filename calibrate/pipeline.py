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
from typing import Literal

import numpy as np
from cader.calibrate.calibration_file import write_calibration
from cader.calibrate.ltt import select_tau_ltt
from cader.calibrate.margin import PAPER_TAU, PAPER_TEMPERATURE, margins, pad_logits, top1_indices, top1_probs
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
from cader.calibrate.tau import (
    MODES,
    NO_EXIT_TAU,
    exit_stats,
    select_tau_accuracy,
    select_tau_budget,
    select_tau_precision,
)
from cader.calibrate.temperature import ECE_BINS, fit_temperature, nll_and_ece
from cader.calibrate.transfer import margin_summary
from cader.calibrate.validity import plot_validity, validity_runs, validity_summary
from cader.calibrate.verifier import calibrate_verifier
from cader.calibrate.videos import split_fit_select_videos, video_codes
from cader.contracts.provenance import collect_provenance

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
                   s2_correct=np.array([bool(r.stage2_correct) for r in records]))


def load_outcomes(predictions: Sequence[str], strict: bool, mode: str, budget: float | None,
                  epsilon: float | None = None):
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
    if mode == "cascade" and epsilon is None:
        raise CalibrationInputError("--mode cascade needs --epsilon (the largest accuracy loss against always "
                                    "running Stage 2)")
    return loaded, Outcomes.of(loaded.records)


def fit_or_fix_temperature(records, o: Outcomes, temperature: float | None, seed: int, fit_fraction: float,
                           split_by: str = "video"):
    """T fitted on the fit part (returns T, its record, fit and select indices and the split unit actually used), or
    the given T with every sample selecting tau (no split: the unit is the one asked for)."""
    if temperature is None:
        fit_idx, sel_idx, used = split_fit_select_videos(records, seed=seed, fit_fraction=fit_fraction, by=split_by)
        tfit = fit_temperature(o.logits[fit_idx], o.gold[fit_idx], paper_temperature=PAPER_TEMPERATURE)
        if tfit.at_bound:
            print(f"warning: fitted T = {tfit.temperature:.4g} sits on a search bound {tfit.bounds}", file=sys.stderr)
        return tfit.temperature, tfit.as_dict(), fit_idx, sel_idx, used
    t_hat = float(temperature)
    nll, ece = nll_and_ece(o.logits, o.gold, t_hat)
    nll_raw, ece_raw = nll_and_ece(o.logits, o.gold, 1.0)
    fit_block = {"temperature": t_hat, "n": 0, "fixed": True, "nll_before": nll_raw, "ece_before": ece_raw,
                 "nll_after": nll, "ece_after": ece}
    return t_hat, fit_block, np.zeros(0, np.int64), np.arange(len(o.gold)), split_by


STAGE2_NEEDED = ("pass the predictions.jsonl of a uniform_stage2 run (rows with route == 'stage2' and "
                 "stage2.pred); rows join the Stage-1 rows by benchmark and sample_id")


@dataclass(frozen=True)
class Rule:
    """A mode with its settings: ``choose(margin, s1_correct, s2_correct)`` on one selection split."""

    mode: str
    alpha: float
    delta: float
    epsilon: float | None = None
    budget: float | None = None
    budget_guarantee: bool = False
    min_exits: int = 50

    @property
    def needs_stage2(self) -> bool:
        return self.mode in ("accuracy", "cascade") or (self.mode == "joint" and self.epsilon is not None)

    @property
    def guaranteed_risk(self) -> tuple[str, float] | None:
        """The risk the mode bounds with probability >= 1 - delta, as (name, level)."""
        if self.mode in ("precision", "joint"):
            return "exit_error", self.alpha
        if self.mode == "cascade":
            return "accuracy_loss", self.epsilon
        return None

    def choose(self, margin, s1_correct, s2_correct=None, clusters=None):
        """tau on one selection split; ``clusters`` (a video label per sample) makes the bounds count videos."""
        if self.needs_stage2 and s2_correct is None:
            raise CalibrationInputError(f"--mode {self.mode} needs Stage-2 outcomes for the same samples: "
                                        + STAGE2_NEEDED)
        if self.mode == "precision":
            return select_tau_precision(margin, s1_correct, alpha=self.alpha, delta=self.delta,
                                        min_exits=self.min_exits, clusters=clusters)
        if self.mode == "budget":
            return select_tau_budget(margin, self.budget)
        if self.mode == "accuracy":
            return select_tau_accuracy(margin, s1_correct, s2_correct)
        if self.mode == "cascade":
            return select_tau_ltt(margin, s1_correct, self.delta, epsilon=self.epsilon, s2_correct=s2_correct,
                                  mode="cascade", clusters=clusters)
        if self.mode == "joint":
            return select_tau_ltt(margin, s1_correct, self.delta, alpha=self.alpha, epsilon=self.epsilon,
                                  s2_correct=s2_correct, budget=self.budget, budget_guarantee=self.budget_guarantee,
                                  min_exits=self.min_exits, mode="joint", clusters=clusters)
        raise CalibrationInputError(f"unknown mode {self.mode!r}; choose one of {MODES}")


def select_threshold(rule: Rule, m_sel, c_sel, s2_known, s2_correct, clusters=None):
    """tau by the rule (calibrate/tau.py, calibrate/ltt.py) on the select part's margins; a mode that needs
    Stage-2 outcomes selects on the samples that have one. ``clusters``: a video code per sample, or None."""
    if not rule.needs_stage2:
        return rule.choose(m_sel, c_sel, clusters=clusters)
    if not s2_known.any():
        raise CalibrationInputError(f"--mode {rule.mode} needs Stage-2 outcomes for the same samples: " + STAGE2_NEEDED)
    return rule.choose(m_sel[s2_known], c_sel[s2_known], s2_correct[s2_known],
                       clusters=None if clusters is None else clusters[s2_known])


def write_figures(out_dir: Path, o: Outcomes, sel_idx, t_hat, tau, mode, stats, paper_stats, delta, alpha,
                  n_benchmarks: int) -> list[Path]:
    """The calibration figures (calibrate/plots.py) under out_dir/figures."""
    fig_dir = out_dir / "figures"
    m_all, m_sel, c_sel = margins(o.logits, t_hat), margins(o.logits[sel_idx], t_hat), o.s1_correct[sel_idx]
    chosen = {"tau": tau, "exit_rate": stats.exit_rate, "exit_accuracy": stats.exit_accuracy,
              "label": f"chosen tau = {tau:.4g} ({mode}, T = {t_hat:.3g})"}
    paper = {"exit_rate": paper_stats.exit_rate, "exit_accuracy": paper_stats.exit_accuracy,
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
    paths += plot_risk_coverage(fig_dir, m_sel, c_sel, delta, alpha, chosen, paper)
    # the final-accuracy curve on the samples with a Stage-2 outcome (NaN rows mark the others in the sweep)
    known = o.s2_known[sel_idx]
    s2_for_plot = np.where(known, o.s2_correct[sel_idx], False)
    paths += plot_tau_sweep(fig_dir, m_sel, c_sel, chosen, paper, stage2_correct=s2_for_plot if known.any() else None,
                            stage2_known=known)
    if n_benchmarks > 1:
        paths += plot_per_benchmark(fig_dir, m_all, o.s1_correct, o.bench, tau)
    return paths


def guarantee_validity(out_dir: Path, o: Outcomes, rule: Rule, temperature, seed, fit_fraction, n_splits,
                       videos=None, split_by: str = "question", cluster_bound: bool = False):
    """guarantee_validity.png/.csv and its summary (calibrate/validity.py); None when the data cannot show it.
    ``videos`` (a video code per sample), ``split_by`` and ``cluster_bound`` are the run's own, so the splits and
    the bound are the ones the calibration used (the splits stratified by benchmark, as split_fit_select_videos)."""
    risk, level = rule.guaranteed_risk or ("exit_error", rule.alpha)
    use = o.s2_known if (rule.needs_stage2 or risk == "accuracy_loss") else np.ones(len(o.gold), bool)
    if use.sum() < 2 * MIN_SAMPLES:
        return None, []
    rows = validity_runs(o.logits[use], o.gold[use], o.s1_correct[use], o.s2_correct[use] if rule.needs_stage2 else None,
                         rule.choose, risk, level, n_splits=n_splits, seed=seed, fit_fraction=fit_fraction,
                         temperature=temperature, clusters=None if videos is None else videos[use],
                         strata=o.bench[use], split_by=split_by if videos is not None else "question",
                         cluster_bound=cluster_bound)
    if not rows:
        return None, []
    summary = validity_summary(rows, rule.delta, guaranteed=rule.guaranteed_risk is not None)
    return summary, plot_validity(out_dir / "figures", rows, summary, rule.mode)


def per_benchmark_taus(rule: Rule, o: Outcomes, sel_idx, m_sel, c_sel, clusters=None) -> dict:
    """tau chosen by the same rule on each benchmark's part of the selection split (a guarantee per group, each
    holding with probability >= 1 - delta; for all groups at once, run with delta / number of groups)."""
    out = {}
    for name in sorted(set(o.bench[sel_idx].tolist())):
        g = o.bench[sel_idx] == name
        g_clusters = None if clusters is None else clusters[g]
        try:
            sel = select_threshold(rule, m_sel[g], c_sel[g], o.s2_known[sel_idx][g], o.s2_correct[sel_idx][g],
                                   g_clusters)
        except (CalibrationInputError, ValueError) as exc:
            out[name] = {"tau": NO_EXIT_TAU, "no_exit": True, "n": int(g.sum()), "reason": str(exc)}
            continue
        st = exit_stats(m_sel[g], c_sel[g], sel.tau, rule.delta, g_clusters)
        out[name] = {**st.as_dict(), "no_exit": sel.no_exit,
                     **{k: sel.details[k] for k in ("reason", "constraints") if sel.details.get(k)}}
    return out


def calibrate_predictions(
    predictions: Sequence[str],
    out: str,
    mode: Literal["precision", "budget", "accuracy", "cascade", "joint"] = "precision",
    alpha: float = 0.05,
    delta: float = 0.1,
    budget: float | None = None,
    epsilon: float | None = None,
    budget_guarantee: bool = False,
    per_benchmark: bool = False,
    verifier_alpha: float | None = None,
    evidence_rule: Literal["contains", "overlaps"] = "contains",
    seed: int = 0,
    min_exits: int = 50,
    fit_fraction: float = 0.5,
    temperature: float | None = None,
    split_by: Literal["video", "question"] = "video",
    cluster_bound: bool = True,
    per_video: bool = False,
    strict: bool = False,
    figures: bool = True,
    validity_splits: int = 100,
) -> dict:
    """Fit T (CADER Eq. 2) and tau (Algorithm 1 line 10) and write calibration.json, figures/ and summary.md.

    The steps, in order: read the predictions, fit or fix T, select tau, measure the chosen and the paper's
    operating points, draw, write (calibration.json last: its presence means the run finished).

    Modes (every guarantee holds with probability >= 1 - delta over the selection split):
    precision: P(error among exits > alpha) <= delta (Clopper-Pearson, fixed sequence over a fixed tau grid);
    cascade: P(accuracy lost against always running Stage 2 > epsilon) <= delta (Learn-then-Test; needs a
    uniform_stage2 run); joint: exit error <= alpha, and accuracy loss <= epsilon when given, together
    (Learn-then-Test, family-wise), within a Stage-2 fraction <= budget when given; budget: Stage-2 fraction
    <= budget on the selection split, no error guarantee; accuracy: best final accuracy on the selection split,
    no guarantee. When no tau qualifies, nothing exits and the reason is in calibration.json and on stderr.

    Args:
        predictions: predictions.jsonl files holding raw Stage-1 option logits, from a held-out split
        out: output folder for calibration.json, figures/ and summary.md
        mode: how tau is chosen: precision (error among exits <= alpha w.p. 1 - delta), cascade (accuracy lost
            against always running Stage 2 <= epsilon w.p. 1 - delta), joint (exit error <= alpha and accuracy loss
            <= epsilon together w.p. 1 - delta, within the Stage-2 budget), budget (Stage-2 share <= budget, no
            guarantee), accuracy (best final accuracy, no guarantee); cascade, accuracy and joint with epsilon
            need Stage-2 outcomes (a uniform_stage2 run)
        alpha: precision and joint modes: the largest error allowed among early exits
        delta: the allowed probability that a guaranteed bound fails
        budget: budget mode: the largest share sent to Stage 2 (required); joint mode: the same as a constraint
        epsilon: cascade mode (required) and joint mode: the largest accuracy loss against always running Stage 2
        budget_guarantee: joint mode: bound the Stage-2 share with its own binomial test (delta split in half)
            instead of holding it on the selection split only
        per_benchmark: also choose a tau per benchmark on its own samples (a guarantee per group)
        verifier_alpha: also choose the verifier threshold delta_v so that an accepted first crop misses the
            evidence window with probability <= this, w.p. 1 - delta (needs verify steps and meta.evidence_window)
        evidence_rule: what hitting the evidence means for verifier_alpha: the crop contains or overlaps it
        seed: seed of the split into the T-fit part and the tau-selection part
        min_exits: precision and joint modes: the fewest early exits a tau may have (verifier_alpha: the fewest
            accepted crops a threshold may have)
        fit_fraction: share of the samples (of each benchmark's videos with split_by video) used to fit T; the
            rest selects tau
        temperature: fix T to this value instead of fitting it (every sample then selects tau)
        split_by: what the fit/select split keeps together: video (each video's questions on one side, so tau is
            selected on videos the temperature fit never saw) or question (questions split independently, for
            comparison); a row without a video is a video of its own
        cluster_bound: test each threshold on effective counts (exits and errors divided by the design effect of
            the errors among the selection split's videos), so questions sharing a video are not counted as
            independent trials; false counts questions (valid only when they are independent). The verifier
            threshold (verifier_alpha) is tested the same way, on the misses among accepted first crops
        per_video: the exact per-video mode (calibrate/per_video.py): tau is certified on one question per video of
            the selection split, drawn at random with the seed, so the exact bound holds however strongly questions
            on one video are correlated (it certifies the error of a random question of a random video); needs the
            split by video (or a fixed T) and at least two selection videos, else it refuses
        strict: stop at the first malformed row instead of skipping and counting it
        figures: also write figures/*.png and the CSV behind each
        validity_splits: random fit/select/test splits behind figures/guarantee_validity.png (0: none)

    Returns:
        The calibration.json payload.
    """
    out_dir = Path(out)
    loaded, o = load_outcomes(predictions, strict, mode, budget, epsilon)
    t_hat, fit_block, fit_idx, sel_idx, split_used = fit_or_fix_temperature(loaded.records, o, temperature, seed,
                                                                            fit_fraction, split_by)
    rule = Rule(mode, alpha, delta, epsilon, budget, budget_guarantee, min_exits)
    videos = video_codes(loaded.records)  # one code per file, whichever benchmarks ask about it; no video: its own
    per_video_block, sel_idx = draw_per_video(per_video, rule, o, videos, sel_idx, split_used, temperature, seed)
    clusters = videos[sel_idx] if cluster_bound and not per_video else None
    refusal = clustered_selection_refusal(len(set(videos[sel_idx].tolist())))
    if rule.guaranteed_risk is not None and (cluster_bound or per_video) and refusal:
        raise CalibrationInputError(refusal)

    m_sel, c_sel = margins(o.logits[sel_idx], t_hat), o.s1_correct[sel_idx]
    known_sel, s2_sel = o.s2_known[sel_idx], o.s2_correct[sel_idx]
    selection = select_threshold(rule, m_sel, c_sel, known_sel, s2_sel, clusters)
    tau = selection.tau
    stats = exit_stats(m_sel, c_sel, tau, delta, clusters)
    select_block = {**stats.as_dict(), "no_exit": selection.no_exit, **selection.details}
    if selection.no_exit and selection.details.get("reason"):
        print(f"calibrate: no exit ({mode} mode): {selection.details['reason']}", file=sys.stderr)

    # the paper's operating point (T = 2, tau = 0.97) on the same samples, for comparison
    m_paper = margins(o.logits[sel_idx], PAPER_TEMPERATURE)
    paper_stats = exit_stats(m_paper, c_sel, PAPER_TAU, delta, clusters)
    paper_block = {"temperature": PAPER_TEMPERATURE, **paper_stats.as_dict(),
                   "meets_alpha": bool(paper_stats.upper_bound_error <= alpha)}
    if known_sel.any():
        s1k, s2k = c_sel[known_sel], s2_sel[known_sel]
        select_block["final_accuracy"] = _final_accuracy(m_sel[known_sel], s1k, s2k, tau)
        paper_block["final_accuracy"] = _final_accuracy(m_paper[known_sel], s1k, s2k, PAPER_TAU)
        select_block["n_with_stage2"] = int(known_sel.sum())
        select_block["accuracy_loss"] = float(np.mean((m_sel[known_sel] >= tau) & ~s1k & s2k))

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
        "epsilon": epsilon,
        "min_exits": min_exits,
        "fit_fraction": fit_fraction,
        "split_by": split_used,
        "split_by_requested": split_by,
        "cluster_bound": cluster_bound and not per_video,
        "per_video": per_video_block,
        "settings": settings_of(loaded.records, predictions),
        "rows_without_video": loaded.rows_without_video,
        **video_counts(videos, fit_idx, sel_idx),
        "n_samples": len(loaded.records),
        "n_benchmarks": len(set(o.bench.tolist())),
        "skipped": dict(loaded.skipped),
        "table4_counts": {
            "fitted_T": {r["bin"]: r["n"] for r in paper_bin_table(margins(o.logits, t_hat), o.s1_correct)},
            "paper_T": {r["bin"]: r["n"] for r in paper_bin_table(margins(o.logits, PAPER_TEMPERATURE), o.s1_correct)},
        },
        "select_margins": margin_summary(m_sel, t_hat),
    }
    if per_benchmark:
        payload["per_benchmark"] = per_benchmark_taus(rule, o, sel_idx, m_sel, c_sel, clusters)
    if verifier_alpha is not None:
        payload["verifier"] = calibrate_verifier(predictions, verifier_alpha, delta, evidence_rule, min_exits,
                                                 cluster_bound)
        if payload["verifier"]["threshold"] is None:
            print(f"calibrate: no verifier threshold certified: {payload['verifier']['reason']}", file=sys.stderr)

    out_dir.mkdir(parents=True, exist_ok=True)
    if loaded.problems:
        (out_dir / "problems.txt").write_text("".join(f"{p}\n" for p in loaded.problems), encoding="utf-8")
    figure_paths = (write_figures(out_dir, o, sel_idx, t_hat, tau, mode, stats, paper_stats, delta, alpha,
                                  payload["n_benchmarks"]) if figures else [])
    if figures and validity_splits > 0 and not per_video:  # the splits replay the design-effect procedure only
        summary, paths = guarantee_validity(out_dir, o, rule, temperature, seed, fit_fraction, validity_splits,
                                            videos, split_used, cluster_bound)
        if summary is not None:
            payload["guarantee_validity"] = summary
        figure_paths += paths
    payload["figures"] = [str(p.relative_to(out_dir)) for p in figure_paths]
    payload["provenance"] = collect_provenance()
    (out_dir / "summary.md").write_text(render_summary(payload), encoding="utf-8")
    write_calibration(out_dir / "calibration.json", payload)  # last: its presence means the run finished
    return payload


def video_counts(videos: np.ndarray, fit_idx, sel_idx) -> dict:
    """Distinct videos in the fit and select parts, and in both (nonzero when the split is by question, or when a
    calibration set from a single video fell back to it)."""
    fit, sel = set(videos[fit_idx].tolist()), set(videos[sel_idx].tolist())
    return {"videos_fit": len(fit), "videos_select": len(sel), "videos_in_both": len(fit & sel)}


def draw_per_video(per_video: bool, rule: Rule, o: Outcomes, videos: np.ndarray, sel_idx, split_used: str,
                   temperature, seed: int) -> tuple[dict | None, np.ndarray]:
    """The exact per-video mode's selection split (calibrate/per_video.py): one random question per video of it
    (among those with a Stage-2 outcome when the mode needs one), and its calibration.json block; (None, sel_idx)
    when the mode is off. Raises CalibrationInputError when it cannot certify."""
    if not per_video:
        return None, sel_idx
    eligible = sel_idx[o.s2_known[sel_idx]] if rule.needs_stage2 else sel_idx
    n_videos = len(set(videos[eligible].tolist()))
    try:
        check_per_video(n_videos, split_used, temperature is None)
    except PerVideoError as exc:
        raise CalibrationInputError(str(exc)) from None
    drawn = eligible[one_per_video(videos[eligible], seed)]
    return {"videos": n_videos, "questions_in_selection": len(sel_idx), "questions_used": len(drawn),
            "draw": "one question per video, uniformly at random (seeded)"}, drawn
