import json

import pytest
from cader.evaluate.judge.aggregate import build_report, render_markdown, write_report
from cader.evaluate.judge.questions import Question
from cader.evaluate.judge.scoring import mc_rate, traj_score


def test_traj_is_half_the_mean_of_applicable_axes():
    assert traj_score({"P1": 2, "P2": 1, "P3": 2, "P4": None, "P5": 2}) == pytest.approx(7 / 4 / 2)  # 0.875
    assert traj_score({"P1": 2, "P2": 1, "P3": 0, "P4": 1, "P5": 2}) == pytest.approx(0.6)
    assert traj_score({"P1": None}) is None


def test_mc_rate_soft_credit():
    assert mc_rate(["covered", "partial", "incorrect", "missing", "covered"]) == pytest.approx(2.5 / 5)
    assert mc_rate([]) is None


def q(qid, answer, types, difficulty, category, skills):
    return Question(question_id=qid, question="?", options=["a"] * 26, answer=answer,
                    milestones=[{"id": f"M{i + 1}", "type": t} for i, t in enumerate(types)],
                    difficulty=difficulty, category=category, categories=[category], skills=skills)


def j(qid, scores, statuses, tags, error=None):
    return {"question_id": qid, "system": "cader", "judge_model": "m", "error": error,
            "scores": None if error else scores, "traj": None if error else traj_score(scores),
            "mc_rate": None if error else mc_rate(statuses), "failure_tags": tags,
            "milestones": [{"id": f"M{i + 1}", "status": s} for i, s in enumerate(statuses)]}


@pytest.fixture
def report():
    questions = {"1": q(1, "A", ["counting", "verification"], "easy", "sports", ["counting"]),
                 "2": q(2, "B", ["counting"], "hard", "sports", ["counting", "ocr"]),
                 "3": q(3, "C", ["ocr_text_reading"], "hard", "film", ["ocr"]),
                 "4": q(4, "D", ["counting"], "easy", "film", ["counting"])}
    predictions = {"1": {"pred": "A", "error": None}, "2": {"pred": "C", "error": None},
                   "3": {"pred": None, "error": "video_unreadable: v3.mp4", "answer": "C"}}  # 4 missing
    judgments = {"1": j(1, {"P1": 2, "P2": 2, "P3": 2, "P4": None, "P5": 2}, ["covered", "partial"],
                        ["counting_error"]),
                 "2": j(2, {"P1": 2, "P2": 1, "P3": 0, "P4": 1, "P5": 1}, ["missing"],
                        ["counting_error", "premature_answer"]),
                 "3": j(3, {}, [], [], error="no valid judgment after 3 calls")}
    return build_report(questions, predictions, judgments, input_errors=["x.jsonl:3: bad"])


def test_accuracy_counts_missing_and_failed_predictions_as_wrong(report):
    assert report["n"] == 4 and report["n_correct"] == 1 and report["accuracy"] == pytest.approx(0.25)
    assert report["missing_predictions"] == [4]
    assert report["failed_predictions"] == [{"question_id": 3, "error": "video_unreadable: v3.mp4"}]
    assert report["failed_judgments"] == [{"question_id": 3, "error": "no valid judgment after 3 calls"}]
    assert report["unjudged"] == [4]


def test_trajectory_means_over_judged_questions(report):
    assert report["n_judged"] == 2
    assert report["traj"] == pytest.approx((1.0 + 0.5) / 2)           # q1: 8/4/2 = 1.0, q2: 5/5/2 = 0.5
    assert report["traj_unjudged_as_zero"] == pytest.approx(1.5 / 4)
    assert report["mc_rate"] == pytest.approx((0.75 + 0.0) / 2)
    assert report["P3"] == pytest.approx(1.0) and report["P4"] == pytest.approx(1.0)


def test_failure_tags_per_100_judged_questions(report):
    tags = report["failure_tags_per_100"]
    assert len(tags) == 21
    assert tags["counting_error"] == pytest.approx(100.0) and tags["premature_answer"] == pytest.approx(50.0)
    assert tags["ocr_error"] == 0.0


def test_coverage_by_milestone_type_and_slices(report):
    cov = report["coverage_by_milestone_type"]
    assert cov["counting"] == {"n": 2, "mc_rate": pytest.approx(0.5)}      # q1 covered, q2 missing
    assert cov["verification"] == {"n": 1, "mc_rate": pytest.approx(0.5)}  # partial
    assert "ocr_text_reading" not in cov                                   # q3's judgment failed
    easy = report["slices"]["difficulty"]["easy"]
    assert easy["n"] == 2 and easy["accuracy"] == pytest.approx(0.5) and easy["traj"] == pytest.approx(1.0)
    counting = report["slices"]["skill"]["counting"]
    assert counting["n"] == 3 and counting["n_judged"] == 2 and counting["accuracy"] == pytest.approx(1 / 3)
    assert report["slices"]["category"]["film"]["n_judged"] == 0 and report["slices"]["category"]["film"]["traj"] is None


def test_report_files_written(tmp_path, report):
    json_path, md_path = write_report(tmp_path, report)
    assert json.loads(json_path.read_text())["accuracy"] == pytest.approx(0.25)
    md = md_path.read_text()
    assert md == render_markdown(report)
    assert "| counting_error | 100.0 |" in md and "video_unreadable" in md and "### By skill" in md


def test_a_question_counts_in_every_category_it_lists():
    """The official aggregate slices by each of a question's `categories`, not only the first."""
    both = Question(question_id=1, question="?", options=["a"] * 26, answer="A", milestones=[{"id": "M1", "type": "counting"}],
                    category="sports", categories=["sports", "film"])
    one = Question(question_id=2, question="?", options=["a"] * 26, answer="B", milestones=[{"id": "M1", "type": "counting"}],
                   category="film", categories=["film"])
    report = build_report({"1": both, "2": one}, {"1": {"pred": "A", "error": None}, "2": {"pred": "A", "error": None}}, {})
    assert report["slices"]["category"]["sports"]["n"] == 1
    assert report["slices"]["category"]["film"]["n"] == 2
    assert report["slices"]["category"]["film"]["accuracy"] == pytest.approx(0.5)
