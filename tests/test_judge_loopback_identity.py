"""A loopback judge can never be reported under a real model's name: it answers only as itself, and every summary
that shows its numbers (judge_report.md/json, the CLI, the quickstart's judge step and SUMMARY.md) says so."""

import importlib.util
import json
import os
import subprocess
from pathlib import Path

import pytest
from cader.dev.judge_double import LoopbackJudgeServer
from cader.dev.judge_inputs import synthetic_benchmark
from cader.evaluate.judge.aggregate import NOT_A_REAL_JUDGE
from cader.evaluate.judge.pipeline import read_judgments
from cader.evaluate.judge.providers import LOOPBACK_MODEL

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def _key(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "loopback-dummy")


def write_inputs(root: Path, n: int = 3) -> tuple[Path, Path]:
    questions, predictions = synthetic_benchmark(n, seed=2)
    (root / "questions.jsonl").write_text("".join(json.dumps(q) + "\n" for q in questions))
    (root / "predictions.jsonl").write_text("".join(json.dumps(p) + "\n" for p in predictions))
    return root / "predictions.jsonl", root / "questions.jsonl"


def cli(root: Path, server: LoopbackJudgeServer, model: str) -> Path:
    predictions, questions = write_inputs(root)
    out = root / "out"
    importlib.import_module("cader.evaluate.judge.cli").main(
        ["--predictions", str(predictions), "--questions", str(questions), "--out", str(out), "--model", model,
         "--base_url", server.base_url, "--progress", "false", "--backoff_base", "0.001", "--max_api_retries", "1"])
    return out


def test_loopback_refuses_a_real_model_name(tmp_path):
    with LoopbackJudgeServer() as server, pytest.raises(SystemExit, match="every judged question failed"):
        cli(tmp_path, server, "gpt-5")  # a run where every question failed exits non-zero
    out = tmp_path / "out"
    rows = read_judgments(out / "judgments.jsonl")
    assert len(rows) == 3 and all(r["scores"] is None and "HTTP 404" in r["error"] for r in rows.values())
    assert all(r["attempts"] == 1 for r in rows.values())  # a wrong model is not retried
    report = json.loads((out / "judge_report.json").read_text())
    assert report["n_judged"] == 0 and report["traj"] is None


def test_reports_say_loopback_numbers_are_not_from_a_real_judge(tmp_path, capsys):
    # Even a server told to accept a real name (only tests do that) names itself in its replies.
    with LoopbackJudgeServer(also_answers_as=["gpt-5"]) as server:
        out = cli(tmp_path, server, "gpt-5")
    rows = read_judgments(out / "judgments.jsonl")
    assert {r["served_model"] for r in rows.values()} == {LOOPBACK_MODEL}
    report = json.loads((out / "judge_report.json").read_text())
    assert report["n_judged"] == 3 and report["real_judge"] is False and report["warning"] == NOT_A_REAL_JUDGE
    assert report["served_models"] == [LOOPBACK_MODEL]
    markdown = (out / "judge_report.md").read_text()
    assert markdown.startswith("# AgentVidBench judge report: cader (judge: gpt-5, NOT A REAL JUDGE)")
    assert NOT_A_REAL_JUDGE in markdown
    assert "NOT A REAL JUDGE" in capsys.readouterr().err


def test_a_real_judge_report_carries_no_warning(tmp_path):
    summary = importlib.import_module("cader.scripts.quickstart_summary")
    (tmp_path / "judge").mkdir()
    report = {"judge_model": "gpt-5", "real_judge": True, "warning": None, "n": 3, "accuracy": 0.5, "traj": 0.7,
              "mc_rate": 0.6, "failed_judgments": [], "rerun": {"summary": "3 judged for the first time"}}
    (tmp_path / "judge" / "judge_report.json").write_text(json.dumps(report))
    text = "\n".join(summary.judge_section(tmp_path, [], {}))
    assert "NOT A REAL JUDGE" not in text and "judge `gpt-5`" in text and "Traj 0.700" in text
    report.update(judge_model=LOOPBACK_MODEL, real_judge=False, warning=NOT_A_REAL_JUDGE)
    (tmp_path / "judge" / "judge_report.json").write_text(json.dumps(report))
    lines = summary.judge_section(tmp_path, [], {})
    assert NOT_A_REAL_JUDGE in lines[0] and "Traj" in lines[1]  # the warning comes before the numbers


@pytest.mark.slow
def test_quickstart_judge_step_never_labels_loopback_scores_with_judge_model(tmp_path):
    predictions, questions = write_inputs(tmp_path)
    env = {k: v for k, v in os.environ.items() if k != "JUDGE_BASE_URL"}
    env.update(JUDGE_MODEL="gpt-5", OPENAI_API_KEY="loopback-dummy")
    proc = subprocess.run(["bash", str(REPO / "scripts" / "quickstart_judge.sh"), str(predictions), str(questions),
                           str(tmp_path / "judge")], env=env, capture_output=True, text=True, timeout=120,
                          check=False)
    assert proc.returncode == 0, proc.stderr
    assert "JUDGE_MODEL=gpt-5 not used" in proc.stderr and "NOT a real judge" in proc.stdout
    rows = read_judgments(tmp_path / "judge" / "judgments.jsonl")
    assert len(rows) == 3 and {r["judge_model"] for r in rows.values()} == {LOOPBACK_MODEL}
    assert all(r["error"] is None for r in rows.values())
    summary = importlib.import_module("cader.scripts.quickstart_summary")
    assert NOT_A_REAL_JUDGE in summary.judge_section(tmp_path, [], {})[0]
