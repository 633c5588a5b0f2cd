"""scripts/quickstart.sh end to end: tiny SFT -> Stage 1 -> calibration -> CADER (all variants) -> judge -> summary."""

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from cader.evaluate.benchmarks import released

REPO = Path(__file__).resolve().parents[1]
VARIANTS = ["no_stage2", "uniform_stage2", "no_verifier", "no_reflection", "no_rgr"]
BENCHMARKS = ["synthetic", *released()]   # the quickstart runs full CADER on each (scripts/quickstart.sh)


@pytest.mark.slow
def test_quickstart_runs_the_whole_pipeline(shipped_tiny_run, tmp_path):
    # steps 1-2 (tiny model, data, the README's main job) come from the session's shipped run; the quickstart skips a
    # step whose output exists, exactly as on a rerun
    shutil.copytree(shipped_tiny_run / "runs", tmp_path / "runs")
    env = {k: v for k, v in os.environ.items() if k not in ("JUDGE_BASE_URL", "OPENAI_API_KEY")}
    env["LIMIT"] = env["TABLE2_LIMIT"] = "2"
    proc = subprocess.run(["bash", str(REPO / "scripts" / "quickstart.sh"), str(tmp_path)], env=env, check=False,
                          capture_output=True, text=True, timeout=1500)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    root = tmp_path / "runs" / "tiny"
    # each step says what it wrote, and what it kept: steps 1-2 had their outputs already
    assert "kept runs/tiny/sft/export (already there)" in proc.stdout and "wrote runs/tiny/sft/export" not in proc.stdout
    assert "wrote runs/tiny/SUMMARY.md" in proc.stdout and "] 3/9 Stage 1 on the held-out split" in proc.stdout
    timed = json.loads((root / "run_time.json").read_text())   # a resumed run: no main-job time to document
    assert timed["skipped"] == ["data", "model", "sft"] and not timed["complete"] and timed["main_job_seconds"] is None
    assert timed["machine"]["cores"] >= 1 and set(timed["steps"]) == {"heldout", "calibrate", "full", "ablations",
                                                                       "judge", "view", "summary"}
    # wall-clock time beside the records, not in them; and no writer's lock outlives its run
    for predictions in root.glob("eval/*/*/predictions.jsonl"):
        assert all("seconds" not in json.loads(line)["cost"] for line in predictions.read_text().splitlines())
        assert (predictions.parent / "timings.jsonl").stat().st_size > 0
    # (the plan cache's `datasets` folder keeps the lock files of `datasets`' own cache, as every HF cache does)
    assert sorted(p for p in root.rglob("*.lock") if ".cader_plan_cache" not in p.parts) == []

    from transformers import AutoModelForImageTextToText

    assert AutoModelForImageTextToText.from_pretrained(root / "sft" / "export") is not None
    calibration = json.loads((root / "calibration" / "calibration.json").read_text())
    # precision mode on the 240-question held-out split certifies a non-empty exit set: exit error <= 5 % with
    # probability >= 90 %, by the exact bound on the selection split (no threshold here is a guess)
    select = calibration["select"]
    assert calibration["temperature"] > 0 and calibration["mode"] == "precision" and calibration["alpha"] == 0.05
    assert select["n"] >= 100 and select["exit_rate"] > 0 and not select.get("no_exit"), select
    assert select["upper_bound_error"] <= 0.05, select
    assert {p.name for p in (root / "calibration" / "figures").glob("*.png")} >= {
        "accuracy_vs_margin.png", "reliability.png", "risk_coverage.png", "tau_sweep.png"}
    for bench in BENCHMARKS:
        report = json.loads((root / "eval" / "full" / bench / "report.json").read_text())
        assert report["overall"]["n"] == 2 and report["overall"]["failures"] == 0
        assert report["config"]["temperature"] == pytest.approx(calibration["temperature"])
    for variant in VARIANTS:
        assert (root / "eval" / variant / "synthetic" / "report.md").exists()
    # the accuracy-compute frontier of the uniform_stage2 run, from the records' own FLOPs
    assert (root / "frontier" / "figures" / "frontier.png").is_file()
    assert "| always_stage2 |" in (root / "frontier" / "frontier.md").read_text()
    judge = json.loads((root / "judge" / "judge_report.json").read_text())
    assert judge["n"] == 8 and judge["n_judged"] >= 1 and not judge["failed_judgments"]
    summary = (root / "SUMMARY.md").read_text()
    assert (root / "view.html").stat().st_size > 0 and "[view.html](view.html)" in summary
    for needle in ["sft/export", "calibration/calibration.json", "judge/judge_report.md", "no_rgr/synthetic",
                   "## 7. Other benchmark layouts", "why these rows sit near chance"]:
        assert needle in summary

    from contract_files import contract_for, file_problems

    # every predictions.jsonl, calibration.json and judgments.jsonl the quickstart wrote keeps its contract
    written = [p for p in root.rglob("*") if contract_for(p) is not None]
    assert {p.name for p in written} >= {"predictions.jsonl", "calibration.json", "judgments.jsonl"}
    assert {str(p): file_problems(p) for p in written} == {str(p): [] for p in written}
