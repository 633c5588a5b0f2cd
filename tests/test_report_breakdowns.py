"""report.json/md: the official scorers' breakdowns, statistics clustered by video, exact intervals, provenance.

The breakdown tests run on records built from the benchmark fixtures through the real loaders and the runner's
record builder, so they fail if a loader stops carrying a field the breakdown needs."""

import json

import pytest
from cader.evaluate.benchmarks import load_benchmark
from cader.evaluate.report import build_report, compare_runs, render_markdown, write_report
from cader.evaluate.report_stats import MISSING
from cader.evaluate.runner import base_record

FIXTURES = "tests/fixtures"


def scored(records, right):
    """The records with a final answer: right where `right(i)`, else a wrong letter."""
    out = []
    for i, r in enumerate(records):
        pred = r["answer"] if right(i) else next(x for x in r["letters"] if x != r["answer"])
        out.append({**r, "stage1": None, "route": None, "stage2": None, "pred": pred, "correct": pred == r["answer"],
                    "cost": {}, "error": None})
    return out


def from_fixture(name, right=lambda i: i % 2 == 0):
    samples, errors = load_benchmark(name, FIXTURES)
    assert samples and not errors
    return scored([base_record(s) for s in samples], right)


def rec(sid, correct, *, video, bench="lvbench", meta=None):
    return {"benchmark": bench, "sample_id": str(sid), "video": video, "answer": "A", "letters": ["A", "B"],
            "meta": meta or {}, "stage1": None, "route": None, "stage2": None, "pred": "A" if correct else "B",
            "correct": correct, "cost": {}, "error": None}


def test_lvbench_counts_a_question_under_every_type_it_lists():
    records = from_fixture("lvbench")
    by_type = build_report(records)["breakdowns"]["lvbench"]["question_type"]
    listed = [t for r in records for t in r["meta"]["question_type"]]
    assert len(listed) > len(records)  # the fixture has a question with two types
    assert {t: row["n"] for t, row in by_type.items()} == {t: listed.count(t) for t in set(listed)}
    for t, row in by_type.items():
        members = [r for r in records if t in r["meta"]["question_type"]]
        assert row["correct"] == sum(r["correct"] for r in members)
        assert row["n_videos"] == len({r["video"] for r in members})


def test_lvbench_hand_built_types_and_a_question_without_one():
    records = [rec(1, True, video="v1", meta={"question_type": ["a", "b"]}),
               rec(2, False, video="v1", meta={"question_type": ["a"]}),
               rec(3, True, video="v2", meta={"question_type": []})]
    by_type = build_report(records)["breakdowns"]["lvbench"]["question_type"]
    assert {t: (row["n"], row["correct"], row["accuracy"]) for t, row in by_type.items()} == {
        "a": (2, 1, 50.0), "b": (1, 1, 100.0), MISSING: (1, 1, 100.0)}
    assert by_type["a"]["ci95_exact"] == [1.26, 98.74] and by_type["b"]["se_clustered"] is None


def test_longvideobench_by_duration_group_in_numeric_order_and_by_question_category():
    records = from_fixture("longvideobench_val")
    tables = build_report(records)["breakdowns"]["longvideobench_val"]
    assert set(tables) == {"duration_group", "question_category"}
    groups = sorted({str(r["meta"]["duration_group"]) for r in records}, key=float)
    assert list(tables["duration_group"]) == groups
    categories = {r["meta"]["task_type"] for r in records}
    assert set(tables["question_category"]) == categories
    assert sum(row["n"] for row in tables["question_category"].values()) == len(records)
    numeric = build_report([rec(i, True, video=f"v{i}", bench="longvideobench_val", meta={"duration_group": g})
                            for i, g in enumerate([3600, 15, 600, 60])])
    assert list(numeric["breakdowns"]["longvideobench_val"]["duration_group"]) == ["15", "60", "600", "3600"]


def test_videomme_by_duration_domain_sub_category_and_task_type():
    records = from_fixture("videomme_long", right=lambda i: i != 1)
    tables = build_report(records)["breakdowns"]["videomme_long"]
    assert list(tables) == ["duration", "domain", "sub_category", "task_type"]
    assert tables["duration"]["long"]["n"] == len(records)
    for dim, key in (("domain", "domain"), ("sub_category", "sub_category"), ("task_type", "task_type")):
        expected = {}
        for r in records:
            n, k = expected.get(r["meta"][key], (0, 0))
            expected[r["meta"][key]] = (n + 1, k + r["correct"])
        assert {g: (row["n"], row["correct"]) for g, row in tables[dim].items()} == expected


def test_headline_statistics_cluster_questions_by_video():
    # two videos, three questions each, all right on one and all wrong on the other:
    # s^2/n = 0.3/6 = 0.05 (naive SE 22.36 %); each video adds (1.5^2 - 0.75) / 36, so SE^2 = 0.05 + 3/36
    records = [rec(i, i < 3, video="v1" if i < 3 else "v2") for i in range(6)]
    summary = build_report(records)["benchmarks"]["lvbench"]
    assert summary["n_videos"] == 2 and summary["questions_without_video"] == 0
    assert summary["accuracy_se"] == 22.36
    assert summary["accuracy_se_clustered"] == pytest.approx(100 * (0.05 + 3 / 36) ** 0.5, abs=0.005)
    assert summary["accuracy_ci95_exact"] == [11.81, 88.19]  # 3/6: Beta(3, 4) and Beta(4, 3) quantiles
    # resampling two videos gives 0, 50 or 100 %
    assert set(summary["accuracy_ci95_video_bootstrap"]) <= {0.0, 50.0, 100.0}
    md = render_markdown(build_report(records, provenance={}))
    assert "| lvbench | 6 | 50.0 | [11.81, 88.19] | 22.36 / 36.51 | 2 | [0.0, 100.0] |" in md


def test_the_same_video_in_two_benchmarks_is_two_clusters_and_missing_videos_are_counted():
    records = [rec(1, True, video="v"), rec(2, False, video="v", bench="videomme_long"), rec(3, True, video=None)]
    report = build_report(records)
    assert report["overall"]["n_videos"] == 3 and report["overall"]["questions_without_video"] == 1


def test_comparison_resamples_videos():
    mine = [rec(i, i % 3 != 0, video=f"v{i // 4}") for i in range(12)]
    theirs = [rec(i, i % 2 == 0, video=f"v{i // 4}") for i in range(12)]
    comparison = compare_runs(mine, theirs)
    assert comparison["n"] == 12 and comparison["n_videos"] == 3
    assert comparison["bootstrap"]["resampled"] == "clusters" and comparison["bootstrap"]["n_clusters"] == 3


def test_report_json_and_md_carry_the_provenance(tmp_path):
    write_report(tmp_path, [rec(1, True, video="v")])
    saved = json.loads((tmp_path / "report.json").read_text())
    prov = saved["provenance"]
    assert set(prov) >= {"git_commit", "git_dirty", "packages", "python", "date", "command"}
    assert prov["packages"]["numpy"] and prov["date"].endswith("+00:00")
    md = (tmp_path / "report.md").read_text()
    commit = (prov["git_commit"] or "unknown")[:12]
    assert f"Code `{commit}` (uncommitted changes: " in md and f"written {prov['date']}" in md
    assert f"numpy {prov['packages']['numpy']}" in md and f"torch {prov['packages']['torch']}" in md
