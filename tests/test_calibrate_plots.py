"""Figures that cannot hide the point: every tau plot shows the chosen tau and the paper's, risk-coverage shows the
whole bound curve, equal-mass bin labels tell their ends apart — on edge cases (tau near 0, near 1, no exit)."""

import numpy as np
import pytest
from cader.calibrate import plots
from cader.calibrate.margin import PAPER_TAU
from cader.calibrate.tau import NO_EXIT_TAU


@pytest.fixture
def drawn(monkeypatch):
    """Axis limits of every figure the plot functions save, by figure name."""
    seen = {}
    original = plots._save

    def record(fig, out_dir, name, rows):
        seen[name] = [(ax.get_xlim(), ax.get_ylim(), [line.get_xdata() for line in ax.get_lines()],
                       [line.get_ydata() for line in ax.get_lines()]) for ax in fig.axes]
        return original(fig, out_dir, name, rows)

    monkeypatch.setattr(plots, "_save", record)
    return seen


def _data(n=200, seed=0):
    rng = np.random.default_rng(seed)
    margin = rng.uniform(0, 1, n) ** 3
    correct = rng.uniform(0, 1, n) < 0.3 + 0.7 * margin
    return margin, correct


@pytest.mark.parametrize("tau", [0.002, 1e-7, 0.5, 0.97, 1 - 1e-8, NO_EXIT_TAU])
def test_tau_plots_show_the_chosen_and_the_paper_tau(tmp_path, drawn, tau):
    margin, correct = _data()
    chosen = {"tau": tau, "label": f"chosen tau = {tau}", "exit_rate": 0.5, "exit_accuracy": 0.9}
    paper = {"label": "paper", "exit_rate": 0.2, "exit_accuracy": 0.95}
    plots.plot_tau_sweep(tmp_path, margin, correct, chosen, paper, stage2_correct=correct)
    plots.plot_per_benchmark(tmp_path, margin, correct, np.array(["a", "b"] * 100), tau)
    for name in ("tau_sweep", "per_benchmark_tau"):
        for (x_lo, x_hi), _, lines, _ in drawn[name]:
            assert x_lo <= PAPER_TAU <= x_hi
            if 0 < tau < 1:
                assert x_lo <= tau <= x_hi, (name, tau, x_lo, x_hi)
                assert any(np.allclose(np.asarray(x, float), tau) for x in lines if len(x) == 2)  # the axvline
            else:  # no exit: drawn at the right edge, not off the plot
                assert any(np.allclose(np.asarray(x, float), x_hi) for x in lines if len(x) == 2)


def test_tau_axis_helpers_by_hand():
    assert plots.tau_axis_limits(0.5) == (0.01, plots.TAU_GRID[-1])
    lo, hi = plots.tau_axis_limits(0.002)
    assert lo == pytest.approx(0.001) and hi == plots.TAU_GRID[-1]
    lo, hi = plots.tau_axis_limits(1 - 1e-8)
    assert hi == pytest.approx(1 - 0.5e-8) and lo == 0.01
    assert plots.shown_tau(NO_EXIT_TAU) == plots.tau_axis_limits(NO_EXIT_TAU)[1]
    assert plots.shown_tau(0.0) == plots.tau_axis_limits(0.0)[0]
    grid = plots.tau_grid(0.002)
    assert 0.002 in grid and PAPER_TAU in grid and np.all(np.diff(grid) > 0)


@pytest.mark.parametrize("n_correct_top", [0, 5])
def test_risk_coverage_keeps_the_whole_bound_curve(tmp_path, drawn, n_correct_top):
    margin = np.linspace(1, 0, 40)
    correct = np.r_[np.ones(n_correct_top, bool), np.zeros(40 - n_correct_top, bool)]  # errors from the top
    chosen = {"tau": 0.99, "label": "chosen", "exit_rate": 0.1, "exit_accuracy": 0.5}
    plots.plot_risk_coverage(tmp_path, margin, correct, 0.1, 0.05, chosen, {"label": "paper"})
    ((_, (y_lo, y_hi), _, ys),) = drawn["risk_coverage"]
    risk, upper = np.asarray(ys[0], float), np.asarray(ys[1], float)  # drawn first: risk, then its upper bound
    assert upper.max() > 0.9  # few exits, mostly wrong: the bound starts near 1
    assert y_lo <= 0 and y_hi >= upper.max() and y_hi >= risk.max()  # nothing of either curve is cut off


def test_equal_mass_labels_tell_close_ends_apart():
    assert plots.range_label(0.00212, 0.00214) == "0.00212–0.00214"
    assert plots.range_label(0.1, 0.25) == "0.1–0.25"
    assert plots.range_label(0.5, 0.5) == "≈0.5"
    margin = np.r_[np.full(10, 0.00211), np.full(10, 0.00213), np.linspace(0.1, 0.9, 20)]
    labels = [row["bin"] for row in plots.equal_mass_table(margin, np.ones(40, bool), n_bins=4)]
    assert len(set(labels)) == len(labels)
