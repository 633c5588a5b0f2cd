import json

from cader.contracts.judgments import FAILURE_TAGS
from cader.dev.judge_inputs import synthetic_benchmark
from cader.evaluate.judge.prompt import (
    SYSTEM_PROMPT,
    SYSTEM_PROMPT_WITH_SCHEMA,
    build_user_prompt,
    prompt_hash,
    sweep_required,
)
from cader.evaluate.judge.questions import load_questions
from cader.evaluate.judge.render import render_prediction

GOLD = "GOLDMARKER"


def cader_record():
    return {"question_id": 3, "answer": GOLD, "correct": GOLD, "pred": "C", "error": None,
            "stage1": {"logits": [1.0, 2.0], "pred": "B", "margin": 0.41, "n_frames": 256, "fps": 1.0,
                       "answer": GOLD},
            "route": "stage2",
            "stage2": {"pred": "C", "accepted": [90.0, 109.0], "cycles": 2, "fallback": None, "gold": GOLD,
                       "steps": [{"phase": "propose", "window": [80, 120], "raw_output": "man says one more at 1:49",
                                  "parsed": {"window": [80, 120], "how": "keyed", "gold_letter": GOLD}},
                                 {"phase": "verify", "verdict": "Yes", "answer": GOLD, "is_correct": GOLD},
                                 {"phase": "answer", "pred": "C", "detail": {"ground_truth": GOLD, "k": 1}}]},
            "meta": {"answer": GOLD}, "ground_truth": GOLD}


def test_cader_trajectory_rendered_in_order_without_gold():
    text = render_prediction(cader_record())
    assert GOLD not in text
    assert "correct" not in text and "answer:" not in text.replace("FINAL ANSWER:", "")
    order = [text.index(s) for s in ("stage1", "[route]", "[propose]", "[verify]", "[answer]", "FINAL ANSWER: C")]
    assert order == sorted(order)
    assert "man says one more at 1:49" in text and "256" in text and "0.41" in text


def test_single_turn_and_agent_steps():
    single = render_prediction({"question_id": 1, "answer": GOLD, "correct": False, "pred": "D",
                                "response": "I watched the video.\nThe answer is D."})
    assert "The answer is D." in single and single.endswith("FINAL ANSWER: D") and GOLD not in single
    log = render_prediction({"question_id": 1, "answer": GOLD, "pred": None, "trajectory": [
        {"phase": "tool_call", "tool": "crop", "arguments": {"t": 12}, "gt_letter": GOLD},
        {"phase": "tool_result", "tool": "crop", "result_text": "a red car", "solution": GOLD},
        {"phase": "made_up_phase", "text": "still shown", "correct_answer": GOLD}, "a plain log line"]})
    assert log.index("[tool_call]") < log.index("a red car") < log.index("still shown") < log.index("plain log")
    assert '"t": 12' in log and "FINAL ANSWER: (none)" in log
    assert GOLD not in log and "gt_letter" not in log and "solution" not in log


def test_only_allow_listed_fields_reach_the_text():
    # Keys the protocol does not name are not shown, whatever they are called: no deny-list to outguess.
    record = {"question_id": 9, "pred": "B", "response": "I saw two cars.", "rationale_from_gold": "X1",
              "milestones": [{"id": "M1", "description": "X2"}], "meta": {"note": "X3"}, "stage1": {
                  "pred": "A", "margin": 0.2, "logits": [1.5, 0.25], "temperature": 1.7, "reference": "X4"},
              "stage2": {"pred": "B", "cycles": 1, "reviewer": "X5", "steps": [
                  {"phase": "verify", "window": [1, 2], "p_yes": 0.9, "expected": "X6"}]}}
    text = render_prediction(record)
    assert not [m for m in ("X1", "X2", "X3", "X4", "X5", "X6", "1.7", "[1.5") if m in text]
    assert "I saw two cars." in text and "p_yes: 0.9" in text and "confidence_margin: 0.2" in text


def test_errored_prediction_is_rendered_with_its_error():
    text = render_prediction({"question_id": 1, "answer": GOLD, "pred": None, "error": "video_unreadable: x.mp4"})
    assert "RUN ERROR: video_unreadable: x.mp4" in text and "(no intermediate steps recorded)" in text


def test_sweep_flag_mapping():
    assert (sweep_required(True), sweep_required(False), sweep_required(None)) == ("yes", "no", "unknown")


def test_user_prompt_fields_and_no_gold_anywhere():
    questions, predictions = synthetic_benchmark(5, seed=1)
    q, p = questions[0], predictions[0]
    q = {**q, "answer": "Q", "ecom_required": False}
    user = build_user_prompt(qid=q["question_id"], framework="cader", ecom_required=q["ecom_required"],
                             question=q["question_text"], options=q["options"], milestones=q["milestones"],
                             trajectory=render_prediction(p))
    ids = [m["id"] for m in q["milestones"]]
    assert user.startswith(f"QUESTION_ID: {q['question_id']}\nFRAMEWORK: cader\nSWEEP_REQUIRED: no\n")
    assert "A. 0\n" in user and "Z. 25" in user
    assert f"exactly {len(ids)} entries with IDs {', '.join(ids)} in this order." in user
    assert "GOLD" not in user and '"answer"' not in user and "correct" not in user.replace("corrected", "")


def test_system_prompt_follows_the_official_prompt_where_it_is_more_specific():
    # The official judge prompt spells the audio tag out and gives the fallback rule for SWEEP_REQUIRED unknown.
    assert "\naudio_transcript_error\n" in SYSTEM_PROMPT and "audio_tranerror" not in SYSTEM_PROMPT
    assert "If unknown, classify the question yourself" in SYSTEM_PROMPT
    assert "FALLBACK SWEEP=YES because" in SYSTEM_PROMPT and "FALLBACK SWEEP=NO" in SYSTEM_PROMPT


def test_system_prompt_lists_every_tag_and_the_schema_keys():
    for tag in FAILURE_TAGS:
        assert f"\n{tag}\n" in SYSTEM_PROMPT
    for key in ("task_understanding", "gt_evidence_coverage", "evidence_grounding", "evidence_completeness",
                "reasoning_faithfulness", "milestone_coverage", "evidence_in_prediction", "failure_tags"):
        assert key in SYSTEM_PROMPT_WITH_SCHEMA
    assert "does NOT score answer correctness" in SYSTEM_PROMPT


def test_prompt_hash_depends_on_the_text_only():
    assert prompt_hash("s", "u") != prompt_hash("s", "u2") != prompt_hash("s2", "u2")
    assert prompt_hash("s", "u") == prompt_hash("s", "u")
    assert prompt_hash("su", "") != prompt_hash("s", "u")  # parts are delimited


def test_question_file_errors_name_file_and_line(tmp_path):
    questions, _ = synthetic_benchmark(3, seed=0)
    bad = dict(questions[1])
    del bad["milestones"]
    path = tmp_path / "questions.jsonl"
    lines = [json.dumps(questions[0]), "{not json", json.dumps(bad), json.dumps(questions[0]),
             json.dumps({**questions[2], "ecom_required": "yes"})]
    path.write_text("\n".join(lines) + "\n")
    loaded, errors = load_questions(path)
    assert list(loaded) == [str(questions[0]["question_id"])]
    messages = [str(e) for e in errors]
    assert len(messages) == 4
    assert messages[0].startswith(f"{path}:2: invalid JSON")
    assert any(m.startswith(f"{path}:3:") and "milestones" in m for m in messages)
    assert any(m.startswith(f"{path}:4:") and "duplicate" in m for m in messages)
    assert any(m.startswith(f"{path}:5:") and "ecom_required" in m for m in messages)
