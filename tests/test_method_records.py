"""The exact records Stage 1 and Stage 2 write, what each model call receives, and the config's bounds.

predictions.jsonl is read by the report, the calibration and the judge: a renamed key, a dropped argument or a
miscounted cost is a wrong result downstream even when the control flow is right.
"""

from dataclasses import fields

import numpy as np
import pytest
from cader.evaluate.backends.base import Backend, Generation, LetterLogits, YesNo
from cader.evaluate.benchmarks.base import Sample
from cader.evaluate.method.config import CaderConfig
from cader.evaluate.method.parsing import AnswerParse, WindowParse, parse_window
from cader.evaluate.method.prompts import format_seconds, verifier_prompt
from cader.evaluate.method.stage1 import Cost, run_stage1, sample_stage1_frames
from cader.evaluate.method.stage2 import Stage2Failure, run_stage2
from cader.vlm.sampling import uniform_times
from cader.vlm.video import Frames

LETTERS = ["A", "B", "C", "D"]
OPTIONS = ["red", "green", "blue", "yellow"]
QUESTION = "What colour is the car?"


def frames_at(times):
    times = np.asarray(times, dtype=np.float64)
    return Frames(np.zeros((len(times), 2, 2, 3), np.uint8), times, np.arange(len(times)), 1.0)


class Reader:
    """A VideoReader double that records every argument it is given."""

    def __init__(self, duration):
        self.duration = duration
        self.calls = []

    def sample_uniform(self, fps, start=None, end=None, max_frames=None, max_pixels=None, rule="bin_centre"):
        self.calls.append(("uniform", fps, start, end, max_frames, max_pixels, rule))
        times = uniform_times(start or 0.0, self.duration if end is None else end, fps)
        return frames_at(times[:max_frames])

    def sample_times(self, times, max_pixels=None):
        self.calls.append(("times", len(times), max_pixels))
        return frames_at(times)


class Recorder(Backend):
    """A scripted backend that records each call with all its arguments."""

    def __init__(self, texts=(), yes_no=(), logits=None):
        self.texts, self.pairs, self.logits = list(texts), list(yes_no), logits
        self.calls = []

    def letter_logits(self, prompts, letters):
        self.calls.append(("letter_logits", prompts, list(letters)))
        return [LetterLogits(list(self.logits), 11) for _ in prompts]

    def yes_no(self, prompts):
        self.calls.append(("yes_no", prompts, None))
        return [YesNo(*self.pairs.pop(0), 7) for _ in prompts]

    def generate(self, prompts, max_new_tokens):
        self.calls.append(("generate", prompts, max_new_tokens))
        return [Generation(self.texts.pop(0), 20, 5) for _ in prompts]


def windows(s, e):
    return f'"relevant_windows": [["{s}", "{e}"]]'


# ---- Stage 1 -----------------------------------------------------------------------------------------------


def test_stage1_record_prompt_and_cost_exactly():
    frames = frames_at([0.5, 1.5, 2.5])
    backend = Recorder(logits=[2.0, 0.0, 0.0, 1.0])
    cfg = CaderConfig(temperature=1.0, tau=0.5, r1=0.5)
    cost = Cost(forwards=3, prompt_tokens=100)
    out = run_stage1(backend, frames, QUESTION, OPTIONS, LETTERS, cfg, cost)
    # T = 1: P = softmax([2, 0, 0, 1]) -> top A, second D
    p = np.exp([2.0, 0.0, 0.0, 1.0]) / np.exp([2.0, 0.0, 0.0, 1.0]).sum()
    assert out.record == {
        "logits": [2.0, 0.0, 0.0, 1.0],
        "pred": "A",
        "margin": pytest.approx(p[0] - p[3]),
        "temperature": 1.0,
        "n_frames": 3,
        "fps": 0.5,
        "tau": 0.5,
    }
    assert out.pred == "A" and out.margin == pytest.approx(p[0] - p[3]) and out.exits is False
    assert (cost.forwards, cost.prompt_tokens) == (4, 111)
    ((kind, (prompt,), letters),) = backend.calls
    assert kind == "letter_logits" and letters == LETTERS
    assert (
        prompt.user
        == "Question: What colour is the car?\nOptions:\nA. red\nB. green\nC. blue\nD. yellow\nAnswer:"
    )
    assert (
        prompt.system.startswith("You are a video question answering assistant.") and prompt.video is frames
    )


def test_stage1_frames_pass_the_pixel_budget_and_add_to_the_cost():
    reader = Reader(20.0)
    cost = Cost(frames_decoded=5)
    sample_stage1_frames(reader, CaderConfig(max_frames=8, max_pixels=1234), cost)
    assert reader.calls == [("uniform", 1.0, None, None, 8, 1234, "backbone")] and cost.frames_decoded == 13
    sample_stage1_frames(reader, CaderConfig(max_frames=8, max_pixels=1234, frame_rule="bin_centre"), cost)
    assert reader.calls[-1] == ("uniform", 1.0, None, None, 8, 1234, "bin_centre")


def test_cost_to_dict_and_stop():
    cost = Cost(forwards=2, frames_decoded=3, prompt_tokens=4, completion_tokens=5)
    cost.stop()
    d = cost.to_dict()
    assert list(d) == ["forwards", "frames_decoded", "prompt_tokens", "completion_tokens", "seconds"]
    assert d["forwards"] == 2 and d["completion_tokens"] == 5 and 0 <= d["seconds"] < 60
    assert d["seconds"] == round(d["seconds"], 3)


# ---- Stage 2 -----------------------------------------------------------------------------------------------


def run(main, verifier, duration=300.0, cost=None, **cfg):
    cfg = CaderConfig(**{"max_frames": 500, "max_pixels": 4321, **cfg})
    reader = Reader(duration)
    f1 = reader.sample_uniform(cfg.r1, max_frames=cfg.max_frames)
    reader.calls.clear()
    cost = cost or Cost()
    rec = run_stage2(Sample("t", "1", "v.mp4", QUESTION, OPTIONS, LETTERS, None), reader, f1, "D", cfg, main, verifier,
                     cost)
    return rec, reader, cost, f1


def test_stage2_trajectory_exactly():
    # rejected [100, 130] (P_yes .2), then [200.12345, 230] accepted (.8) and answered C
    main = Recorder([windows(100, 130), windows(200.12345, 230), "<think>x</think><answer>C</answer>"])
    verifier = Recorder(yes_no=[(0.2, 0.5), (0.8, 0.1)])
    cost = Cost(forwards=1, frames_decoded=300, prompt_tokens=50)
    rec, reader, cost, f1 = run(
        main, verifier, cost=cost, max_new_tokens_propose=77, max_new_tokens_answer=88, f_max=0.9
    )
    propose0, verify0, resample, propose1, verify1, answer = rec["steps"]
    assert propose0 == {
        "phase": "propose",
        "iteration": 0,
        "context": "F1",
        "n_frames": 300,
        "tried": [],
        "raw_output": windows(100, 130),
        "parsed": parse_window(windows(100, 130), 300.0).to_dict(),
        "window": [100.0, 130.0],
        "too_broad": False,
    }
    assert verify0 == {
        "phase": "verify",
        "iteration": 0,
        "window": [100.0, 130.0],
        "crop": [100.0, 130.0],
        "r2": 8.0,
        "n_frames": 240,
        "p_yes": 0.2,
        "p_yes_vocab": 0.2,
        "p_no_vocab": 0.5,
        "f": 0.6,
        "accepted": False,
    }
    assert resample == {
        "phase": "resample",
        "iteration": 1,
        "mode": "rgr",
        "fps_map": [[100.0, 130.0, 0.6]],
        "unexplored": [[0.0, 100.0], [130.0, 300.0]],
        "n_frames_planned": 18 + 270,
        "n_frames": 288,
    }
    assert propose1["iteration"] == 1 and propose1["context"] == "rgr" and propose1["n_frames"] == 288
    assert propose1["tried"] == [[100.0, 130.0]] and propose1["window"] == [200.123, 230.0]
    assert verify1["window"] == [200.123, 230.0] and verify1["f"] == 0.9 and verify1["accepted"] is True
    assert answer == {
        "phase": "answer",
        "window": [200.123, 230.0],
        "n_frames": 239,  # 29.88 s at 8 fps
        "raw_output": "<think>x</think><answer>C</answer>",
        "parsed": {"letter": "C", "how": "answer_tag/alone", "reason": None},
        "pred": "C",
        "fallback_to_stage1": False,
    }
    assert {k: v for k, v in rec.items() if k != "steps"} == {
        "pred": "C",
        "accepted": [200.123, 230.0],
        "cycles": 2,
        "fallback": None,
        "verifier": {"model": None, "main_model": False},   # two test doubles that name no model
    }
    # cost: on top of what the caller had
    assert (
        cost.forwards == 1 + 5 and cost.prompt_tokens == 50 + 3 * 20 + 2 * 7 and cost.completion_tokens == 15
    )
    assert cost.frames_decoded == 300 + 240 + 288 + 239
    # what the models and the reader received
    kinds = [(kind, budget) for kind, _, budget in main.calls]
    assert kinds == [("generate", 77), ("generate", 77), ("generate", 88)]
    prompts = [p for _, (p,), _ in main.calls]
    assert all(p.system and QUESTION in p.user and "A. red" in p.user for p in prompts)
    assert prompts[0].system.startswith("You are a video temporal grounding assistant.")
    assert prompts[2].system.startswith("You are a video question answering assistant.")
    assert prompts[0].video is f1 and prompts[1].video is not f1 and len(prompts[1].video) == 288
    (_, (ver0,), _), (_, (ver1,), _) = verifier.calls
    assert (ver0.system, ver0.user) == verifier_prompt(QUESTION, OPTIONS, LETTERS)
    assert len(ver0.video) == 240 and ver0.video.timestamps.min() > 100 and ver0.video.timestamps.max() < 130
    assert ver1.video is prompts[2].video  # the accepted crop is what the final answer sees
    assert reader.calls == [
        ("uniform", 8.0, 100.0, 130.0, 500, 4321, "backbone"),
        ("times", 288, 4321),
        ("uniform", 8.0, 200.12345, 230.0, 500, 4321, "backbone"),
    ]


def test_stage2_uses_the_configured_window_rules():
    # breadth 50 % of a 300 s video allows a 100 s window; budget 100 frames over a 100 s crop: clip(1, .5, 4) = 1
    main = Recorder([windows(100, 200), "<answer>B</answer>"])
    rec, _, _, _ = run(
        main, Recorder(yes_no=[(0.9, 0.1)]), breadth_max_fraction=0.5, n_budget=100.0, r_min=0.5, r_max=4.0
    )
    assert rec["steps"][0]["too_broad"] is False and rec["steps"][1]["r2"] == 1.0
    main = Recorder([windows(100, 110), "<answer>B</answer>"])
    rec, _, _, _ = run(main, Recorder(yes_no=[(0.9, 0.1)]), n_budget=100.0, r_min=0.5, r_max=4.0)
    assert rec["steps"][1]["r2"] == 4.0  # 10 s crop: 10 fps capped at r_max = 4
    main = Recorder([windows(100, 200), "<answer>B</answer>"])
    rec, _, _, _ = run(
        main, Recorder(yes_no=[(0.9, 0.1)]), breadth_max_fraction=0.5, n_budget=25.0, r_min=0.5, r_max=4.0
    )
    assert rec["steps"][1]["r2"] == 0.5  # 0.25 fps raised to r_min = 0.5


def test_no_verifier_step_and_no_rgr_context_exactly():
    main = Recorder([windows(100, 130), "<answer>B</answer>"])
    rec, _, _, _ = run(main, Recorder(), variant="no_verifier")
    assert rec["steps"][1] == {
        "phase": "verify",
        "iteration": 0,
        "window": [100.0, 130.0],
        "crop": [100.0, 130.0],
        "r2": 8.0,
        "n_frames": 240,
        "p_yes": None,
        "accepted": True,
        "skipped": True,
    }
    main = Recorder([windows(100, 130), windows(50, 60)])
    rec, _, _, f1 = run(main, Recorder(yes_no=[(0.1, 0.9), (0.1, 0.9)]), variant="no_rgr", k_reflections=1)
    assert rec["steps"][2] == {"phase": "resample", "iteration": 1, "mode": "uniform_f1", "n_frames": len(f1)}
    assert rec["steps"][3]["context"] == "F1" and rec["fallback"] == "not_accepted"


def test_stage2_failure_names_its_cause():
    class Broken(Recorder):
        def yes_no(self, prompts):
            raise KeyError("no Yes token")

    with pytest.raises(Stage2Failure) as info:
        run(Recorder([windows(10, 40)]), Broken())
    err = info.value
    assert isinstance(err.cause, KeyError) and str(err).startswith("KeyError: ")
    assert err.partial["pred"] is None and err.partial["cycles"] == 1


# ---- parse records -------------------------------------------------------------------------------------------


def test_parse_records_exactly():
    assert WindowParse((1.0, 2.0), (2.0, 1.0), "keyed", swapped=True, n_windows=2).to_dict() == {
        "window": [1.0, 2.0],
        "raw": [2.0, 1.0],
        "how": "keyed",
        "swapped": True,
        "clipped": False,
        "reason": None,
        "n_windows": 2,
    }
    assert WindowParse(None, None, None, clipped=True, reason="x").to_dict() == {
        "window": None,
        "raw": None,
        "how": None,
        "swapped": False,
        "clipped": True,
        "reason": "x",
        "n_windows": 1,
    }
    assert AnswerParse("C", "reply/alone").to_dict() == {"letter": "C", "how": "reply/alone", "reason": None}
    assert parse_window("", 10).reason == "empty_output"


@pytest.mark.parametrize("text", ['"relevant_windows": [[1e999, 20]]', '"relevant_windows": [[20, 1e999]]'])
def test_a_window_with_an_infinite_end_is_no_window(text):
    assert parse_window(text, 100.0).window is None


def test_a_video_under_a_second_still_gets_its_window():
    assert parse_window("[0.1, 0.4]", 0.5).window == (0.1, 0.4)


# ---- config bounds and prompts --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "bad, message",
    [
        ({"variant": "nope"}, "unknown variant 'nope'; choose one of full, no_stage2"),
        ({"crop_edge": "wrap"}, "crop_edge must be one of"),
        ({"p_yes_mode": "x"}, "p_yes_mode must be one of"),
        ({"r1": 0.0}, "r1 must be a finite positive number, got 0.0"),
        ({"r_min": 9.0}, r"r_min \(9.0\) must not exceed r_max \(8.0\)"),
        ({"breadth_max_fraction": 0.0}, "breadth_max_fraction must be in"),
        ({"breadth_max_fraction": 1.5}, "breadth_max_fraction must be in"),
        ({"k_reflections": -1}, "k_reflections must be >= 0, got -1"),
        ({"f_min": -0.1}, "f_min must be >= 0"),
        ({"max_frames": 0}, "max_frames must be >= 1, got 0"),
        ({"decode_workers": 0}, "decode_workers must be >= 1 or None, got 0"),
        ({"tau": float("nan")}, "tau must be finite"),
        ({"delta": float("inf")}, "delta must be finite"),
    ],
)
def test_config_rejects_with_a_message(bad, message):
    with pytest.raises(ValueError, match=message):
        CaderConfig(**bad)


def test_config_accepts_the_boundaries():
    cfg = CaderConfig(
        r_min=2.0,
        r_max=2.0,
        breadth_max_fraction=1.0,
        k_reflections=0,
        f_min=0.0,
        max_frames=1,
        decode_workers=1,
    )
    assert cfg.reflections == 0 and cfg.to_dict()["r_min"] == 2.0
    assert "crop_edge" in [f.name for f in fields(CaderConfig)] and len([f.name for f in fields(CaderConfig)]) == len(cfg.to_dict())


def test_prompt_seconds_round_once():
    assert (
        format_seconds(0.0499) == "0" and format_seconds(2100.46) == "2100.5" and format_seconds(7.0) == "7"
    )
    with pytest.raises(ValueError, match="time must be finite"):
        format_seconds(float("inf"))
    _, user = verifier_prompt(QUESTION, OPTIONS, LETTERS)
    assert QUESTION in user and "D. yellow" in user


def test_the_stage1_fingerprint_names_the_frame_rule_and_refuses_the_other():
    from cader.evaluate.method.stage1_reuse import frames_fingerprint, mismatch

    backbone, bins = CaderConfig(max_frames=8), CaderConfig(max_frames=8, frame_rule="bin_centre")
    assert frames_fingerprint(backbone) == {"r1": 1.0, "max_frames": 8, "max_pixels": 65_536, "frame_rule": "backbone"}
    # a record written before the rule was named was made with bin centres: it stands in for a bin-centre run only
    assert frames_fingerprint(bins) == {"r1": 1.0, "max_frames": 8, "max_pixels": 65_536}
    old = {"model": "m", "frames": frames_fingerprint(bins), "sample": "s"}
    assert mismatch(old, {**old, "frames": frames_fingerprint(bins)}) is None
    assert "Stage-1 frame settings differ" in mismatch(old, {**old, "frames": frames_fingerprint(backbone)})
