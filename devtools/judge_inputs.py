"""Small synthetic AgentVidBench questions and CADER-shaped predictions for tests and benchmarks (no video)."""

from __future__ import annotations

import random

from cader.evaluate.judge.prompt import letters_for

MILESTONE_TYPES = ("context_identification", "temporal_localization", "ocr_text_reading", "audio_visual_evidence",
                   "visual_recognition", "counting", "comparison", "exclusion_check", "arithmetic", "verification")
DIFFICULTIES = ("easy", "medium", "hard", "very_hard")
CATEGORIES = ("sports", "education", "entertainment", "lifestyle")
SKILLS = ("temporal/event localization", "simple counting", "OCR/text reading", "evidence aggregation")


def synthetic_question(qid: int, rng: random.Random) -> dict:
    n_milestones = rng.randint(1, 4)
    ecom = rng.choice([True, False, None])
    # the release's field names (tests/fixtures/agentvidbench/PROVENANCE.md)
    row = {"question_id": qid, "video_path": f"videos/video{qid}.mp4", "transcript_path": f"transcripts/video{qid}.srt",
           "question_text": f"Synthetic question {qid}: how many?",
           "options": [f"{i}" for i in range(26)], "answer": rng.choice(letters_for(26)),
           "milestones": [{"id": f"M{i + 1}", "type": rng.choice(MILESTONE_TYPES),
                           "description": f"evidence {i + 1} for question {qid}"} for i in range(n_milestones)],
           "difficulty": rng.choice(DIFFICULTIES), "categories": rng.sample(CATEGORIES, rng.randint(1, 2)),
           "skills": rng.sample(SKILLS, rng.randint(1, 2))}
    if ecom is not None:
        row["ecom_required"] = ecom
    return row


def synthetic_prediction(question: dict, rng: random.Random, system: str = "cader") -> dict:
    """A predictions.jsonl row (the prediction record of `cader.contracts`) with a stage-2 trajectory; right about half the time."""
    letters = letters_for(len(question["options"]))
    pred = question["answer"] if rng.random() < 0.5 else rng.choice(letters)
    # Step fields as evaluate/method/stage2.py writes them (what render.py shows the judge).
    stage2 = {"pred": pred, "accepted": [10.0, 25.0], "cycles": 1, "fallback": None,
              "steps": [{"phase": "propose", "iteration": 0, "context": "F1", "n_frames": 64, "tried": [],
                         "raw_output": "The event happens near 0:15, so look at [8.0, 30.0].",
                         "parsed": {"window": [8.0, 30.0], "how": "bracket"}, "window": [8.0, 30.0],
                         "too_broad": False},
                        {"phase": "verify", "iteration": 0, "window": [8.0, 30.0], "crop": [8.0, 30.0],
                         "r2": 4.0, "n_frames": 88, "p_yes": 0.91, "accepted": True},
                        {"phase": "answer", "window": [8.0, 30.0], "n_frames": 88,
                         "raw_output": f"Counting in the window gives option {pred}.",
                         "parsed": {"letter": pred, "how": "answer_is"}, "pred": pred,
                         "fallback_to_stage1": False}]}
    return {"benchmark": "agentvidbench", "sample_id": str(question["question_id"]),
            "question_id": question["question_id"], "video": question["video_path"],
            "duration": 600.0, "question": question["question_text"], "options": question["options"],
            "letters": letters, "answer": question["answer"],
            "stage1": {"logits": [0.0] * len(letters), "pred": rng.choice(letters), "margin": 0.2,
                       "temperature": 1.5, "n_frames": 64, "fps": 1.0},
            "route": "stage2", "stage2": stage2, "pred": pred, "correct": pred == question["answer"],
            "cost": {"forwards": 4, "frames_decoded": 124, "prompt_tokens": 1000, "completion_tokens": 50,
                     "seconds": 1.0},
            "error": None, "system": system}


def synthetic_benchmark(n: int, seed: int = 0) -> tuple[list[dict], list[dict]]:
    """(questions rows, prediction rows) for question ids 1..n."""
    rng = random.Random(seed)
    questions = [synthetic_question(i, rng) for i in range(1, n + 1)]
    return questions, [synthetic_prediction(q, rng) for q in questions]
