"""A quickstart-shaped run tree for the viewer tests, made by the real runner, report and calibration.

    <root>/eval/full/synthetic      exits, accepted crops, one verifier failure, one unreadable video
    <root>/eval/full/agentvidbench  questions with ids, judged in <root>/judge/judgments.jsonl
    <root>/eval/rejected/synthetic  every crop rejected: RGR maps between the reflections, `not_accepted`
    <root>/eval/too_broad/synthetic the Breadth-Aware Fallback
    <root>/calibration              calibrate/fit.py's calibration.json (named by the reports' config) and a figure

The Stage-1 logits are scripted (ScriptedBackend), the video is the session's barcode video.
"""

from __future__ import annotations

import json
from pathlib import Path

LETTERS = ["A", "B", "C", "D"]


def _samples(benchmark: str, video: str, n: int, with_ids: bool = False):
    from cader.evaluate.benchmarks.base import Sample

    return [Sample(benchmark, f"{benchmark}-{i}", video, f"q{i}", [f"option {k}" for k in range(4)], LETTERS,
                   LETTERS[i % 4], 60.0, {"question_id": 100 + i} if with_ids else {"task_type": f"t{i % 2}"})
            for i in range(n)]  # fmt: skip


def _logits(n: int) -> dict:
    """Confident on even questions (exit), unsure on odd ones (Stage 2); the Stage-1 pick is B."""
    return {f"q{i}": [0.0, 40.0, 0.0, 0.0] if i % 2 == 0 else [0.0, 0.3 + 0.1 * i, 0.2, 0.0] for i in range(n)}


def judgment_row(qid: int, k: int) -> dict:
    from cader.contracts.records import JudgmentRecord, build_record

    scores = {"P1": 2, "P2": k % 3, "P3": 1, "P4": None, "P5": (k + 1) % 3}
    present = [v for v in scores.values() if v is not None]
    statuses = ["covered", "partial", "missing"][: 1 + k % 3]
    covered = sum(s == "covered" for s in statuses) + 0.5 * sum(s == "partial" for s in statuses)
    return build_record(JudgmentRecord, {
        "question_id": qid, "system": "cader", "judge_model": "hand-written", "scores": scores,
        "traj": sum(present) / len(present) / 2, "mc_rate": covered / len(statuses),
        "milestones": [{"id": f"M{j + 1}", "status": s, "evidence": f"seen at {10 * j} s"} for j, s in enumerate(statuses)],
        "failure_tags": ["counting_error"] if k % 2 else [], "summary": f"judged question {qid}", "attempts": 1,
        "error": None})  # fmt: skip


def build_run_tree(root: Path, video: Path, n_synthetic: int = 24) -> Path:
    """Write the tree under `root` (videos are read from video.parent); returns `root / "eval"`."""
    from cader.calibrate.pipeline import calibrate_predictions
    from cader.dev.scripted import ScriptedBackend
    from cader.evaluate.benchmarks.base import Sample
    from cader.evaluate.method.config import CaderConfig
    from cader.evaluate.report import write_report
    from cader.evaluate.runner import read_records, run_samples

    runs = {  # folder: (samples, variant, proposal, p_yes, questions whose verifier call fails)
        "full/synthetic": (_samples("synthetic", video.name, n_synthetic), "full", '"relevant_windows": [[20, 30]]',
                           0.95, ("q3",)),
        "full/agentvidbench": (_samples("agentvidbench", video.name, 4, with_ids=True), "full",
                               '"relevant_windows": [[12, 18]]', 0.8, ()),
        "rejected/synthetic": (_samples("synthetic", video.name, 8), "full", '"relevant_windows": [[20, 30]]', 0.01, ()),
        "too_broad/synthetic": (_samples("synthetic", video.name, 6), "no_reflection", '"relevant_windows": [[0, 59]]',
                                0.9, ()),
    }  # fmt: skip
    runs["full/synthetic"][0].append(Sample("synthetic", "missing", "missing.mp4", "q0", ["a", "b"], ["A", "B"], "A", 10))
    calibration = root / "calibration" / "calibration.json"
    for name, (samples, variant, proposal, p_yes, fail_on) in runs.items():
        out = root / "eval" / name
        backend = ScriptedBackend(_logits(n_synthetic), proposal, "<answer>B</answer>", p_yes, fail_on)
        cfg = CaderConfig(max_frames=8, max_pixels=2048, variant=variant, tau=0.97)
        run_samples(samples, video.parent, out / "predictions.jsonl", backend, backend, cfg,
                    video_path=lambda s, r: r / s.video, progress=False)  # fmt: skip
        write_report(out, read_records(out / "predictions.jsonl"), config={"variant": variant, "tau": 0.97,
                                                                           "calibration": str(calibration)})
    calibrate_predictions([str(root / "eval" / "full" / "synthetic" / "predictions.jsonl")], str(calibration.parent),
                          mode="budget", budget=0.5, min_exits=1, temperature=2.0, figures=False)  # fmt: skip
    # a figure of our own in figures/ (calibrate's plots are tested on their own; this one only has to be inlined)
    from PIL import Image, ImageDraw

    picture = Image.new("RGB", (120, 80), "white")
    ImageDraw.Draw(picture).line([(10, 70), (110, 10)], fill="navy", width=3)
    (calibration.parent / "figures").mkdir(exist_ok=True)
    picture.save(calibration.parent / "figures" / "reliability.png")
    judge = root / "judge"
    judge.mkdir(parents=True, exist_ok=True)
    rows = [judgment_row(100 + k, k) for k in range(3)]  # question 103 is never judged
    (judge / "judgments.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return root / "eval"
