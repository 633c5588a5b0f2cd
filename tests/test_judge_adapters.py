"""What the judge may see: only the trajectory fields the protocol names (AgentVidBench App. D.1). Another
framework's output is mapped by an explicit adapter; gold keys in a foreign file never reach the request body."""

import importlib
import json
import shutil
from pathlib import Path

import pytest
from cader.dev.judge_double import LoopbackJudgeServer
from cader.evaluate.judge.adapters import (
    load_agentvidbench_run,
    load_prediction_source,
    normalized_trajectory_record,
)
from cader.evaluate.judge.pipeline import read_judgments
from cader.evaluate.judge.providers import LOOPBACK_MODEL

REPO = Path(__file__).resolve().parents[1]
RUN = REPO / "tests" / "fixtures" / "agentvidbench_run" / "ours_gemini-2.5-flash_run1"
GOLD = "GOLD-7f3a"  # every gold value below carries this marker
# Gold under the names other frameworks use, at the top of a record and inside its steps.
GOLD_FIELDS = {"correct_answer": f"C {GOLD}", "gt_letter": f"C{GOLD}", "answer_letter": f"C{GOLD}",
               "solution": f"count the cards {GOLD}", "gold": GOLD, "answer_explanation": f"because {GOLD}",
               "milestones": [{"id": "M1", "description": f"foreign milestone {GOLD}"}],
               "accuracy": {"gold": f"C{GOLD}", "correct": True}, "reference_trajectory": [f"step {GOLD}"]}


@pytest.fixture(autouse=True)
def _key(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "loopback-dummy")


def questions_file(root: Path, ids) -> Path:
    path = root / "questions.jsonl"
    rows = [{"question_id": qid, "video_path": f"videos/video{qid}.mp4", "question_text": f"Question {qid}: how many cards?",
             "options": [str(i) for i in range(26)], "answer": "C", "ecom_required": True,
             "milestones": [{"id": "M1", "type": "counting", "description": "count the blue-card raises"}]}
            for qid in ids]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def run_cli(root: Path, predictions: Path, fmt: str, ids) -> tuple[list[dict], Path]:
    entry = importlib.import_module("cader.evaluate.judge.cli")
    out = root / "out"
    with LoopbackJudgeServer() as server:
        entry.main(["--predictions", str(predictions), "--prediction_format", fmt,
                    "--questions", str(questions_file(root, ids)), "--out", str(out), "--model", LOOPBACK_MODEL,
                    "--base_url", server.base_url, "--progress", "false", "--backoff_base", "0.001"])
    return server.requests, out


def assert_no_gold(bodies: list[dict]) -> None:
    assert bodies
    for body in bodies:
        wire = json.dumps(body)
        assert GOLD not in wire
        for name in ("correct_answer", "gt_letter", "answer_letter", "solution", "answer_explanation"):
            assert name not in wire


def test_foreign_prediction_file_gold_keys_never_reach_the_request_body(tmp_path):
    # Another framework's predictions.jsonl read as-is: its unknown keys are not rendered, at any depth.
    rows = [{"question_id": qid, "pred": "C", "response": f"I counted three raises for question {qid}.",
             **GOLD_FIELDS,
             "trajectory": [{"phase": "tool_call", "tool": "zoom", "arguments": {"t": 10}, **GOLD_FIELDS},
                            {"phase": "tool_result", "tool": "zoom", "result_text": "three raises", **GOLD_FIELDS}],
             "stage2": {"steps": [{"phase": "answer", "pred": "C", "raw_output": "C", **GOLD_FIELDS}],
                        **GOLD_FIELDS}} for qid in (1, 2)]
    predictions = tmp_path / "foreign.jsonl"
    predictions.write_text("".join(json.dumps(r) + "\n" for r in rows))
    bodies, out = run_cli(tmp_path, predictions, "cader", [1, 2])
    assert_no_gold(bodies)
    user = bodies[0]["messages"][1]["content"]
    assert "I counted three raises" in user and "three raises" in user and '"t": 10' in user
    assert all(r["error"] is None for r in read_judgments(out / "judgments.jsonl").values())


def test_official_run_folder_through_its_adapter_with_gold_injected(tmp_path):
    run = tmp_path / "run"
    shutil.copytree(RUN, run)
    path = run / "inference" / "outputs" / "question7.normalized.json"
    trajectory = json.loads(path.read_text())
    trajectory.update(GOLD_FIELDS)
    for step in trajectory["steps"]:
        step.update(GOLD_FIELDS)
        step["data"].update(GOLD_FIELDS)
    path.write_text(json.dumps(trajectory))
    bodies, out = run_cli(tmp_path, run, "agentvidbench_run", [7, 12])
    assert_no_gold(bodies)
    user = next(b["messages"][1]["content"] for b in bodies if "QUESTION_ID: 7" in b["messages"][1]["content"])
    order = [user.index(s) for s in ("[thinking]", "[tool_call]", "analyze_video", "Music starts at [1:52]",
                                     "[answer]", "FINAL ANSWER: D")]
    assert order == sorted(order)
    assert "tokens_used" not in user and "5120" not in user  # bookkeeping the protocol does not name
    report = json.loads((out / "judge_report.json").read_text())
    assert report["n_judged"] == 2 and report["input_errors"] == []


def test_adapter_maps_named_fields_only_and_takes_the_extracted_letter():
    records, errors = load_agentvidbench_run(RUN)
    assert errors == [] and sorted(records) == ["12", "7"]
    seven = records["7"]
    # and the path of the judge text the run lacks (--protocol official fails the question on it)
    assert set(seven) == {"question_id", "trajectory", "pred", "trajectory_text_missing"} and seven["pred"] == "D"
    assert [s["phase"] for s in seven["trajectory"]] == ["thinking", "tool_call", "tool_result", "thinking", "answer"]
    assert seven["trajectory"][2] == {"phase": "tool_result", "tool": "analyze_video", "success": True,
                                      "result_text": json.loads((RUN / "inference" / "outputs" /
                                                                 "question7.normalized.json").read_text())
                                      ["steps"][2]["data"]["result_text"],
                                      "fps": 2, "time_range": ["0:00", "2:30"], "coverage": "rich"}
    assert records["12"]["pred"] == "B"  # no letters file yet: the answer step's letter


def test_letters_file_wins_and_a_null_majority_is_no_answer():
    trajectory = {"question_id": 3, "steps": [{"phase": "answer", "data": {"letter": "A"}}]}
    assert normalized_trajectory_record(trajectory, {"majority_letter": "F"})["pred"] == "F"
    assert normalized_trajectory_record(trajectory, {"majority_letter": None})["pred"] is None
    assert normalized_trajectory_record({"qid": 4, "steps": []})["question_id"] == 4  # schema 1.0 key


def test_bad_files_are_errors_naming_the_file(tmp_path):
    outputs = tmp_path / "inference" / "outputs"
    outputs.mkdir(parents=True)
    (outputs / "question1.normalized.json").write_text("{torn")
    (outputs / "question2.normalized.json").write_text(json.dumps({"steps": []}))
    (outputs / "question3.normalized.json").write_text(json.dumps({"question_id": 3, "steps": [{"data": {}}]}))
    (outputs / "question4.json").write_text("{}")  # the native log, not the normalized trajectory: not read
    records, errors = load_prediction_source(tmp_path, "agentvidbench_run")
    assert records == {} and len(errors) == 3
    assert [str(e).split(":")[0] for e in errors] == [str(outputs / f"question{i}.normalized.json")
                                                        for i in (1, 2, 3)]
    assert load_agentvidbench_run(tmp_path / "missing")[1][0].args[0].endswith(
        "question<N>.normalized.json from the AgentVidBench harness)")
    with pytest.raises(ValueError, match="unknown prediction format"):
        load_prediction_source(tmp_path, "lmms_eval")
