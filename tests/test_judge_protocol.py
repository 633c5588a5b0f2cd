"""--protocol paper|official: the official harness's prompt files read from a checkout (the fixture stands in for
it), its trajectories/question<N>.txt judged verbatim, its denominators, and the report naming the protocol."""

import importlib
import json
import shutil
from pathlib import Path

import pytest
from cader.dev.judge_double import LoopbackJudgeServer, synthetic_judgment
from cader.evaluate.judge.aggregate import build_report, render_markdown
from cader.evaluate.judge.params import JudgeConfigError
from cader.evaluate.judge.prompt import SYSTEM_PROMPT_WITH_SCHEMA
from cader.evaluate.judge.protocol import PAPER, make_protocol, official_protocol
from cader.evaluate.judge.providers import LOOPBACK_MODEL
from cader.evaluate.judge.questions import Question, load_questions
from cader.evaluate.judge.schema import parse_judgment

REPO = Path(__file__).resolve().parents[1]
HARNESS = REPO / "tests" / "fixtures" / "agentvidbench_harness"
RUN = HARNESS / "exp" / "singleturn_loopback-vlm_run1"
QUESTIONS = REPO / "tests" / "fixtures" / "agentvidbench" / "questions.jsonl"


@pytest.fixture(autouse=True)
def _key(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "loopback-dummy")


def entry_module():
    entry = importlib.import_module("cader.evaluate.judge.cli")
    return entry


def run_cli(out: Path, *extra: str) -> tuple[list[dict], dict, str]:
    with LoopbackJudgeServer() as server:
        entry_module().main(["--predictions", str(RUN), "--prediction_format", "agentvidbench_run",
                             "--questions", str(QUESTIONS), "--out", str(out), "--model", LOOPBACK_MODEL,
                             "--base_url", server.base_url, "--progress", "false", *extra])
    return server.requests, json.loads((out / "judge_report.json").read_text()), (out / "judge_report.md").read_text()


def test_official_prompt_comes_from_the_checkout_with_its_layout():
    protocol = official_protocol(HARNESS)
    assert protocol.system == (HARNESS / "evaluation" / "prompts" / "judge_system.md").read_text().strip()
    questions, _ = load_questions(QUESTIONS)
    text = (RUN / "inference" / "trajectories" / "question1.txt").read_text()
    system, user = protocol.prompt(questions["1"], {"question_id": 1, "trajectory_text": text, "pred": "E"}, "st")
    assert system == protocol.system and system != SYSTEM_PROMPT_WITH_SCHEMA
    assert user.startswith("QUESTION_ID: 1\nFRAMEWORK: st\nSWEEP_REQUIRED: no\n\nQUESTION:\nAt the second bus stop")
    assert "\n  A. red\n" in user and "\n  Z. ivory\n" in user
    assert "\n  M1 type=temporal_localization: Finds the second stop.\n" in user
    assert user.endswith("Check: milestone_coverage holds 2 entries, ids M1, M2, in this order.")
    # the harness's own judge text, verbatim line for line, inside the fence
    assert all(f"\n| {line}\n" in user for line in text.splitlines())
    assert make_protocol("paper") is PAPER


def test_missing_or_foreign_harness_files_are_clear_errors(tmp_path):
    with pytest.raises(JudgeConfigError, match="needs --harness_root"):
        make_protocol("official")
    with pytest.raises(JudgeConfigError, match="no such folder"):
        official_protocol(tmp_path / "nowhere")
    shutil.copytree(HARNESS / "evaluation", tmp_path / "evaluation")
    (tmp_path / "evaluation" / "prompts" / "judge_system.md").unlink()
    with pytest.raises(JudgeConfigError, match=r"lacks .*judge_system\.md"):
        official_protocol(tmp_path)
    shutil.copy(HARNESS / "evaluation" / "prompts" / "judge_system.md", tmp_path / "evaluation" / "prompts")
    module = tmp_path / "evaluation" / "judge.py"
    module.write_text('USER_TEMPLATE = "{qid} {gold_answer} {prediction}"\n')
    with pytest.raises(JudgeConfigError, match="gold_answer"):
        official_protocol(tmp_path)
    module.write_text('PROMPT = "{prediction}"\n')
    with pytest.raises(JudgeConfigError, match="no top-level USER_TEMPLATE"):
        official_protocol(tmp_path)
    with pytest.raises(SystemExit) as caught:
        entry_module().main(["--protocol", "official", "--harness_root", str(tmp_path), "--predictions", str(RUN),
                             "--questions", str(QUESTIONS), "--out", str(tmp_path / "out"), "--model", "m"])
    assert str(caught.value).startswith("config error:") and "USER_TEMPLATE" in str(caught.value)


def test_the_protocol_flag_lists_the_protocols():
    from typing import get_args

    from cader.evaluate.judge.protocol import PROTOCOLS

    assert get_args(entry_module().Protocol) == PROTOCOLS


def _judgment(qid: str) -> dict:
    return {"question_id": int(qid), "system": "cader", "judge_model": "j", "error": None, "traj": 0.5,
            "mc_rate": 0.5, "scores": {"P1": 1, "P2": 1, "P3": 1, "P4": None, "P5": 1}, "milestones": [],
            "failure_tags": []}


def test_both_protocols_on_the_same_judgments_differ_only_in_the_denominators():
    # The case: 60 questions, 27 right, one never answered and one errored: 27/60 vs 27/58.
    questions = {str(i): Question(question_id=i, question="q", options=["x", "y"], answer="A",
                                  milestones=[{"id": "M1"}], difficulty="easy" if i % 2 else None)
                 for i in range(1, 61)}
    predictions = {str(i): {"question_id": i, "pred": "A" if i <= 27 else "B", "error": None} for i in range(1, 60)}
    predictions["59"]["error"] = "decode failed"
    judgments = {k: _judgment(k) for k in predictions if k != "59"}
    paper = build_report(questions, predictions, judgments)
    official = build_report(questions, predictions, judgments, protocol="official")
    assert (paper["n"], paper["n_correct"], paper["accuracy"]) == (60, 27, 0.45)
    assert (official["n"], official["n_correct"]) == (58, 27)
    assert official["accuracy"] == pytest.approx(27 / 58) and round(official["accuracy"], 3) == 0.466
    assert official["left_out_of_accuracy"] == [59, 60] and paper["left_out_of_accuracy"] == []
    assert paper["traj"] == official["traj"] == 0.5 and paper["n_judged"] == official["n_judged"] == 58
    # a question without a difficulty is its own "unknown" slice (paper) or in none (official `_slice`)
    assert "unknown" in paper["slices"]["difficulty"] and set(official["slices"]["difficulty"]) == {"easy"}
    assert "- protocol: official" in render_markdown(official) and "left out of accuracy" in render_markdown(official)
    assert "- protocol: paper" in render_markdown(paper) and "counted wrong in accuracy" in render_markdown(paper)


def test_a_harness_run_under_both_protocols(tmp_path):
    bodies, report, md = run_cli(tmp_path / "official", "--protocol", "official", "--harness_root", str(HARNESS))
    system = (HARNESS / "evaluation" / "prompts" / "judge_system.md").read_text().strip()
    assert sorted(b["messages"][1]["content"].split("\n")[0] for b in bodies) == ["QUESTION_ID: 1", "QUESTION_ID: 3"]
    assert all(b["messages"][0]["content"] == system for b in bodies)  # question 2 errored: not judged
    assert (report["protocol"], report["n"], report["n_correct"], report["accuracy"]) == ("official", 2, 1, 0.5)
    assert report["left_out_of_accuracy"] == [2, 4] and report["n_judged"] == 2
    assert str(HARNESS.resolve()) in report["protocol_source"] and "- protocol: official" in md
    assert report["provenance"]["git_commit"] and "- provenance: commit" in md

    bodies, report, md = run_cli(tmp_path / "paper")
    assert all(b["messages"][0]["content"] == SYSTEM_PROMPT_WITH_SCHEMA for b in bodies) and len(bodies) == 3
    assert (report["protocol"], report["n"], report["n_correct"], report["accuracy"]) == ("paper", 4, 1, 0.25)
    assert report["failed_predictions"] == [{"question_id": 2, "error": "429 RESOURCE_EXHAUSTED after 3 retries"}]
    assert report["missing_predictions"] == [4] and "- protocol: paper" in md


def test_milestone_status_is_case_insensitive():
    reply = synthetic_judgment("1", ["M1", "M2"], "no")
    reply["milestone_coverage"][0]["status"] = "Covered"
    reply["milestone_coverage"][1]["status"] = " PARTIAL "
    out = parse_judgment(json.dumps(reply), ["M1", "M2"], "no")
    assert [m.status for m in out.milestone_coverage] == ["covered", "partial"]
    reply["milestone_coverage"][1]["status"] = "Kinda"
    with pytest.raises(ValueError, match="milestone_coverage"):
        parse_judgment(json.dumps(reply), ["M1", "M2"], "no")


def test_a_run_folder_question_without_its_judge_text_fails_as_in_the_official_judge(tmp_path):
    # the `ours` run has normalized trajectories but no trajectories/question<N>.txt: the official score_process
    # records missing_pred; judging cader's rendering instead would show the judge the FINAL ANSWER letter
    ours = REPO / "tests" / "fixtures" / "agentvidbench_run" / "ours_gemini-2.5-flash_run1"
    out, questions = tmp_path / "out", tmp_path / "questions.jsonl"
    questions.write_text("".join(json.dumps({
        "question_id": q, "video_path": f"videos/video{q}.mp4", "question_text": "How many raises?",
        "options": ["1", "2", "3", "4"], "answer": "C", "ecom_required": False,
        "milestones": [{"id": "M1", "type": "counting", "description": "count"}]}) + "\n" for q in (7, 12)))
    with LoopbackJudgeServer() as server, pytest.raises(SystemExit, match="every judged question failed"):
        entry_module().main(["--predictions", str(ours), "--prediction_format", "agentvidbench_run",
                             "--questions", str(questions), "--out", str(out), "--model", LOOPBACK_MODEL,
                             "--base_url", server.base_url, "--progress", "false", "--protocol", "official",
                             "--harness_root", str(HARNESS)])
    assert server.requests == []
    rows = [json.loads(line) for line in (out / "judgments.jsonl").read_text().splitlines()]
    expected = {str(ours / "inference" / "trajectories" / f"question{q}.txt") for q in (7, 12)}
    assert {row["error"].removeprefix("missing_pred: ") for row in rows} == expected
    assert all(row["error"].startswith("missing_pred: ") and row["attempts"] == 0 for row in rows)


def test_a_null_milestone_type_reads_as_the_official_block_writes_it():
    from cader.evaluate.judge.protocol import official_milestones

    block = official_milestones([{"id": "M1", "type": None, "description": "a"}, {"id": "M2", "description": "b"},
                                 {"id": "M3", "type": "counting", "description": "c"}])
    assert block == "  M1 type=None: a\n  M2 type=?: b\n  M3 type=counting: c"


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_official_requests_carry_the_harness_settings_and_drop_a_rejected_temperature(tmp_path, monkeypatch,
                                                                                      provider):
    # the harness (evaluation/judge.py): OpenAI json output, seed 42, no token limit; Anthropic max_tokens 8000 and
    # the 1M beta; both temperature 0 first and again without it when the API rejects it (the double rejects it as
    # the real APIs do for gpt-5 and Claude Opus 4.7)
    monkeypatch.setenv("ANTHROPIC_API_KEY", "loopback-dummy")
    model = "gpt-5" if provider == "openai" else "claude-opus-4-7"
    with LoopbackJudgeServer(also_answers_as=[model]) as server:
        url = server.base_url if provider == "openai" else server.anthropic_base_url
        entry_module().main(["--predictions", str(RUN), "--prediction_format", "agentvidbench_run",
                             "--questions", str(QUESTIONS), "--out", str(tmp_path / "out"), "--model", model,
                             "--base_url", url, "--progress", "false", "--protocol", "official",
                             "--harness_root", str(HARNESS), "--provider", provider, "--concurrency", "1"])
    bodies = server.requests
    if provider == "openai":  # questions 1 and 3, each tried with temperature 0 and then without
        assert [b.get("temperature") for b in bodies] == [0.0, None, 0.0, None]
    else:  # the installed anthropic SDK refuses a temperature argument itself: the request goes without it
        assert [b.get("temperature") for b in bodies] == [None, None]
    if provider == "openai":
        assert all(b["seed"] == 42 and b["response_format"] == {"type": "json_object"} for b in bodies)
        assert not any("max_tokens" in b or "max_completion_tokens" in b for b in bodies)
    else:
        assert all(b["max_tokens"] == 8000 for b in bodies)
    # FRAMEWORK is the run's experiment (its summary.json), not "cader"
    assert all("\nFRAMEWORK: singleturn\n" in b["messages"][-1]["content"] if provider == "anthropic"
               else "\nFRAMEWORK: singleturn\n" in b["messages"][1]["content"] for b in bodies)
    rows = [json.loads(line) for line in (tmp_path / "out" / "judgments.jsonl").read_text().splitlines()]
    assert all(row["error"] is None for row in rows) and len(rows) == 2


def test_the_paper_protocol_keeps_its_own_request_settings(tmp_path):
    bodies, report, _ = run_cli(tmp_path / "paper")
    assert all(b["max_tokens"] == 4096 and b["temperature"] == 0.0 and "seed" not in b for b in bodies)
    assert all("\nFRAMEWORK: singleturn\n" in b["messages"][1]["content"] for b in bodies)


def test_a_judge_run_where_every_question_fails_exits_non_zero_with_one_line_per_reason(tmp_path, capsys):
    # a model name the server does not serve: HTTP 404 for every question
    with LoopbackJudgeServer() as server, pytest.raises(SystemExit) as exited:
        entry_module().main(["--predictions", str(RUN), "--prediction_format", "agentvidbench_run",
                             "--questions", str(QUESTIONS), "--out", str(tmp_path / "out"), "--model", "no-such",
                             "--base_url", server.base_url, "--progress", "false"])
    assert str(exited.value.code).startswith("error: every judged question failed (3)")
    err = capsys.readouterr().err
    reasons = [line for line in err.splitlines() if line.startswith("judge error")]
    assert reasons == ["judge error (3 questions): HTTP 404: NotFoundError (invalid_request_error)"]


def test_a_missing_key_is_one_line_before_any_input_is_read(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    with pytest.raises(SystemExit) as exited:
        entry_module().main(["--predictions", str(tmp_path / "absent.jsonl"), "--questions", str(tmp_path / "q"),
                             "--out", str(tmp_path / "out"), "--provider", "anthropic", "--model", "claude-opus-4-7"])
    assert str(exited.value.code) == ("config error: set ANTHROPIC_API_KEY in the environment (keys are read from "
                                      "the environment only)")
    assert "Traceback" not in capsys.readouterr().err


def test_compare_usage_names_the_command_typed(capsys):
    from cader.cli.main import main

    with pytest.raises(SystemExit):
        main(["compare", "--help"])
    assert capsys.readouterr().out.startswith("usage: cader compare ")
