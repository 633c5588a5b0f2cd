"""Showing the guarantee on the held-out data itself: guarantee_validity.png/.csv (written by calibrate/fit.py).

Over many random three-way splits of the held-out samples -- fit T / select tau / test -- the run's own mode picks
tau on the select part, and the test part measures the risk the mode bounds (the exit error, or the accuracy lost
against always running Stage 2) and the exit rate. The figure shows the realised risk per split against its level
with the share of splits above it (at most about delta for a valid procedure, plus the test part's own sampling
noise, which makes a finite test part read high), and the price of the guarantee: the exit rate lost against the
oracle tau (the laxest grid tau whose risk on the test part itself is within the level, i.e. chosen with hindsight).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
from cader.calibrate.ltt import cascade_loss_counts
from cader.calibrate.margin import margins
from cader.calibrate.tau import PRECISION_GRID, TauSelection, exit_counts_at
from cader.calibrate.temperature import fit_temperature

RISKS = ("exit_error", "accuracy_loss")


def split_three(n: int, rng: np.random.Generator, fit_fraction: float | None) -> tuple[np.ndarray, ...]:
    """(fit, select, test) indices: ``fit_fraction`` of n to the fit (none when None), the rest halved."""
    perm = rng.permutation(n)
    n_fit = 0 if fit_fraction is None else int(np.floor(n * fit_fraction))
    rest = perm[n_fit:]
    half = rest.size // 2
    return perm[:n_fit], rest[:half], rest[half:]


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


def validity_runs(
    logits: np.ndarray,
    gold: np.ndarray,
    s1_correct: np.ndarray,
    s2_correct: np.ndarray | None,
    choose: Callable[[np.ndarray, np.ndarray, np.ndarray | None], TauSelection],
    risk: str,
    level: float,
    n_splits: int = 100,
    seed: int = 0,
    fit_fraction: float | None = 0.5,
    temperature: float | None = None,
) -> list[dict]:
    """One row per random split (see the module docstring). ``choose(margin, s1_correct, s2_correct)`` is the
    run's selection rule; ``temperature`` fixes T (then nothing is spent on a fit and ``fit_fraction`` is unused)."""
    if risk not in RISKS:
        raise ValueError(f"risk must be one of {RISKS}, got {risk!r}")
    s2 = np.zeros(len(gold), bool) if s2_correct is None else np.asarray(s2_correct, bool)
    rows = []
    for r in range(n_splits):
        rng = np.random.default_rng([seed, r])
        fit, sel, test = split_three(len(gold), rng, None if temperature is not None else fit_fraction)
        if sel.size == 0 or test.size == 0 or (temperature is None and fit.size == 0):
            break  # too few samples to split three ways: no rows, and no figure
        t_hat = float(temperature) if temperature is not None else fit_temperature(logits[fit], gold[fit]).temperature
        m_sel, m_test = margins(logits[sel], t_hat), margins(logits[test], t_hat)
        chosen = choose(m_sel, s1_correct[sel], s2[sel] if s2_correct is not None else None)
        value, rate = realised(m_test, s1_correct[test], s2[test], chosen.tau, risk)
        oracle = oracle_exit_rate(m_test, s1_correct[test], s2[test], risk, level)
        rows.append({"split": r, "temperature": t_hat, "tau": chosen.tau, "no_exit": chosen.no_exit,
                     "n_select": int(sel.size), "n_test": int(test.size), "risk": risk, "level": level,
                     "test_risk": value, "test_exit_rate": rate, "oracle_exit_rate": oracle,
                     "price": oracle - rate, "above_level": bool(value > level)})  # fmt: skip
        if s2_correct is not None:  # both risks, whichever one the mode bounds (joint mode bounds both)
            rows[-1]["test_exit_error"] = realised(m_test, s1_correct[test], s2[test], chosen.tau, "exit_error")[0]
            rows[-1]["test_accuracy_loss"] = realised(m_test, s1_correct[test], s2[test], chosen.tau,
                                                      "accuracy_loss")[0]  # fmt: skip
    return rows


def validity_summary(rows: list[dict], delta: float, guaranteed: bool) -> dict:
    n = len(rows)
    above = sum(r["above_level"] for r in rows)
    return {"splits": n, "risk": rows[0]["risk"] if rows else None, "level": rows[0]["level"] if rows else None,
            "delta": delta, "guaranteed": guaranteed, "above_level": above, "above_rate": above / n if n else None,
            "no_exit_splits": sum(r["no_exit"] for r in rows),
            "mean_test_exit_rate": float(np.mean([r["test_exit_rate"] for r in rows])) if n else None,
            "mean_price": float(np.mean([r["price"] for r in rows])) if n else None}  # fmt: skip


def plot_validity(out_dir: str | Path, rows: list[dict], summary: dict, mode: str) -> list[Path]:
    from cader.calibrate.plots import _save, plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(13, 5))
    risk_name = {"exit_error": "exit error (Stage-1 wrong among exits)",
                 "accuracy_loss": "accuracy lost vs always Stage 2"}[summary["risk"]]  # fmt: skip
    values = np.sort([r["test_risk"] for r in rows])
    ax1.plot(np.arange(1, values.size + 1) / max(values.size, 1), values, marker=".", ls="-", color="tab:blue",
             label=f"realised on the test part ({summary['splits']} splits, sorted)")  # fmt: skip
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
                  f"({summary['no_exit_splits']} no-exit splits)", fontsize=10)  # fmt: skip
    ax2.grid(alpha=0.3)
    ax2.legend(loc="upper left")
    fig.suptitle(f"Guarantee validity over random fit/select/test splits of the held-out data (mode {mode})")
    return _save(fig, Path(out_dir), "guarantee_validity", rows)
