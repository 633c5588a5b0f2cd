"""Learn-then-Test (Angelopoulos et al., 2021) for CADER's exit threshold tau and the verifier threshold.

Each candidate threshold on a fixed grid (chosen before seeing data) is a null hypothesis "this threshold breaks a
constraint". Every risk here is the rate of a 0/1 loss, so its p-value is the exact binomial tail
P(Binomial(n, level) <= k) (scipy): under the null (rate > level) it is super-uniform. The hypotheses are tested by
fixed-sequence testing from the strictest to the laxest threshold, stopping at the first p > delta; every
threshold tested before that stop is certified, and P(any certified threshold breaks a constraint) <= delta
(family-wise error), so the chosen one -- any certified one -- keeps every constraint with probability >= 1 - delta.

Risks (per threshold tau on the selection split; a sample exits iff M >= tau):
- exit_error: Stage-1 wrong among exits. Conditional on the number of exits, as precision mode's Clopper-Pearson
  bound (p <= delta is the same event as that bound <= alpha). Thresholds with fewer than ``min_exits`` exits are
  skipped before the sequence starts, as in precision mode.
- accuracy_loss (the cascade guarantee): loss_i = exit_i and Stage 1 wrong and Stage 2 right, over all samples:
  the accuracy given up against always running Stage 2 is at most E[loss] (a sample whose Stage-1 answer is right
  and Stage-2 answer wrong only helps, and is not credited). No thresholds are skipped: the strictest ones exit
  nobody, lose nothing, and pass once n >= log(delta) / log(1 - epsilon).
With ``clusters`` (one video per sample) each risk is tested on its effective counts losses / d and n / d, d the
design effect of its loss indicator over its denominator at that threshold, floored by the one the loss's
intraclass correlation over the selection split implies (calibrate/clusters.py), so questions
sharing a video are not counted as independent trials; the p-value then takes the Beta form of the binomial tail,
which accepts fractional counts.
Several risks at once: the null of a threshold is "some risk is above its level", and the largest of the risks'
p-values is a valid p-value for it, so one sequence controls them all together.

The Stage-2 fraction is not a risk that grows along the sequence (it shrinks), so it cannot join the sequence.
Either it is a deterministic constraint on the selection split (the default: among certified thresholds, keep
those sending at most ``budget`` of the selection split to Stage 2), or (``budget_guarantee``) it gets its own
binomial test, by fixed sequence from the laxest threshold up, with delta split in half between the two families
(Bonferroni), so the chosen tau keeps every constraint with probability >= 1 - delta.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import numpy as np
from cader.calibrate.binomial import clopper_pearson_upper
from cader.calibrate.clusters import (
    cluster_codes,
    design_effects_at,
    design_effects_of_rates,
    effective_counts,
)
from cader.calibrate.per_video import clustered_selection_refusal
from cader.calibrate.tau import NO_EXIT_TAU, PRECISION_GRID, TauSelection, exit_counts_at, min_testable_exits
from scipy.stats import beta, binom


def binomial_tail_pvalue(losses, n, level: float) -> np.ndarray:
    """p-value of "loss rate > level" given ``losses`` among ``n`` (P(Binomial(n, level) <= losses)); 1 where n == 0.

    Fractional counts (effective counts over clusters) use the same tail in its Beta form,
    P(Binomial(n, p) <= k) = 1 - I_p(k + 1, n - k), which is 1 for k >= n; p <= delta is then the same event as the
    Clopper-Pearson bound on (k, n) being <= level, for integer and fractional counts alike."""
    losses = np.asarray(losses, dtype=np.float64)
    n = np.asarray(n, dtype=np.float64)
    if not 0.0 < level < 1.0:
        raise ValueError(f"a risk level must be in (0, 1), got {level}")
    whole = np.all(losses == np.round(losses)) and np.all(n == np.round(n))
    if whole:  # the integer tail as scipy computes it (the numbers calibration.json has always held)
        return np.where(n > 0, binom.cdf(losses, np.maximum(n, 1.0), level), 1.0)
    with np.errstate(invalid="ignore", divide="ignore"):
        tail = beta.sf(level, losses + 1.0, np.maximum(n - losses, 1e-300))
    return np.where((n > 0) & (losses < n), tail, 1.0)


def fixed_sequence_rejections(pvalues: np.ndarray, delta: float) -> int:
    """Hypotheses rejected by fixed-sequence testing in the given order: the length of the leading run of p <= delta."""
    fails = np.flatnonzero(~(np.asarray(pvalues, dtype=np.float64) <= delta))
    return int(fails[0]) if fails.size else int(np.size(pvalues))


def cascade_loss_counts(margin, s1_correct, s2_correct, taus) -> np.ndarray:
    """Per tau in ``taus``: samples that exit (M >= tau) with Stage 1 wrong where Stage 2 would have been right."""
    lost = ~np.asarray(s1_correct, bool) & np.asarray(s2_correct, bool)
    # exit_counts_at counts "errors" = not correct among exits; pass correct = not lost
    return exit_counts_at(margin, ~lost, taus)[1]


@dataclass
class Constraint:
    """One constraint of an LTT run, as calibration.json records it."""

    name: str  # exit_error | accuracy_loss | stage2_fraction
    level: float
    handled: str  # how it is controlled: "binomial test (LTT)" or "deterministic on the selection split"
    met: bool = False
    value: float | None = None  # the selection split's rate at the chosen tau
    upper_bound: float | None = None  # one-sided (1 - delta) Clopper-Pearson bound there (tested risks only)
    reason: str | None = None  # why it could not be met
    design_effect: float | None = None  # with clusters: the design effect of the risk at the chosen tau

    def as_dict(self) -> dict:
        out = asdict(self)
        if out["design_effect"] is None:
            out.pop("design_effect")
        return out


@dataclass
class _Risk:
    name: str
    level: float
    k: np.ndarray  # losses per tau
    n: np.ndarray  # denominators per tau
    what: str  # "errors among exits" / "losses among samples"
    design: np.ndarray | None = None  # design effect per tau (clusters); None: questions counted as trials
    p: np.ndarray = field(init=False)

    def __post_init__(self):
        self.p = binomial_tail_pvalue(*self.tested_counts(), self.level)

    def tested_counts(self, i=slice(None)):
        """(losses, n) as the test sees them at index ``i``: the effective counts with clusters."""
        if self.design is None:
            return self.k[i], self.n[i]
        return effective_counts(self.k[i], self.n[i], self.design[i])


def ltt_risks(margin, s1_correct, s2_correct, taus, alpha, epsilon, clusters) -> list[_Risk]:
    """The tested risks per tau: the exit error when ``alpha`` is given, the accuracy loss when ``epsilon`` is."""
    risks = []
    if alpha is not None:
        n_exits, n_errors = exit_counts_at(margin, s1_correct, taus)
        design = None if clusters is None else design_effects_at(margin, s1_correct, clusters, taus)
        risks.append(_Risk("exit_error", alpha, n_errors, n_exits, "errors among exits", design))
    if epsilon is not None:
        lost = cascade_loss_counts(margin, s1_correct, s2_correct, taus)
        design = None
        if clusters is not None:  # loss_i = exit_i and Stage 1 wrong and Stage 2 right, per tau, over every sample
            lost_i = ~s1_correct & np.asarray(s2_correct, bool)
            design = design_effects_of_rates((margin[None, :] >= taus[:, None]) & lost_i[None, :], clusters,
                                             pooled=lost_i)
        risks.append(_Risk("accuracy_loss", epsilon, lost, np.full(taus.size, margin.size), "losses among samples",
                           design))
    return risks


def budget_window(n: int, n_exits: np.ndarray, budget: float, delta: float, guarantee: bool):
    """(the stage2_fraction constraint, which taus keep it): on the selection split, or (``guarantee``) by its own
    binomial test, a fixed sequence from the laxest tau at delta / 2."""
    if not guarantee:
        within = (n - n_exits) / max(n, 1) <= budget + 1e-12
        return Constraint("stage2_fraction", budget, "deterministic on the selection split"), within
    if 0.0 < budget < 1.0:
        p_budget = binomial_tail_pvalue(n - n_exits, np.full(n_exits.size, n), budget)
    else:  # nothing can certify "fraction <= 0"; "fraction <= 1" always holds
        p_budget = np.full(n_exits.size, 0.0 if budget >= 1.0 else 1.0)
    lax_first = fixed_sequence_rejections(p_budget[::-1], delta / 2)
    within = np.zeros(n_exits.size, bool)
    within[n_exits.size - lax_first:] = True
    return Constraint("stage2_fraction", budget, "binomial test (own fixed sequence from the laxest tau, delta/2)"), \
        within


def _check_ltt_inputs(delta, alpha, epsilon, s2_correct, budget) -> None:
    if not 0.0 < delta < 1.0:
        raise ValueError(f"delta must be in (0, 1), got {delta}")
    if alpha is None and epsilon is None:
        raise ValueError("an LTT run needs a risk to control: alpha (exit error) and/or epsilon (accuracy loss)")
    if epsilon is not None and s2_correct is None:
        raise ValueError("epsilon (accuracy loss against always running Stage 2) needs Stage-2 outcomes")
    if budget is not None and not 0.0 <= budget <= 1.0:
        raise ValueError(f"budget (max Stage-2 fraction) must be in [0, 1], got {budget}")


def _blocking_reasons(constraints, risks, taus, start, stop, need, n, delta_risk) -> None:
    """The reason of each risk that stopped the sequence before it certified anything."""
    if start >= taus.size:
        constraints[0].reason = f"no candidate threshold has {need} or more exits in the selection split ({n} samples)"
        return
    for c, r in zip(constraints, risks):
        if stop < taus.size and r.p[stop] > delta_risk:
            ub = float(clopper_pearson_upper(*r.tested_counts(stop), delta_risk))
            eff = "" if r.design is None else f" (design effect {r.design[stop]:.3g})"
            c.reason = (f"at tau = {taus[stop]:.6g} (the strictest threshold the sequence could not certify) "
                        f"{int(r.k[stop])} {r.what} of {int(r.n[stop])}{eff}: upper bound {ub:.3g} > {r.level}")


def select_tau_ltt(
    margin: np.ndarray,
    s1_correct: np.ndarray,
    delta: float,
    alpha: float | None = None,
    epsilon: float | None = None,
    s2_correct: np.ndarray | None = None,
    budget: float | None = None,
    budget_guarantee: bool = False,
    min_exits: int = 50,
    candidates: np.ndarray | None = None,
    mode: str = "joint",
    clusters=None,
) -> TauSelection:
    """The laxest grid threshold that LTT certifies for every given constraint; NO_EXIT_TAU when none.

    ``alpha`` bounds the exit error, ``epsilon`` the accuracy loss (needs ``s2_correct``), ``budget`` the Stage-2
    fraction. ``details["constraints"]`` says for each whether it is met at the chosen tau and, when none
    qualifies, why. ``clusters`` (one label per sample, the video) tests the risks on effective counts.
    """
    _check_ltt_inputs(delta, alpha, epsilon, s2_correct, budget)
    margin = np.asarray(margin, np.float64)
    s1_correct = np.asarray(s1_correct, bool)
    n = int(margin.size)
    taus = PRECISION_GRID if candidates is None else np.unique(np.asarray(candidates, np.float64))[::-1]
    n_exits = exit_counts_at(margin, s1_correct, taus)[0]
    split = budget is not None and budget_guarantee
    delta_risk = delta / 2 if split else delta
    risks = ltt_risks(margin, s1_correct, s2_correct, taus, alpha, epsilon, clusters)
    constraints = [Constraint(r.name, r.level, "binomial test (LTT, fixed sequence)") for r in risks]
    p_max = np.max([r.p for r in risks], axis=0)

    start = 0
    need = None
    if alpha is not None:  # as precision mode: the exit-error test is run only on thresholds with enough exits
        need = max(int(min_exits), min_testable_exits(alpha, delta_risk))
        testable = np.flatnonzero(n_exits >= need)
        start = int(testable[0]) if testable.size else taus.size
    certified = fixed_sequence_rejections(p_max[start:], delta_risk) if start < taus.size else 0
    stop = start + certified  # first failing index (== taus.size when none fails)
    details = {"candidates": int(taus.size), "tested": int(min(certified + 1, taus.size - start)),
               "certified": certified, "stopped_at": float(taus[stop]) if stop < taus.size else None,
               "delta_risks": delta_risk}
    if need is not None:
        details["min_exits"] = need
    if clusters is not None:
        details["cluster_bound"] = True

    feasible = np.zeros(taus.size, bool)
    feasible[start:stop] = True
    budget_constraint = None
    if budget is not None:
        budget_constraint, within = budget_window(n, n_exits, budget, delta, split)
        constraints.append(budget_constraint)
        feasible &= within
    for c in constraints[: len(risks)]:
        c.met = certified > 0  # an exit set meeting every risk was certified
    if certified == 0:
        _blocking_reasons(constraints, risks, taus, start, stop, need, n, delta_risk)
    elif stop < taus.size:
        details["stopped_by"] = [r.name for r in risks if r.p[stop] > delta_risk]
    if not feasible.any():
        if certified > 0 and budget_constraint is not None:
            lax = stop - 1
            frac = (n - n_exits[lax]) / max(n, 1)
            budget_constraint.reason = (
                f"the laxest tau the risks allow ({taus[lax]:.6g}) sends {frac:.3f} of the selection split to Stage "
                f"2 > budget {budget}" + (", or the budget's own bound is not certified there" if split else ""))
        elif budget_constraint is not None:
            budget_constraint.reason = "no exit set is certified, so every sample goes to Stage 2"
        details["constraints"] = [c.as_dict() for c in constraints]
        details["unmet"] = [c.name for c in constraints if c.reason]
        details["reason"] = "; ".join(f"{c.name}: {c.reason}" for c in constraints if c.reason)
        return TauSelection(NO_EXIT_TAU, mode, True, details)

    chosen = int(np.flatnonzero(feasible)[-1])  # the laxest: most exits, least cost
    for c, r in zip(constraints, risks):
        c.value = float(r.k[chosen] / max(r.n[chosen], 1))
        c.upper_bound = float(clopper_pearson_upper(*r.tested_counts(chosen), delta_risk))
        if r.design is not None:
            c.design_effect = float(r.design[chosen])
    if budget_constraint is not None:
        budget_constraint.met, budget_constraint.value = True, float((n - n_exits[chosen]) / max(n, 1))
    details["constraints"] = [c.as_dict() for c in constraints]
    details["unmet"] = []
    return TauSelection(float(taus[chosen]), mode, False, details)


# ---- the verifier threshold (CADER, Local Evidence Verification: accept iff P_yes >= delta_v, paper 0.60) ----------

VERIFIER_GRID = np.unique(np.r_[np.round(np.arange(0, 100) * 0.01, 2), 0.995, 0.999])[::-1]


def select_verifier_threshold(
    p_yes: np.ndarray, miss: np.ndarray, alpha_v: float, delta: float, min_accepted: int = 50,
    candidates: np.ndarray | None = None, clusters=None,
) -> dict:
    """The lowest verifier threshold on a fixed grid whose accepted crops miss the evidence with rate <= alpha_v,
    certified with probability >= 1 - delta (fixed sequence from the strictest threshold; conditional binomial test
    on the accepted crops, as the exit error). ``threshold`` is None when none is certified.

    ``clusters`` (one label per crop, its video) tests each threshold on effective counts, as the exit error is
    tested: accepted crops and misses divided by the design effect of the misses among the accepted crops
    (calibrate/clusters.py ``design_effects_at``); a threshold is testable when it accepts ``min_accepted`` crops
    and its effective count can pass at all. With ``clusters`` the block also counts the videos, and crops from
    fewer than two videos certify nothing (the reason says so)."""
    if not (0.0 < alpha_v < 1.0 and 0.0 < delta < 1.0):
        raise ValueError(f"alpha_v and delta must be in (0, 1), got {alpha_v}, {delta}")
    p_yes = np.asarray(p_yes, np.float64)
    miss = np.asarray(miss, bool)
    grid = VERIFIER_GRID if candidates is None else np.unique(np.asarray(candidates, np.float64))[::-1]
    n_acc, n_miss = exit_counts_at(p_yes, ~miss, grid)  # "exits" = accepted, "errors" = misses
    design = np.ones(grid.size) if clusters is None else design_effects_at(p_yes, ~miss, clusters, grid)
    k_eff, n_eff = effective_counts(n_miss, n_acc, design)
    need = max(int(min_accepted), min_testable_exits(alpha_v, delta))
    testable = np.flatnonzero((n_acc >= min_accepted) & (n_eff >= min_testable_exits(alpha_v, delta) - 1e-9))
    out = {"alpha_v": alpha_v, "delta": delta, "n": int(p_yes.size), "n_miss": int(miss.sum()), "min_accepted": need,
           "threshold": None, "certified": 0, "cluster_bound": clusters is not None}
    if clusters is not None:
        out["videos"] = cluster_codes(clusters)[1]
    if testable.size == 0:
        counted = "" if clusters is None else " (effective counts over videos)"
        out["reason"] = (f"no threshold accepts {need} or more crops{counted} ({p_yes.size} verified crops with "
                         f"evidence)")
        return out
    # one video's crops estimate no design effect (d = 1 over a single cluster): as for tau, a refusal
    refusal = None if clusters is None else clustered_selection_refusal(out["videos"], "the verified crops come from")
    if refusal:
        out["reason"] = refusal
        return out
    start = int(testable[0])
    pv = binomial_tail_pvalue(k_eff, n_eff, alpha_v)
    certified = fixed_sequence_rejections(pv[start:], delta)
    out["certified"] = certified
    if certified == 0:
        ub = float(clopper_pearson_upper(k_eff[start], n_eff[start], delta))
        out["reason"] = (f"the strictest testable threshold ({grid[start]:.3g}) accepts {int(n_acc[start])} crops, "
                         f"{int(n_miss[start])} missing the evidence: upper bound {ub:.3g} > alpha_v = {alpha_v}"
                         + ("" if clusters is None else f" (design effect {design[start]:.3g})"))
        return out
    i = start + certified - 1
    out.update(threshold=float(grid[i]), n_accepted=int(n_acc[i]), miss_rate=float(n_miss[i] / n_acc[i]),
               upper_bound_miss=float(clopper_pearson_upper(k_eff[i], n_eff[i], delta)))
    if clusters is not None:
        out["design_effect"] = float(design[i])
    return out


# ---- how many samples a guarantee needs --------------------------------------------------------------------------


def certifiable_errors(n: int, level: float, delta: float) -> int:
    """The most errors among n that still pass (P(Binomial(n, level) <= k) <= delta); -1 when even 0 fails."""
    if n <= 0:
        return -1
    k = int(binom.ppf(delta, n, level))  # smallest k with cdf >= delta
    while k >= 0 and binom.cdf(k, n, level) > delta:
        k -= 1
    return k


def certification_power(n: int, true_rate: float, level: float, delta: float) -> float:
    """P(a set of n whose true error rate is ``true_rate`` passes the level-``level`` test)."""
    k = certifiable_errors(n, level, delta)
    return float(binom.cdf(k, n, true_rate)) if k >= 0 else 0.0
