"""Synthetic runs for the viewer: records with every route and Stage-2 ending for sizing and timing it
(`synthetic_records`), and a quickstart-shaped tree of real runs for its browser tests and screenshots
(`write_run_tree`).

Each synthetic record is built through the contract model (`build_record(PredictionRecord, ...)`), so it is one
evaluate/run.py could write: Stage-1 logits and margin (softmax(z / T), top-2 gap), exit or Stage 2, proposal rounds
with their verification, RGR maps between them, the final answer, and a few failed samples. Deterministic by seed.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

from cader.calibrate.margin import margin as stage1_margin
from cader.contracts.records import JudgmentRecord, PredictionRecord, build_record

BENCHMARKS = ("videomme_long", "mlvu_dev", "longvideobench_val", "lvbench")
LETTERS = ["A", "B", "C", "D"]
DELTA = 0.6  # the verifier's acceptance threshold (CADER, Local Evidence Verification)


def _window(rng: random.Random, duration: float, broad: bool) -> list[float]:
    length = duration * (0.5 if broad else rng.uniform(0.01, 0.08))
    start = rng.uniform(0, duration - length)
    return [round(start, 1), round(start + length, 1)]


def _stage2(rng: random.Random, duration: float, a1: str, gold: str) -> dict:
    """Proposal rounds until one crop is accepted (at most 3), or a fallback."""
    steps, tried, accepted, fallback = [], [], None, "not_accepted"
    ending = rng.random()
    for iteration in range(3):
        if iteration:
            segments = [[w[0], w[1], round(min(1.0, p + 0.4), 3)] for w, p in tried]
            steps.append({"phase": "resample", "iteration": iteration, "mode": "rgr", "fps_map": segments,
                          "unexplored": [[0.0, segments[0][0]]], "n_frames_planned": 300, "n_frames": 256})
        broad = ending < 0.08 and iteration == 0
        unparseable = 0.08 <= ending < 0.12 and iteration == 0
        window = None if unparseable else _window(rng, duration, broad)
        reply = "I cannot tell." if unparseable else f'{{"relevant_windows": [[{window[0]}, {window[1]}]]}}'
        steps.append({"phase": "propose", "iteration": iteration, "context": "rgr" if iteration else "F1",
                      "n_frames": 256, "tried": [w for w, _ in tried], "raw_output": reply * 4,
                      "parsed": {"window": window, "how": None if unparseable else "keyed",
                                 "reason": "no window in reply" if unparseable else None},
                      "window": window, **({} if window is None else {"too_broad": broad})})
        if unparseable or broad:
            fallback = "unparseable_proposal" if unparseable else "too_broad"
            break
        p_yes = round(rng.random(), 4)
        crop = [max(0.0, window[0] - 2), min(duration, window[1] + 2)]
        steps.append({"phase": "verify", "iteration": iteration, "window": window, "crop": crop,
                      "r2": round(min(2.0, 128 / (crop[1] - crop[0])), 3), "n_frames": 128, "p_yes": p_yes,
                      "f": round(min(1.0, p_yes + 0.1), 4), "accepted": p_yes >= DELTA})
        if p_yes >= DELTA:
            accepted, fallback = window, None
            break
        tried.append((window, p_yes))
    pred = a1
    if accepted:
        pred = gold if rng.random() < 0.7 else rng.choice(LETTERS)
        steps.append({"phase": "answer", "window": crop, "n_frames": 128, "raw_output": f"<answer>{pred}</answer>",
                      "parsed": {"letter": pred, "how": "answer_tag/alone"}, "pred": pred,
                      "fallback_to_stage1": False})
    cycles = sum(s["phase"] == "verify" for s in steps)
    return {"pred": pred, "accepted": accepted, "cycles": cycles, "fallback": fallback, "steps": steps}


def synthetic_records(n: int, seed: int = 0, tau: float = 0.9, temperature: float = 2.0,
                      variant: int | None = None) -> list[dict]:
    """`n` contract-valid records over four benchmarks; about 2 % failed (video_unreadable).

    With `variant`, the same `n` questions as `seed` gives (ids, videos, durations, gold letters) answered anew: the
    runs of one benchmark under several settings, as the viewer shows them side by side.
    """
    rng = random.Random(seed)
    outcome = rng if variant is None else random.Random(f"{seed}/{variant}")  # None: the one stream of old
    out = []
    for i in range(n):
        benchmark = BENCHMARKS[i % len(BENCHMARKS)]
        duration = round(rng.uniform(600, 3600), 1)
        gold = rng.choice(LETTERS)
        base = {"benchmark": benchmark, "sample_id": f"{benchmark}-{i}", "video": f"videos/{i:05d}.mp4",
                "duration": duration, "question": f"What happens after event {i} in the video? " * 2,
                "options": [f"option {k} of sample {i}" for k in range(4)], "letters": LETTERS, "answer": gold,
                "meta": {"task_type": f"type{i % 3}"}}
        cost = {"forwards": 1, "frames_decoded": 256, "prompt_tokens": 9000, "completion_tokens": 1, "seconds": 1.5}
        if outcome.random() < 0.02:
            out.append(build_record(PredictionRecord, {**base, "stage1": None, "route": None, "stage2": None,
                                                       "pred": None, "correct": False, "cost": cost,
                                                       "error": f"video_unreadable: videos/{i:05d}.mp4: moov atom "
                                                                "not found"}))
            continue
        # one option pulled ahead by a random lead (the gold one 60 % of the time), so about half the margins clear tau
        lead = LETTERS.index(gold) if outcome.random() < 0.6 else outcome.randrange(len(LETTERS))
        logits = [round(outcome.gauss(0, 1) + (outcome.uniform(0, 16) if k == lead else 0.0), 3) for k in range(4)]
        a1 = LETTERS[logits.index(max(logits))]
        margin = stage1_margin(logits, temperature)
        stage1 = {"logits": logits, "pred": a1, "margin": margin, "temperature": temperature, "n_frames": 256,
                  "fps": 1.0, "tau": tau}
        route = "exit" if margin >= tau else "stage2"
        stage2 = _stage2(outcome, duration, a1, gold) if route == "stage2" else None
        pred = stage2["pred"] if stage2 else a1
        cost = {**cost, "forwards": 1 + (len(stage2["steps"]) if stage2 else 0)}
        out.append(build_record(PredictionRecord, {**base, "stage1": stage1, "route": route, "stage2": stage2,
                                                   "pred": pred, "correct": pred == gold, "cost": cost,
                                                   "error": None}))
    return out


# ---- a tree of real runs -------------------------------------------------------------------------------------------


DIFFICULTIES, CATEGORIES, SKILLS = ("easy", "hard"), ("counting", "ordering", "reading"), ("search", "memory")


def agentvidbench_meta(i: int) -> dict:
    """What the AgentVidBench loader keeps in meta: the question id, the ground-truth milestones, the slices."""
    return {"question_id": 100 + i, "difficulty": DIFFICULTIES[i % 2],
            "categories": [CATEGORIES[i % 3]] + ([CATEGORIES[(i + 1) % 3]] if i % 2 else []),
            "skills": [SKILLS[i % 2]],
            "milestones": [{"id": f"M{j + 1}", "type": "visual" if j % 2 == 0 else "temporal",
                            "description": f"question {100 + i}: event {j + 1} is seen"} for j in range(3)]}


def _samples(benchmark: str, video: str, n: int, with_ids: bool = False):
    from cader.evaluate.benchmarks.base import Sample

    return [Sample(benchmark, f"{benchmark}-{i}", video, f"q{i}", [f"option {k}" for k in range(4)], LETTERS,
                   LETTERS[i % 4], 60.0, agentvidbench_meta(i) if with_ids else {"task_type": f"t{i % 2}"})
            for i in range(n)]


def _logits(n: int) -> dict:
    """Confident on even questions (exit), unsure on odd ones (Stage 2); the Stage-1 pick is B."""
    return {f"q{i}": [0.0, 40.0, 0.0, 0.0] if i % 2 == 0 else [0.0, 0.3 + 0.1 * i, 0.2, 0.0] for i in range(n)}


def judgment_row(qid: int, k: int, shift: int = 0) -> dict:
    scores = {"P1": 2, "P2": (k + shift) % 3, "P3": 1 - shift % 2, "P4": None, "P5": (k + 1) % 3}
    present = [v for v in scores.values() if v is not None]
    statuses = ["covered", "partial", "missing"][: 1 + k % 3]
    covered = sum(s == "covered" for s in statuses) + 0.5 * sum(s == "partial" for s in statuses)
    return build_record(JudgmentRecord, {
        "question_id": qid, "system": "cader", "judge_model": "hand-written", "scores": scores,
        "traj": sum(present) / len(present) / 2, "mc_rate": covered / len(statuses),
        "milestones": [{"id": f"M{j + 1}", "status": s, "evidence": f"seen at {10 * j} s"} for j, s in enumerate(statuses)],
        "failure_tags": ["counting_error"] if (k + shift) % 2 else [], "summary": f"judged question {qid}",
        "axis_rationales": {axis: f"{axis} of question {qid}: reason {k}" for axis in scores}, "attempts": 1,
        "error": None})


def write_judge(folder: Path, predictions: Path, shift: int, judged: int) -> Path:
    """judgments.jsonl for the first `judged` questions and the judge_report.json evaluate/judge.py would write
    (its aggregate, its provenance naming the predictions judged)."""
    from cader.evaluate.judge.aggregate import build_report, write_report
    from cader.evaluate.judge.questions import Question
    from cader.evaluate.runner import read_records

    records = read_records(predictions)
    questions, by_key = {}, {}
    for r in records:
        meta = r["meta"]
        key = str(meta["question_id"])
        questions[key] = Question(meta["question_id"], r["question"], r["options"], r["answer"], meta["milestones"],
                                  difficulty=meta["difficulty"], categories=meta["categories"],
                                  skills=meta["skills"])
        by_key[key] = r
    rows = [judgment_row(100 + k, k, shift) for k in range(judged)]
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "judgments.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    report = build_report(questions, by_key, {str(r["question_id"]): r for r in rows},
                          provenance={"command": f"evaluate/judge.py --predictions {predictions} --out {folder}"})
    write_report(folder, report)
    return folder


def write_run_tree(root: Path, video: Path, n_synthetic: int = 24) -> Path:
    """Write a quickstart-shaped tree of runs under `root`, made by the real runner, report, calibration and judge
    aggregate on scripted replies (ScriptedBackend), every run on the one video `video` (its folder is the runs'
    video root); returns `root / "eval"`:

        eval/full/synthetic       exits, accepted crops, one verifier failure, one unreadable video
        eval/full/agentvidbench   questions with ids, milestones, difficulty, categories and skills, judged in
                                  root/judge (its report's command names the predictions it judged)
        eval/no_rgr/agentvidbench the same questions, another proposal, judged in its own folder (judge/ inside)
        eval/rejected/synthetic   every crop rejected: RGR maps between the reflections, `not_accepted`
        eval/too_broad/synthetic  the Breadth-Aware Fallback
        calibration               calibrate/fit.py's calibration.json (named by the reports' config) and a figure
    """
    from cader.calibrate.options import FitOptions, OutputOptions, Rule
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
        "no_rgr/agentvidbench": (_samples("agentvidbench", video.name, 4, with_ids=True), "no_rgr",
                                 '"relevant_windows": [[40, 50]]', 0.3, ()),
        "rejected/synthetic": (_samples("synthetic", video.name, 8), "full", '"relevant_windows": [[20, 30]]', 0.01, ()),
        "too_broad/synthetic": (_samples("synthetic", video.name, 6), "no_reflection", '"relevant_windows": [[0, 59]]',
                                0.9, ()),
    }
    runs["full/synthetic"][0].append(Sample("synthetic", "missing", "missing.mp4", "q0", ["a", "b"], ["A", "B"], "A", 10))
    calibration = root / "calibration" / "calibration.json"
    for name, (samples, variant, proposal, p_yes, fail_on) in runs.items():
        out = root / "eval" / name
        backend = ScriptedBackend(_logits(n_synthetic), proposal, "<answer>B</answer>", p_yes, fail_on)
        cfg = CaderConfig(max_frames=8, max_pixels=2048, variant=variant, tau=0.97)
        run_samples(samples, video.parent, out / "predictions.jsonl", backend, backend, cfg,
                    video_path=lambda s, r: r / s.video, progress=False)
        write_report(out, read_records(out / "predictions.jsonl"), config={"variant": variant, "tau": 0.97,
                                                                           "calibration": str(calibration)})
    calibrate_predictions([str(root / "eval" / "full" / "synthetic" / "predictions.jsonl")],
                          str(calibration.parent), rule=Rule(mode="budget", budget=0.5, min_exits=1),
                          fit=FitOptions(temperature=2.0), output=OutputOptions(figures=False))
    # a figure of our own in figures/ (calibrate's plots are tested on their own; this one only has to be inlined)
    from PIL import Image, ImageDraw

    picture = Image.new("RGB", (120, 80), "white")
    ImageDraw.Draw(picture).line([(10, 70), (110, 10)], fill="navy", width=3)
    (calibration.parent / "figures").mkdir(exist_ok=True)
    picture.save(calibration.parent / "figures" / "reliability.png")
    # question 103 is never judged by the first judge; the second judges all four
    write_judge(root / "judge", root / "eval" / "full" / "agentvidbench" / "predictions.jsonl", 0, 3)
    write_judge(root / "eval" / "no_rgr" / "agentvidbench" / "judge",
                root / "eval" / "no_rgr" / "agentvidbench" / "predictions.jsonl", 1, 4)
    return root / "eval"
