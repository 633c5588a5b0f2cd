"""Each calibration figure's numbers, read back from the CSV written beside it: counts per bin add up to n, every
interval holds its point, the tau sweep's final accuracy matches a hand count (and its absence is said on the
figure), and the validity CSV agrees with its summary."""

import csv
import math

import numpy as np
import pytest
from cader.calibrate import plots
from cader.calibrate.pipeline import Rule
from cader.calibrate.validity import SplitDraw, plot_validity, validity_runs, validity_summary
from cader.dev.calibration_rows import synthetic_logits


def read_csv(path):
    with open(path, newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def num(x):
    return float("nan") if x in ("", "nan") else float(x)


@pytest.fixture
def texts(monkeypatch):
    """The text artists of every figure the plot functions save, by figure name."""
    seen = {}
    original = plots._save

    def record(fig, out_dir, name, rows):
        legends = [ax.get_legend() for ax in fig.axes if ax.get_legend() is not None]
        seen[name] = [t.get_text() for ax in fig.axes for t in ax.texts] + [
            t.get_text() for legend in legends for t in legend.get_texts()]
        return original(fig, out_dir, name, rows)

    monkeypatch.setattr(plots, "_save", record)
    return seen


def _data(n=300, seed=0):
    rng = np.random.default_rng(seed)
    margin = rng.uniform(0, 1, n) ** 0.3  # many margins near 1, a few small: uneven bins
    correct = rng.uniform(0, 1, n) < 0.3 + 0.7 * margin
    return margin, correct


def _assert_interval_holds_point(row):
    n, acc, lo, hi = int(row["n"]), num(row["accuracy"]), num(row["cp95_lo"]), num(row["cp95_hi"])
    if n == 0:
        assert math.isnan(acc) and math.isnan(lo) and math.isnan(hi)
    else:
        assert 0.0 <= lo <= acc <= hi <= 1.0 and hi - lo > 0, row
        assert acc == pytest.approx(int(row["correct"]) / n)


def test_accuracy_vs_margin_csv_counts_add_up_and_intervals_hold(tmp_path, texts):
    margin, correct = _data()
    bench = np.array(["a", "b", "b"] * 100)
    plots.plot_accuracy_vs_margin(tmp_path, margin, correct, bench, 1.5)
    rows = read_csv(tmp_path / "accuracy_vs_margin.csv")
    sizes = {"all": 300, "a": 100, "b": 200, "all (equal-mass)": 300}
    for group, n in sizes.items():
        group_rows = [r for r in rows if r["group"] == group]
        assert group_rows and sum(int(r["n"]) for r in group_rows) == n, group
    paper = [r for r in rows if r["group"] == "all"]
    assert [r["bin"] for r in paper] == [b[0] for b in plots.PAPER_MARGIN_BINS]
    assert int(paper[0]["n"]) == int(np.sum(margin < 0.9))
    for row in rows:
        _assert_interval_holds_point(row)
    # every non-empty paper bin says its n on the plot itself (one per group: all, a, b)
    drawn = texts["accuracy_vs_margin"]
    for row in (r for r in rows if r["group"] in ("all", "a", "b") and int(r["n"])):
        assert f"n={row['n']}" in drawn


def test_reliability_csv_has_counts_and_clopper_pearson_intervals(tmp_path, texts):
    margin, correct = _data()
    conf = {"T = 1": 0.25 + 0.75 * margin, "T = 2": 0.25 + 0.5 * margin}
    plots.plot_reliability(tmp_path, conf, correct, n_bins=15)
    rows = read_csv(tmp_path / "reliability.csv")
    for label, c in conf.items():
        mine = [r for r in rows if r["temperature"] == label]
        assert len(mine) == 15 and sum(int(r["n"]) for r in mine) == correct.size
        assert sum(int(r["correct"]) for r in mine) == int(correct.sum())
        # hand count of one bin: [0.6, 0.6667) holds the confidences in it
        b = 9
        inside = (c >= 9 / 15) & (c < 10 / 15)
        assert int(mine[b]["n"]) == inside.sum() and int(mine[b]["correct"]) == correct[inside].sum()
        for row in mine:
            _assert_interval_holds_point(row)
    assert any("Clopper" in t for t in texts["reliability"])  # the bars are named in the legend
    assert {str(int(r["n"])) for r in rows if int(r["n"])} <= set(texts["reliability"])


def test_tau_sweep_final_accuracy_by_hand_and_its_absence_said(tmp_path, texts):
    margin, correct = _data()
    rng = np.random.default_rng(1)
    s2 = rng.uniform(0, 1, margin.size) < 0.6
    known = rng.uniform(0, 1, margin.size) < 0.8  # a fifth of the samples have no Stage-2 outcome
    chosen = {"tau": 0.9, "label": "chosen", "exit_rate": 0.5, "exit_accuracy": 0.9}
    plots.plot_tau_sweep(tmp_path, margin, correct, chosen, {"label": "paper"}, stage2_correct=s2, stage2_known=known)
    rows = read_csv(tmp_path / "tau_sweep.csv")
    row = min(rows, key=lambda r: abs(float(r["tau"]) - 0.9))
    tau = float(row["tau"])
    exits = margin[known] >= tau
    expected = np.mean(np.where(exits, correct[known], s2[known]))
    assert num(row["final_accuracy"]) == pytest.approx(expected)
    assert int(row["n_final"]) == known.sum() and int(row["n_exits"]) == np.sum(margin >= tau)
    assert any(f"on the {known.sum()} of {margin.size}" in t for t in texts["tau_sweep"])
    plots.plot_tau_sweep(tmp_path, margin, correct, chosen, {"label": "paper"}, stage2_correct=None)
    assert "final_accuracy" not in read_csv(tmp_path / "tau_sweep.csv")[0]
    assert any("no final-accuracy curve" in t for t in texts["tau_sweep"])


def test_guarantee_validity_csv_matches_its_summary(tmp_path):
    rng = np.random.default_rng(0)
    z, gold = synthetic_logits(600, 4, 1.5, rng)
    s1 = z.argmax(axis=1) == gold
    rule = Rule("precision", alpha=0.1, delta=0.1, min_exits=20)
    rows = validity_runs(z, gold, s1, None, rule.choose, "exit_error", 0.1, SplitDraw(n_splits=30, seed=3))
    summary = validity_summary(rows, 0.1, guaranteed=True)
    plot_validity(tmp_path, rows, summary, "precision")
    back = read_csv(tmp_path / "guarantee_validity.csv")
    assert len(back) == summary["splits"] == 30
    assert sum(r["above_level"] == "True" for r in back) == summary["above_level"]
    for r in back:
        assert (num(r["test_risk"]) > 0.1) == (r["above_level"] == "True")
        assert num(r["price"]) == pytest.approx(num(r["oracle_exit_rate"]) - num(r["test_exit_rate"]))
        assert int(r["n_select"]) + int(r["n_test"]) == 300  # the other half fitted T
    assert summary["mean_price"] == pytest.approx(np.mean([num(r["price"]) for r in back]))
    assert (tmp_path / "guarantee_validity.png").stat().st_size > 10_000
    # without videos: question splits and the question-counting bound, said in the CSV and the summary
    assert {r["split_by"] for r in back} == {"question"} and {r["cluster_bound"] for r in back} == {"False"}
    assert (summary["split_by"], summary["cluster_bound"]) == ("question", False)


def test_guarantee_validity_says_its_split_and_bound(tmp_path, monkeypatch):
    rng = np.random.default_rng(1)
    z, gold = synthetic_logits(400, 4, 1.5, rng)
    s1 = z.argmax(axis=1) == gold
    videos = np.repeat(np.arange(100), 4)
    titles = {}
    original = plots._save

    def record(fig, out_dir, name, rows):
        titles[name] = fig._suptitle.get_text()
        return original(fig, out_dir, name, rows)

    monkeypatch.setattr(plots, "_save", record)
    rule = Rule("precision", alpha=0.1, delta=0.1, min_exits=20)
    video_words = "split by video (each video's questions on one side); bound on effective counts over the select"
    question_words = "split by question; bound counting questions as independent trials"
    for split_by, bound, words in (("video", True, video_words), ("question", False, question_words)):
        rows = validity_runs(z, gold, s1, None, rule.choose, "exit_error", 0.1,
                             SplitDraw(n_splits=5, split_by=split_by, cluster_bound=bound), clusters=videos)
        summary = validity_summary(rows, 0.1, guaranteed=True)
        plot_validity(tmp_path, rows, summary, "precision")
        back = read_csv(tmp_path / "guarantee_validity.csv")
        assert {(r["split_by"], r["cluster_bound"]) for r in back} == {(split_by, str(bound))}
        assert all((r["videos_in_two_parts"] == "0") == (split_by == "video") for r in back)
        assert words in titles["guarantee_validity"]
