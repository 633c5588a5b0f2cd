"""Algorithm 1 control flow with scripted model outputs (test doubles; the real code uses the HF backend)."""

import numpy as np
import pytest
from cader.evaluate.backends.base import Backend, Generation, LetterLogits, YesNo
from cader.evaluate.benchmarks.base import Sample
from cader.evaluate.method.config import CaderConfig
from cader.evaluate.method.stage1 import Cost, run_stage1, sample_stage1_frames
from cader.evaluate.method.stage2 import Stage2Failure, run_stage2
from cader.vlm.sampling import uniform_times
from cader.vlm.video import Frames

LETTERS = ["A", "B", "C", "D"]
OPTIONS = ["red", "green", "blue", "yellow"]


def frames_at(times):
    times = np.asarray(times, dtype=np.float64)
    return Frames(np.zeros((len(times), 2, 2, 3), np.uint8), times, np.arange(len(times)), 1.0)


class FakeReader:
    """Stands in for VideoReader: records what was sampled, returns blank frames at the requested times."""

    def __init__(self, duration):
        self.duration = duration
        self.calls = []

    def sample_uniform(self, fps, start=None, end=None, max_frames=None, max_pixels=None, rule="bin_centre"):
        self.calls.append(("uniform", fps, start, end))
        times = uniform_times(start or 0.0, self.duration if end is None else end, fps)
        return frames_at(times[:max_frames])

    def sample_times(self, times, max_pixels=None):
        self.calls.append(("times", len(times)))
        return frames_at(times)


class ScriptedBackend(Backend):
    def __init__(self, texts=(), p_yes=(), logits=None):
        self.texts, self.p_yes, self.logits = list(texts), list(p_yes), logits
        self.prompts = []

    def letter_logits(self, prompts, letters):
        self.prompts += [("logits", p) for p in prompts]
        return [LetterLogits(list(self.logits), 10) for _ in prompts]

    def yes_no(self, prompts):
        self.prompts += [("yes_no", p) for p in prompts]
        out = []
        for _ in prompts:
            value = self.p_yes.pop(0)
            if isinstance(value, Exception):
                raise value
            out.append(YesNo(value, 1 - value, 7))
        return out

    def generate(self, prompts, max_new_tokens):
        self.prompts += [("generate", p) for p in prompts]
        return [Generation(self.texts.pop(0), 20, 5) for _ in prompts]


def window(s, e):
    return f'<think>looking</think>"relevant_windows": [["{s}", "{e}"]]'


def run(main, verifier, duration=3600.0, **cfg):
    cfg = CaderConfig(**{"max_frames": 64, **cfg})
    reader = FakeReader(duration)
    f1 = reader.sample_uniform(cfg.r1, max_frames=cfg.max_frames)
    cost = Cost()
    rec = run_stage2(Sample("t", "1", "v.mp4", "Q?", OPTIONS, LETTERS, None), reader, f1, "A", cfg, main, verifier, cost)
    return rec, reader, cost, f1


def phases(rec):
    return [s["phase"] for s in rec["steps"]]


def test_accept_on_first_proposal():
    main = ScriptedBackend([window(2300, 2330), "<think>hm</think><answer>C</answer>"])
    verifier = ScriptedBackend(p_yes=[0.7])
    rec, reader, cost, _ = run(main, verifier)
    assert rec["pred"] == "C" and rec["accepted"] == [2300.0, 2330.0] and rec["fallback"] is None
    assert rec["cycles"] == 1 and phases(rec) == ["propose", "verify", "answer"]
    verify = rec["steps"][1]
    assert (
        verify["crop"] == [2300.0, 2330.0] and verify["r2"] == 8.0 and verify["n_frames"] == 64
    )  # 240 capped
    assert verify["p_yes"] == 0.7 and verify["accepted"] is True
    assert reader.calls[-1] == ("uniform", 8.0, 2300.0, 2330.0)
    assert cost.forwards == 3 and cost.prompt_tokens == 20 + 7 + 20 and cost.completion_tokens == 10
    # final prompt names the crop and the valid letters, thinking on
    final = main.prompts[-1][1]
    assert "(2300s ~ 2330s)" in final.user and final.enable_thinking and "A, B, C, D." in final.user


def test_case_study_reject_then_accept_after_one_reflection():
    # App. B: [2100, 2130] rejected at 0.378, then [2300, 2330] accepted at 0.679.
    main = ScriptedBackend([window(2100, 2130), window(2300, 2330), "<answer>B</answer>"])
    verifier = ScriptedBackend(p_yes=[0.378, 0.679])
    rec, _, cost, f1 = run(main, verifier)
    assert phases(rec) == ["propose", "verify", "resample", "propose", "verify", "answer"]
    assert rec["pred"] == "B" and rec["cycles"] == 2 and rec["accepted"] == [2300.0, 2330.0]
    assert rec["steps"][1]["f"] == pytest.approx(0.778) and rec["steps"][1]["accepted"] is False
    resample = rec["steps"][2]
    assert resample["mode"] == "rgr" and resample["fps_map"] == [[2100.0, 2130.0, 0.778]]
    assert resample["unexplored"] == [[0.0, 2100.0], [2130.0, 3600.0]]
    assert resample["n_frames_planned"] == 23 + 2100 + 1470 and resample["n_frames"] == 64
    second = rec["steps"][3]
    assert second["context"] == "rgr" and second["tried"] == [[2100.0, 2130.0]]
    reflection_prompt = main.prompts[1][1].user
    assert reflection_prompt.startswith(
        "The following time windows have already been tried and failed: [2100, 2130]"
    )
    assert main.prompts[1][1].video is not f1
    assert cost.forwards == 2 + 2 + 1


def test_too_broad_returns_a1_without_verification():
    main = ScriptedBackend([window(0, 1000)])  # 1000 s > 20 % of 3600 s
    verifier = ScriptedBackend(p_yes=[])
    rec, _, cost, _ = run(main, verifier)
    assert rec["pred"] == "A" and rec["fallback"] == "too_broad" and rec["cycles"] == 0
    assert phases(rec) == ["propose"] and rec["steps"][0]["too_broad"] is True
    assert verifier.prompts == [] and cost.forwards == 1


def test_budget_exhausted_returns_a1_with_no_extra_call():
    main = ScriptedBackend([window(10, 40), window(100, 130), window(200, 230)])
    verifier = ScriptedBackend(p_yes=[0.1, 0.2, 0.59])
    rec, _, cost, _ = run(main, verifier)
    assert rec["pred"] == "A" and rec["fallback"] == "not_accepted" and rec["accepted"] is None
    assert rec["cycles"] == 3
    assert phases(rec) == ["propose", "verify", "resample"] * 2 + ["propose", "verify"]
    assert cost.forwards == 6  # 3 proposals + 3 verifications; no final answer call
    # fps map after the second rejection: [10,40] at .5 and [100,130] at .6
    assert rec["steps"][5]["fps_map"] == [[10.0, 40.0, 0.5], [100.0, 130.0, 0.6]]
    assert rec["steps"][6]["tried"] == [[10.0, 40.0], [100.0, 130.0]]


def test_no_reflection_variant_stops_after_one_cycle():
    main = ScriptedBackend([window(10, 40)])
    rec, _, cost, _ = run(main, ScriptedBackend(p_yes=[0.3]), variant="no_reflection")
    assert rec["fallback"] == "not_accepted" and rec["cycles"] == 1 and cost.forwards == 2


def test_no_verifier_accepts_first_proposal():
    main = ScriptedBackend([window(10, 40), "<answer>D</answer>"])
    verifier = ScriptedBackend(p_yes=[RuntimeError("must not be called")])
    rec, _, _, _ = run(main, verifier, variant="no_verifier")
    assert rec["pred"] == "D" and rec["steps"][1]["skipped"] is True and verifier.prompts == []


def test_no_rgr_reuses_f1_for_reflections():
    main = ScriptedBackend([window(10, 40), window(100, 130), "<answer>B</answer>"])
    rec, reader, _, f1 = run(main, ScriptedBackend(p_yes=[0.1, 0.9]), variant="no_rgr")
    assert rec["steps"][2] == {"phase": "resample", "iteration": 1, "mode": "uniform_f1", "n_frames": len(f1)}
    assert main.prompts[1][1].video is f1
    assert not any(call[0] == "times" for call in reader.calls)


def test_unparseable_proposal_and_unparseable_answer_fall_back_to_a1():
    rec, _, _, _ = run(ScriptedBackend(["I am not sure."]), ScriptedBackend())
    assert rec["fallback"] == "unparseable_proposal" and rec["pred"] == "A"
    assert rec["steps"][0]["parsed"]["reason"] == "no_window_found"
    rec, _, _, _ = run(ScriptedBackend([window(10, 40), "gibberish qqq"]), ScriptedBackend(p_yes=[0.9]))
    assert rec["pred"] == "A" and rec["steps"][-1]["fallback_to_stage1"] is True and rec["fallback"] is None


def test_short_proposal_is_expanded_and_reversed_out_of_range_is_fixed():
    main = ScriptedBackend(['"relevant_windows": [["3650", "3598"]]', "<answer>A</answer>"])
    rec, _, _, _ = run(main, ScriptedBackend(p_yes=[0.95]))
    assert rec["steps"][0]["window"] == [3598.0, 3600.0] and rec["steps"][0]["parsed"]["swapped"]
    assert rec["steps"][1]["crop"] == [3590.0, 3600.0]  # 10 s about 3599, shifted back inside the video
    main = ScriptedBackend(['"relevant_windows": [["3650", "3598"]]', "<answer>A</answer>"])
    rec, _, _, _ = run(main, ScriptedBackend(p_yes=[0.95]), crop_edge="clip")
    assert rec["steps"][1]["crop"] == [3594.0, 3600.0]  # --crop_edge clip: cut at the end


def test_verifier_error_keeps_partial_trajectory():
    main = ScriptedBackend([window(10, 40)])
    with pytest.raises(Stage2Failure) as info:
        run(main, ScriptedBackend(p_yes=[RuntimeError("verifier crashed")]))
    assert "verifier crashed" in str(info.value)
    assert [s["phase"] for s in info.value.partial["steps"]] == ["propose", "verify"]


def test_stage1_margin_and_exit():
    frames = frames_at([0.5, 1.5])
    # z = [4, 0, 0, 0], T = 2: P = e^2 / (e^2 + 3) = 0.7112, others 0.0963 -> M = 0.6150
    out = run_stage1(
        ScriptedBackend(logits=[4.0, 0, 0, 0]), frames, "Q", OPTIONS, LETTERS, CaderConfig(), Cost()
    )
    p1 = np.exp(2) / (np.exp(2) + 3)
    assert out.pred == "A" and out.margin == pytest.approx(p1 - 1 / (np.exp(2) + 3)) and not out.exits
    assert out.record["logits"] == [4.0, 0, 0, 0] and out.record["n_frames"] == 2
    out = run_stage1(
        ScriptedBackend(logits=[0, 30.0, 0, 0]), frames, "Q", OPTIONS, LETTERS, CaderConfig(), Cost()
    )
    assert out.pred == "B" and out.exits
    out = run_stage1(
        ScriptedBackend(logits=[0, 30.0, 0, 0]), frames, "Q", OPTIONS, LETTERS, CaderConfig(tau=1.01), Cost()
    )
    assert not out.exits


# ---- each constant and switch of the method, where a one-line change would otherwise pass ------------------------


class VocabYesNo(ScriptedBackend):
    """A verifier whose P_yes and P_no over the whole vocabulary do not sum to 1 (as a real model's do not)."""

    def __init__(self, pairs):
        super().__init__()
        self.pairs = list(pairs)

    def yes_no(self, prompts):
        self.prompts += [("yes_no", p) for p in prompts]
        return [YesNo(*self.pairs.pop(0), 7) for _ in prompts]


@pytest.mark.parametrize("p_yes, accepted", [(0.60, True), (0.5999, False), (0.6001, True)])
def test_segment_accepted_iff_p_yes_at_least_delta(p_yes, accepted):
    main = ScriptedBackend([window(100, 130), "<answer>C</answer>"])
    rec, _, _, _ = run(main, ScriptedBackend(p_yes=[p_yes]), variant="no_reflection")
    assert rec["steps"][1]["accepted"] is accepted
    assert (rec["pred"], rec["fallback"]) == (("C", None) if accepted else ("A", "not_accepted"))


def test_p_yes_is_the_vocabulary_probability_by_default():
    # P(Yes) = 0.5, P(No) = 0.2 over the vocabulary: 0.5 < delta, rejected; renormalised it would be 0.714
    main = ScriptedBackend([window(100, 130)])
    rec, _, _, _ = run(main, VocabYesNo([(0.5, 0.2)]), variant="no_reflection")
    verify = rec["steps"][1]
    assert verify["p_yes"] == 0.5 and verify["accepted"] is False and verify["f"] == pytest.approx(0.9)
    assert (verify["p_yes_vocab"], verify["p_no_vocab"]) == (0.5, 0.2)
    main = ScriptedBackend([window(100, 130), "<answer>B</answer>"])
    rec, _, _, _ = run(main, VocabYesNo([(0.5, 0.2)]), variant="no_reflection", p_yes_mode="yes_no")
    assert rec["steps"][1]["p_yes"] == pytest.approx(0.5 / 0.7) and rec["pred"] == "B"
    main = ScriptedBackend([window(100, 130)])
    rec, _, _, _ = run(main, VocabYesNo([(0.0, 0.0)]), variant="no_reflection", p_yes_mode="yes_no")
    assert rec["steps"][1]["p_yes"] == 0.0  # nothing on either token: no evidence, not a division by zero


def test_final_answer_sees_the_dense_crop_not_f1():
    main = ScriptedBackend([window(100, 104), "<answer>C</answer>"])
    rec, _, cost, f1 = run(main, ScriptedBackend(p_yes=[0.9]), max_frames=100)
    crop = rec["steps"][1]["crop"]
    assert crop == [97.0, 107.0] and rec["steps"][1]["r2"] == 8.0
    final = main.prompts[-1][1]
    assert final.video is not f1 and len(final.video) == 80 == rec["steps"][-1]["n_frames"]  # 10 s at 8 fps
    assert final.video.timestamps.min() > 97.0 and final.video.timestamps.max() < 107.0
    assert "(97s ~ 107s)" in final.user
    assert cost.frames_decoded == 80  # the crop is decoded once and reused (F1 is the caller's)


def test_thinking_off_for_stage1_and_verifier_on_for_proposal_and_answer():
    frames = frames_at([0.5, 1.5])
    backend = ScriptedBackend(logits=[1.0, 0, 0, 0])
    run_stage1(backend, frames, "Q", OPTIONS, LETTERS, CaderConfig(), Cost())
    ((kind, prompt),) = backend.prompts
    assert kind == "logits" and prompt.enable_thinking is False and prompt.video is frames
    assert prompt.user.endswith("Answer:") and prompt.system.startswith("You are a video question answering")
    main = ScriptedBackend([window(100, 130), "<answer>C</answer>"])
    verifier = ScriptedBackend(p_yes=[0.9])
    run(main, verifier)
    assert [p.enable_thinking for _, p in main.prompts] == [True, True]
    assert [p.enable_thinking for _, p in verifier.prompts] == [False]


def test_stage1_samples_the_whole_video_at_one_fps():
    reader = FakeReader(120.0)
    cost = Cost()
    frames = sample_stage1_frames(reader, CaderConfig(), cost)
    assert reader.calls == [("uniform", 1.0, None, None)]
    assert len(frames) == 120 == cost.frames_decoded
    frames = sample_stage1_frames(FakeReader(120.0), CaderConfig(max_frames=50), Cost())
    assert len(frames) == 50  # over the backbone's frame budget: uniformly capped


def test_reflection_context_samples_unexplored_time_at_r1():
    # rejected [100, 130] at P_yes 0.2 -> f = 0.6: 18 frames there, the other 270 s of a 300 s video at r1
    main = ScriptedBackend([window(100, 130), window(200, 230), "<answer>B</answer>"])
    rec, _, _, _ = run(main, ScriptedBackend(p_yes=[0.2, 0.9]), duration=300.0)
    assert rec["steps"][2]["n_frames_planned"] == 18 + 270
    main = ScriptedBackend([window(100, 130), window(200, 230), "<answer>B</answer>"])
    rec, _, _, _ = run(main, ScriptedBackend(p_yes=[0.2, 0.9]), duration=300.0, r1=0.5)
    assert rec["steps"][2]["n_frames_planned"] == 18 + 135
