"""Synthetic predictions.jsonl records with every route and Stage-2 ending, for sizing and timing the viewer.

Each record is built through the contract model (`build_record(PredictionRecord, ...)`), so it is one evaluate/run.py
could write: Stage-1 logits and margin (softmax(z / T), top-2 gap), exit or Stage 2, proposal rounds with their
verification, RGR maps between them, the final answer, and a few failed samples. Deterministic by seed.
"""

from __future__ import annotations

import math
import random

from cader.contracts.records import PredictionRecord, build_record

BENCHMARKS = ("videomme_long", "mlvu_dev", "longvideobench_val", "lvbench")
LETTERS = ["A", "B", "C", "D"]
DELTA = 0.6  # the verifier's acceptance threshold (CADER, Local Evidence Verification)


def margin_of(logits: list[float], temperature: float) -> float:
    scaled = [z / temperature for z in logits]
    top = max(scaled)
    probs = sorted((math.exp(z - top) for z in scaled), reverse=True)
    return (probs[0] - probs[1]) / sum(probs)


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
                      "window": window, **({} if window is None else {"too_broad": broad})})  # fmt: skip
        if unparseable or broad:
            fallback = "unparseable_proposal" if unparseable else "too_broad"
            break
        p_yes = round(rng.random(), 4)
        crop = [max(0.0, window[0] - 2), min(duration, window[1] + 2)]
        steps.append({"phase": "verify", "iteration": iteration, "window": window, "crop": crop,
                      "r2": round(min(2.0, 128 / (crop[1] - crop[0])), 3), "n_frames": 128, "p_yes": p_yes,
                      "f": round(min(1.0, p_yes + 0.1), 4), "accepted": p_yes >= DELTA})  # fmt: skip
        if p_yes >= DELTA:
            accepted, fallback = window, None
            break
        tried.append((window, p_yes))
    pred = a1
    if accepted:
        pred = gold if rng.random() < 0.7 else rng.choice(LETTERS)
        steps.append({"phase": "answer", "window": crop, "n_frames": 128, "raw_output": f"<answer>{pred}</answer>",
                      "parsed": {"letter": pred, "how": "answer_tag/alone"}, "pred": pred,
                      "fallback_to_stage1": False})  # fmt: skip
    cycles = sum(s["phase"] == "verify" for s in steps)
    return {"pred": pred, "accepted": accepted, "cycles": cycles, "fallback": fallback, "steps": steps}


def synthetic_records(n: int, seed: int = 0, tau: float = 0.9, temperature: float = 2.0) -> list[dict]:
    """`n` contract-valid records over four benchmarks; about 2 % failed (video_unreadable)."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        benchmark = BENCHMARKS[i % len(BENCHMARKS)]
        duration = round(rng.uniform(600, 3600), 1)
        gold = rng.choice(LETTERS)
        base = {"benchmark": benchmark, "sample_id": f"{benchmark}-{i}", "video": f"videos/{i:05d}.mp4",
                "duration": duration, "question": f"What happens after event {i} in the video? " * 2,
                "options": [f"option {k} of sample {i}" for k in range(4)], "letters": LETTERS, "answer": gold,
                "meta": {"task_type": f"type{i % 3}"}}  # fmt: skip
        cost = {"forwards": 1, "frames_decoded": 256, "prompt_tokens": 9000, "completion_tokens": 1, "seconds": 1.5}
        if rng.random() < 0.02:
            out.append(build_record(PredictionRecord, {**base, "stage1": None, "route": None, "stage2": None,
                                                       "pred": None, "correct": False, "cost": cost,
                                                       "error": f"video_unreadable: videos/{i:05d}.mp4: moov atom "
                                                                "not found"}))  # fmt: skip
            continue
        # one option pulled ahead by a random lead (the gold one 60 % of the time), so about half the margins clear tau
        lead = LETTERS.index(gold) if rng.random() < 0.6 else rng.randrange(len(LETTERS))
        logits = [round(rng.gauss(0, 1) + (rng.uniform(0, 16) if k == lead else 0.0), 3) for k in range(4)]
        a1 = LETTERS[logits.index(max(logits))]
        margin = margin_of(logits, temperature)
        stage1 = {"logits": logits, "pred": a1, "margin": margin, "temperature": temperature, "n_frames": 256,
                  "fps": 1.0, "tau": tau}
        route = "exit" if margin >= tau else "stage2"
        stage2 = _stage2(rng, duration, a1, gold) if route == "stage2" else None
        pred = stage2["pred"] if stage2 else a1
        cost = {**cost, "forwards": 1 + (len(stage2["steps"]) if stage2 else 0)}
        out.append(build_record(PredictionRecord, {**base, "stage1": stage1, "route": route, "stage2": stage2,
                                                   "pred": pred, "correct": pred == gold, "cost": cost,
                                                   "error": None}))  # fmt: skip
    return out
