"""Synthetic Stage-1 outcomes with a known temperature, for tests and demos (no model needed).

Each sample draws option logits z (spread varies per sample, so margins cover easy and hard questions), then the
gold letter from softmax(z / true_temperature): the logits are perfectly calibrated at that temperature, so a
temperature fit should recover it and P(correct | z) = max softmax(z / true_temperature) is known exactly.
"""

from __future__ import annotations

import string

import numpy as np


def synthetic_logits(n: int, n_options: int, true_temperature: float, rng: np.random.Generator,
                     spread: float = 3.0) -> tuple[np.ndarray, np.ndarray]:
    """(logits (n, K) float64, gold (n,) int64)."""
    scale = spread * rng.lognormal(mean=0.0, sigma=0.8, size=(n, 1))
    z = rng.normal(size=(n, n_options)) * scale
    p = np.exp((z - z.max(axis=1, keepdims=True)) / true_temperature)
    p /= p.sum(axis=1, keepdims=True)
    gold = (rng.random((n, 1)) > np.cumsum(p, axis=1)).sum(axis=1)
    return z, np.minimum(gold, n_options - 1).astype(np.int64)


def synthetic_prediction_rows(benchmark: str, n: int, n_options: int = 4, true_temperature: float = 1.5,
                              seed: int = 0, stage2_accuracy: float | None = None) -> list[dict]:
    """predictions.jsonl rows (the prediction record of ``cader.contracts``) from ``synthetic_logits``.

    With ``stage2_accuracy`` every row is routed to Stage 2 (as in a uniform_stage2 run) and Stage 2 answers
    correctly with that probability.
    """
    rng = np.random.default_rng(seed)
    z, gold = synthetic_logits(n, n_options, true_temperature, rng)
    letters = list(string.ascii_uppercase[:n_options])
    rows = []
    for i in range(n):
        s1_pred, answer = letters[int(np.argmax(z[i]))], letters[int(gold[i])]
        row = {
            # each question its own video, in its benchmark's folder: calibration keys a video by this path alone
            "benchmark": benchmark, "sample_id": f"{benchmark}-{i}", "video": f"{benchmark}/videos/{i}.mp4",
            "duration": 600.0, "question": f"synthetic question {i}", "options": [f"option {x}" for x in letters],
            "letters": letters, "answer": answer,
            "stage1": {"logits": z[i].tolist(), "pred": s1_pred, "margin": None, "temperature": 2.0, "n_frames": 64,
                       "fps": 1.0},
            "route": "exit", "stage2": None, "pred": s1_pred, "correct": s1_pred == answer,
            "cost": {"forwards": 1, "frames_decoded": 64, "prompt_tokens": 0, "completion_tokens": 1, "seconds": 0.0},
            "error": None,
        }
        if stage2_accuracy is not None:
            right = rng.random() < stage2_accuracy
            s2_pred = answer if right else letters[(letters.index(answer) + 1) % n_options]
            row.update(route="stage2", pred=s2_pred, correct=s2_pred == answer,
                       stage2={"pred": s2_pred, "accepted": [0.0, 30.0], "cycles": 1, "fallback": None, "steps": []})
        rows.append(row)
    return rows
