"""Showing the guarantee on the held-out data itself: guarantee_validity.png/.csv (written by calibrate/fit.py).

Over many random three-way splits of the held-out samples -- fit T / select tau / test -- the run's own mode picks
tau on the select part, and the test part measures the risk the mode bounds (the exit error, or the accuracy lost
against always running Stage 2) and the exit rate. The figure shows the realised risk per split against its level
with the share of splits above it (at most about delta for a valid procedure, plus the test part's own sampling
noise, which makes a finite test part read high), and the price of the guarantee: the exit rate lost against the
oracle tau (the laxest grid tau whose risk on the test part itself is within the level, i.e. chosen with hindsight).

The splits follow the run's own procedure (calibrate/pipeline.py): by default they are drawn over videos, stratified
by benchmark as split_fit_select does, so no video has questions on two sides of a split, and the selection bounds
the risk on effective counts over the select part's videos (calibrate/clusters.py). Questions on one video share its
difficulty: a question split leaves the test part sharing videos with the select part, so its realised risk follows
what the selection saw and reads a broken guarantee as a held one. The CSV (columns split_by, cluster_bound) and the
figure's title say which split and which bound the rows used.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from cader.calibrate.clusters import cluster_codes
from cader.calibrate.ltt import cascade_loss_counts
from cader.calibrate.margin import margins
from cader.calibrate.tau import PRECISION_GRID, TauSelection, exit_counts_at
from cader.calibrate.temperature import fit_temperature
from cader.calibrate.videos import SPLIT_UNITS

log = logging.getLogger(__name__)

RISKS = ("exit_error", "accuracy_loss")


def split_three(
    n: int,
    rng: np.random.Generator,
    fit_fraction: float | None,
    units: np.ndarray | None = None,
    strata: np.ndarray | None = None,
) -> tuple[np.ndarray, ...]:
    """(fit, select, test) sample indices: per stratum, ``fit_fraction`` of its units to the fit (none when None),
    the rest halved (an odd one to the test part); every sample of a unit goes to its unit's part.

    Args:
        n: number of samples
        rng: the split's generator
        fit_fraction: share of each stratum's units that fits T; None: no fit part (a fixed T)
        units: a unit label per sample (the video); None: each sample is its own unit (a question split)
        strata: a stratum label per sample (the benchmark), the units split within each; None: one stratum

    With one unit per sample and one stratum this is the plain permutation split (rows of earlier runs reproduce).
    """
    codes = np.arange(n) if units is None else cluster_codes(units)[0]
    if codes.size != n or (strata is not None and len(strata) != n):
        raise ValueError(f"need one unit and one stratum label per sample ({n} samples)")
    n_units = int(codes.max()) + 1 if n else 0
    first = np.full(n_units, n, np.int64)
    np.minimum.at(first, codes, np.arange(n))  # a unit's stratum is that of its first sample
    unit_stratum = np.zeros(n_units, np.int64) if strata is None else cluster_codes(np.asarray(strata)[first])[0]
    members = np.split(np.argsort(codes, kind="stable"), np.cumsum(np.bincount(codes, minlength=n_units))[:-1])
    parts: tuple[list, list, list] = ([], [], [])
    for s in np.unique(unit_stratum):  # strata in order of first appearance (their codes)
        mine = np.flatnonzero(unit_stratum == s)
        perm = mine[rng.permutation(mine.size)]
        n_fit = 0 if fit_fraction is None else int(np.floor(mine.size * fit_fraction))
        half = (perm.size - n_fit) // 2
        for part, chunk in zip(parts, (perm[:n_fit], perm[n_fit:n_fit + half], perm[n_fit + half:])):
            part.extend(members[u] for u in chunk)
    return tuple(np.concatenate(p).astype(np.int64) if p else np.zeros(0, np.int64) for p in parts)


def units_per_part(units: np.ndarray, strata: np.ndarray | None, fit_fraction: float | None) -> tuple[int, ...]:
    """(fit, select, test) unit counts every split_three draw gives (they depend on the counts alone)."""
    codes, n_units = cluster_codes(units)
    first = np.full(n_units, codes.size, np.int64)
    np.minimum.at(first, codes, np.arange(codes.size))
    per_stratum = (np.array([n_units]) if strata is None else
                   np.bincount(cluster_codes(np.asarray(strata)[first])[0]))
    fit = np.zeros_like(per_stratum) if fit_fraction is None else np.floor(per_stratum * fit_fraction).astype(int)
    select = (per_stratum - fit) // 2
    return int(fit.sum()), int(select.sum()), int((per_stratum - fit - select).sum())


def realised(margin, s1_correct, s2_correct, tau: float, risk: str) -> tuple[float, float]:
    """(risk, exit rate) at tau on these samples; the exit error of an empty exit set is 0 (nothing to break)."""
    exits = np.asarray(margin) >= tau
    rate = float(exits.mean()) if exits.size else 0.0
    if risk == "exit_error":
        return (float((~s1_correct[exits]).mean()) if exits.any() else 0.0), rate
    return float(np.mean(exits & ~s1_correct & s2_correct)) if exits.size else 0.0, rate


def oracle_exit_rate(margin, s1_correct, s2_correct, risk: str, level: float) -> float:
    """The largest exit rate of a grid tau whose risk on these samples is within ``level``."""
    n_exits, n_err = exit_counts_at(margin, s1_correct, PRECISION_GRID)
    if risk == "exit_error":
        ok = (n_exits > 0) & (n_err <= level * n_exits + 1e-12)
    else:
        ok = cascade_loss_counts(margin, s1_correct, s2_correct, PRECISION_GRID) <= level * margin.size + 1e-12
    return float(n_exits[ok].max() / margin.size) if ok.any() and margin.size else 0.0


@dataclass(frozen=True)
class SplitDraw:
    """How the random fit/select/test splits are drawn.

    Args:
        n_splits: random splits
        seed: seed of the splits (split r draws from default_rng([seed, r]))
        fit_fraction: share of the units (per stratum) that fits T
        temperature: fix T to this value (then nothing is spent on a fit and ``fit_fraction`` is unused)
        split_by: video (each video's questions on one side of every split; needs ``clusters``) or question;
            None: video when ``clusters`` is given. A video split that would leave a part without a video (as when
            every benchmark has one video) falls back to questions, as split_fit_select does; the rows say so
        cluster_bound: with ``clusters``, the selection bounds the risk on effective counts over the select
            part's videos (the default calibration); false counts questions as independent trials
    """

    n_splits: int = 100
    seed: int = 0
    fit_fraction: float | None = 0.5
    temperature: float | None = None
    split_by: str | None = None
    cluster_bound: bool = True


def validity_runs(
    logits: np.ndarray,
    gold: np.ndarray,
    s1_correct: np.ndarray,
    s2_correct: np.ndarray | None,
    choose: Callable[..., TauSelection],
    risk: str,
    level: float,
    draw: SplitDraw,
    clusters: np.ndarray | None = None,
    strata: np.ndarray | None = None,
) -> list[dict]:
    """One row per random split (see the module docstring).

    Args:
        logits: raw option logits per sample
        gold: index of the right option per sample
        s1_correct: Stage-1's answer is right
        s2_correct: Stage-2's answer is right (None: the mode needs no Stage-2 outcome)
        choose: the run's selection rule, ``choose(margin, s1_correct, s2_correct)``; with the cluster bound it is
            called with ``clusters=`` the select part's video codes as well (Rule.choose takes it)
        risk: the risk the test part measures (exit_error or accuracy_loss)
        level: that risk's level
        draw: how the splits are drawn (their number, seed, fit fraction, fixed T, unit and bound)
        clusters: a video code per sample (questions on one video share its difficulty); None: none known
        strata: a benchmark per sample, the splits drawn within each (as split_fit_select does); None: one
    """
    if risk not in RISKS:
        raise ValueError(f"risk must be one of {RISKS}, got {risk!r}")
    split_by = draw.split_by or ("video" if clusters is not None else "question")
    if split_by not in SPLIT_UNITS:
        raise ValueError(f"split_by must be one of {SPLIT_UNITS}, got {split_by!r}")
    if split_by == "video" and clusters is None:
        raise ValueError("split_by='video' needs clusters (a video code per sample)")
    n = len(gold)
    codes = None if clusters is None else cluster_codes(clusters)[0]
    if codes is not None and codes.size != n:
        raise ValueError(f"need one video per sample: {codes.size} labels for {n} samples")
    temperature = draw.temperature
    fraction = None if temperature is not None else draw.fit_fraction
    units = codes if split_by == "video" else None
    if units is not None and min(units_per_part(units, strata, fraction)[fraction is None:]) == 0:
        log.warning("validity splits by video leave a part without a video (%d videos); splitting questions",
                    int(codes.max()) + 1)
        split_by, units = "question", None
    bounded = draw.cluster_bound and codes is not None
    s2 = np.zeros(n, bool) if s2_correct is None else np.asarray(s2_correct, bool)
    rows = []
    for r in range(draw.n_splits):
        rng = np.random.default_rng([draw.seed, r])
        fit, sel, test = split_three(n, rng, fraction, units, strata)
        if sel.size == 0 or test.size == 0 or (temperature is None and fit.size == 0):
            break  # too few samples to split three ways: no rows, and no figure
        t_hat = float(temperature) if temperature is not None else fit_temperature(logits[fit], gold[fit]).temperature
        m_sel, m_test = margins(logits[sel], t_hat), margins(logits[test], t_hat)
        s2_sel = s2[sel] if s2_correct is not None else None
        chosen = (choose(m_sel, s1_correct[sel], s2_sel, clusters=codes[sel]) if bounded else
                  choose(m_sel, s1_correct[sel], s2_sel))
        value, rate = realised(m_test, s1_correct[test], s2[test], chosen.tau, risk)
        oracle = oracle_exit_rate(m_test, s1_correct[test], s2[test], risk, level)
        rows.append({"split": r, "split_by": split_by, "cluster_bound": bounded, "temperature": t_hat,
                     "tau": chosen.tau, "no_exit": chosen.no_exit, "n_select": int(sel.size),
                     "n_test": int(test.size), **_video_counts(codes, fit, sel, test), "risk": risk,
                     "level": level, "test_risk": value, "test_exit_rate": rate, "oracle_exit_rate": oracle,
                     "price": oracle - rate, "above_level": bool(value > level)})
        if s2_correct is not None:  # both risks, whichever one the mode bounds (joint mode bounds both)
            rows[-1]["test_exit_error"] = realised(m_test, s1_correct[test], s2[test], chosen.tau, "exit_error")[0]
            rows[-1]["test_accuracy_loss"] = realised(m_test, s1_correct[test], s2[test], chosen.tau,
                                                      "accuracy_loss")[0]
    return rows


def _video_counts(codes: np.ndarray | None, fit, sel, test) -> dict:
    """Videos in the select and test parts, and videos with questions in two or more parts (0 for a video split)."""
    if codes is None:
        return {}
    parts = [set(codes[p].tolist()) for p in (fit, sel, test)]
    shared = (parts[0] & parts[1]) | (parts[0] & parts[2]) | (parts[1] & parts[2])
    return {"videos_select": len(parts[1]), "videos_test": len(parts[2]), "videos_in_two_parts": len(shared)}


def validity_summary(rows: list[dict], delta: float, guaranteed: bool) -> dict:
    """The rows' totals (calibration.json's guarantee_validity block), with the split unit and bound they used."""
    n = len(rows)
    above = sum(r["above_level"] for r in rows)
    first = rows[0] if rows else {}
    return {"splits": n, "risk": first.get("risk"), "level": first.get("level"),
            "split_by": first.get("split_by", "question"), "cluster_bound": bool(first.get("cluster_bound")),
            "delta": delta, "guaranteed": guaranteed, "above_level": above, "above_rate": above / n if n else None,
            "no_exit_splits": sum(r["no_exit"] for r in rows),
            "mean_test_exit_rate": float(np.mean([r["test_exit_rate"] for r in rows])) if n else None,
            "mean_price": float(np.mean([r["price"] for r in rows])) if n else None}


def procedure_label(summary: dict) -> str:
    """Which split and which bound the rows used, in words (the figure's title)."""
    split = ("split by video (each video's questions on one side)" if summary.get("split_by") == "video" else
             "split by question")
    bound = ("bound on effective counts over the select part's videos" if summary.get("cluster_bound") else
             "bound counting questions as independent trials")
    return f"{split}; {bound}"


def plot_validity(out_dir: str | Path, rows: list[dict], summary: dict, mode: str) -> list[Path]:
    from cader.calibrate.plots import _save, plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(13, 5.4), layout="constrained")  # room for the 2-line title
    risk_name = {"exit_error": "exit error (Stage-1 wrong among exits)",
                 "accuracy_loss": "accuracy lost vs always Stage 2"}[summary["risk"]]
    values = np.sort([r["test_risk"] for r in rows])
    ax1.plot(np.arange(1, values.size + 1) / max(values.size, 1), values, marker=".", ls="-", color="tab:blue",
             label=f"realised on the test part ({summary['splits']} splits, sorted)")
    ax1.axhline(summary["level"], color="red", lw=1, label=f"level = {summary['level']}")
    ax1.axvline(1 - summary["delta"], color="grey", ls=":", label=f"1 − δ = {1 - summary['delta']:.2f}")
    note = "" if summary["guaranteed"] else f" (mode {mode} guarantees no such bound: level shown for reference)"
    ax1.set_title(f"{summary['above_level']} of {summary['splits']} splits above the level{note}", fontsize=10)
    ax1.set_xlabel("share of splits")
    ax1.set_ylabel(risk_name)
    ax1.grid(alpha=0.3)
    ax1.legend(loc="upper left")
    chosen = np.array([r["test_exit_rate"] for r in rows])
    oracle = np.array([r["oracle_exit_rate"] for r in rows])
    ax2.scatter(oracle, chosen, s=14, alpha=0.6, label="one split")
    ax2.plot([0, 1], [0, 1], color="grey", ls="--", label="no price")
    ax2.set_xlim(-0.02, 1.02)
    ax2.set_ylim(-0.02, 1.02)
    ax2.set_xlabel("oracle exit rate (laxest tau within the level on the test part)")
    ax2.set_ylabel("exit rate of the chosen tau (test part)")
    ax2.set_title(f"price of the guarantee: {summary['mean_price']:.3f} exit rate lost on average "
                  f"({summary['no_exit_splits']} no-exit splits)", fontsize=10)
    ax2.grid(alpha=0.3)
    ax2.legend(loc="upper left")
    fig.suptitle(f"Guarantee validity over random fit/select/test splits of the held-out data (mode {mode})\n"
                 f"{procedure_label(summary)}", fontsize=11)
    return _save(fig, Path(out_dir), "guarantee_validity", rows)
