"""What a trained miniature does in each CADER role on the synthetic held-out split (``probe_roles``), for
tests/test_train_learns.py.

For every sample the model is called as CADER calls it (``cader.evaluate.method``'s prompts, thinking switch,
frame budgets), with the synthetic ground truth at hand to score each role on its own:

- Stage 1 (C.1): option-letter logits on the 1 fps pass capped at ``max_frames``; right or not, top-2 margin, and
  whether the pass saw a frame of the event at all;
- proposal (C.2, thinking on): does the output parse into a window, and does the crop of that window
  (``crop_window``) contain the evidence window;
- verifier (C.3, thinking off): P(Yes) on a crop of the scene (contains the event) and of another scene-length
  stretch of the same video (does not), both sampled at Eq. 4's rate;
- final answer (C.4, thinking on) on the scene crop: the parsed letter, right or not.

``chance`` gives the rate a model that ignores the pixels would reach in each role, for binomial tests.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
from cader.evaluate.backends.base import Prompt
from cader.evaluate.method.budget import crop_window, dense_rate
from cader.evaluate.method.parsing import parse_answer, parse_window
from cader.evaluate.method.prompts import final_prompt, proposal_prompt, stage1_prompt, verifier_prompt


@dataclass
class RoleProbe:
    n: int = 0
    stage1_correct: list[bool] = field(default_factory=list)
    stage1_margin: list[float] = field(default_factory=list)
    stage1_saw_event: list[bool] = field(default_factory=list)
    proposal_parsed: list[bool] = field(default_factory=list)
    proposal_covers: list[bool] = field(default_factory=list)
    proposal_text: list[str] = field(default_factory=list)
    p_yes_with: list[float] = field(default_factory=list)
    p_yes_without: list[float] = field(default_factory=list)
    answer_correct: list[bool] = field(default_factory=list)
    scene_slots: int = 0

    def summary(self) -> dict:
        with_, without = np.array(self.p_yes_with), np.array(self.p_yes_without)
        auc = float((with_[:, None] > without[None, :]).mean() + 0.5 * (with_[:, None] == without[None, :]).mean())
        seen = np.array(self.stage1_saw_event, dtype=bool)
        correct = np.array(self.stage1_correct, dtype=bool)
        margin = np.array(self.stage1_margin)
        return {
            "n": self.n,
            "stage1_hits": int(correct.sum()),
            "stage1_accuracy": float(correct.mean()),
            "stage1_accuracy_seen": float(correct[seen].mean()) if seen.any() else None,
            "stage1_accuracy_unseen": float(correct[~seen].mean()) if (~seen).any() else None,
            "stage1_margin_seen": float(margin[seen].mean()) if seen.any() else None,
            "stage1_margin_unseen": float(margin[~seen].mean()) if (~seen).any() else None,
            "proposal_parsed": int(sum(self.proposal_parsed)),
            "proposal_covers": int(sum(self.proposal_covers)),
            "p_yes_with_mean": float(with_.mean()),
            "p_yes_without_mean": float(without.mean()),
            "verifier_auc": auc,
            "answer_hits": int(sum(self.answer_correct)),
            "chance": chance(self.scene_slots),
        }

    def to_dict(self) -> dict:
        return {**asdict(self), "summary": self.summary()}


def chance(scene_slots: int, n_options: int = 6) -> dict:
    """Rates without the pixels: a letter at random; a scene-length window at a random slot."""
    return {"letter": 1 / n_options, "window": 1 / max(1, scene_slots)}


def probe_roles(backend, data_root: str | Path, limit: int | None = None, max_frames: int = 32,
                max_pixels: int = 2048, min_crop: float = 10.0, n_budget: float = 512.0,
                max_new_tokens: int = 32, seed: int = 0) -> RoleProbe:
    """Probe ``backend`` (an evaluate backend) on ``synthetic_heldout`` under ``data_root``."""
    from cader.evaluate.benchmarks import load_benchmark, video_path
    from cader.vlm.video import VideoReader

    samples, errors = load_benchmark("synthetic_heldout", data_root)
    if errors:
        raise ValueError(f"synthetic_heldout under {data_root}: {len(errors)} row errors, first {errors[0]}")
    manifest = __import__("json").loads((Path(data_root) / "manifest.json").read_text())
    truth = manifest["benchmarks"]["synthetic_heldout"]["samples"]
    rng = np.random.default_rng(seed)
    probe = RoleProbe()
    for sample in samples[:limit]:
        t_s, t_e = sample.meta["evidence_window"]
        s_s, s_e = truth[sample.sample_id]["scene_window"]
        reader = VideoReader(video_path(sample, data_root))
        duration = reader.duration
        q, opts, letters = sample.question, sample.options, sample.letters
        f1 = reader.sample_uniform(1.0, max_frames=max_frames, max_pixels=max_pixels)

        system, user = stage1_prompt(q, opts, letters)
        (scores,) = backend.letter_logits([Prompt(user, system=system, video=f1, enable_thinking=False)], letters)
        probs = np.sort(np.exp(scores.logits - np.max(scores.logits)) / np.exp(scores.logits - np.max(scores.logits)).sum())
        probe.stage1_correct.append(letters[int(np.argmax(scores.logits))] == sample.answer)
        probe.stage1_margin.append(float(probs[-1] - probs[-2]))
        probe.stage1_saw_event.append(bool(any(t_s <= t < t_e for t in f1.timestamps)))

        system, user = proposal_prompt(q, opts, letters, duration, min_crop)
        (out,) = backend.generate([Prompt(user, system=system, video=f1, enable_thinking=True)], max_new_tokens)
        parsed = parse_window(out.text, duration)
        probe.proposal_text.append(out.text)
        probe.proposal_parsed.append(parsed.window is not None)
        covers = False
        if parsed.window is not None:
            c_s, c_e = crop_window(*parsed.window, duration, min_crop)
            covers = c_s <= t_s and t_e <= c_e
        probe.proposal_covers.append(covers)

        length = s_e - s_s
        slots = int(duration // length)
        probe.scene_slots = slots
        others = [k * length for k in range(slots) if k * length != s_s]
        neg = float(others[int(rng.integers(len(others)))])
        rate = dense_rate(length, n_budget)
        system, user = verifier_prompt(q, opts, letters)
        clips = {}
        for key, start in (("with", s_s), ("without", neg)):
            clips[key] = reader.sample_uniform(rate, start=start, end=start + length, max_frames=max_frames,
                                               max_pixels=max_pixels)
            (yes,) = backend.yes_no([Prompt(user, system=system, video=clips[key], enable_thinking=False)])
            (probe.p_yes_with if key == "with" else probe.p_yes_without).append(float(yes.p_yes))

        system, user = final_prompt(q, opts, letters, s_s, s_e)
        (out,) = backend.generate([Prompt(user, system=system, video=clips["with"], enable_thinking=True)], 16)
        probe.answer_correct.append(parse_answer(out.text, letters, opts).letter == sample.answer)
        probe.n += 1
    return probe
