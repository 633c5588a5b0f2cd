"""App. C prompt templates and the CADER config."""

import pytest
from cader.evaluate.method import prompts
from cader.evaluate.method.config import VARIANTS, CaderConfig

Q = "What color is the car?"
OPTS = ["Red", "B. Blue", "(C) Green", "Yellow"]
LET = ["A", "B", "C", "D"]


def test_stage1_prompt_verbatim():
    system, user = prompts.stage1_prompt(Q, OPTS, LET)
    assert system.endswith(
        "Output ONLY a single capital letter corresponding to your answer. No explanation. "
        "No punctuation. Nothing else."
    )
    assert user == "Question: What color is the car?\nOptions:\nA. Red\nB. Blue\nC. Green\nD. Yellow\nAnswer:"


def test_proposal_first_and_reflection():
    system, first = prompts.proposal_prompt(Q, OPTS, LET, duration=3600.0, min_crop=10.0)
    assert system.startswith("You are a video temporal grounding assistant.")
    assert "The video is 3600 seconds long." in first
    assert "The window must be at least 10 seconds wide." in first
    assert first.endswith('"relevant_windows": [["<start_seconds>", "<end_seconds>"]]')
    assert "already been tried" not in first
    _, refl = prompts.proposal_prompt(Q, OPTS, LET, 3600.0, 10.0, tried=[(2100.0, 2130.0), (5.25, 20.0)])
    assert refl.startswith(
        "The following time windows have already been tried and failed: [2100, 2130], [5.2, 20]\n"
        "Please identify a different time window that is less likely to overlap with the above. "
        "Pick ONLY ONE single time window."
    )
    assert "The window must be at least 10s wide." in refl
    assert refl.index("Question:") > refl.index("The video is")


def test_verifier_and_final_prompts():
    _, ver = prompts.verifier_prompt(Q, OPTS, LET)
    assert ver.startswith(
        "Does this video clip contain relevant visual evidence for answering the question below?"
    )
    assert ver.endswith("Answer Yes or No only.")
    _, fin = prompts.final_prompt(Q, OPTS, LET, 2300.0, 2330.0)
    assert fin.startswith("This is the most relevant segment of the video (2300s ~ 2330s).")
    assert fin.endswith("<answer>X</answer>\nWhere X is a single capital letter: A, B, C, D.")


def test_format_helpers():
    assert prompts.format_seconds(2100.0) == "2100"
    assert prompts.format_seconds(12.46) == "12.5"
    with pytest.raises(ValueError):
        prompts.format_options(["a"], ["A", "B"])
    with pytest.raises(ValueError):
        prompts.format_seconds(float("nan"))


def test_config_defaults_are_the_paper_values():
    c = CaderConfig()
    assert (c.r1, c.temperature, c.tau, c.delta, c.k_reflections, c.f_min) == (1.0, 2.0, 0.97, 0.60, 2, 0.4)
    assert (c.n_budget, c.r_min, c.r_max, c.min_crop) == (512, 1.0, 8.0, 10.0)
    assert (c.breadth_max_seconds, c.breadth_max_fraction) == (1200.0, 0.2)
    # P_yes is "the token probability assigned to Yes" (C.3); the minimum crop holds at the video edges too
    assert (c.p_yes_mode, c.crop_edge, c.f_max) == ("vocab", "shift", 1.0)


def test_config_variants_switch_the_table2_components():
    flags = {
        v: (c.runs_stage2, c.routes_all, c.uses_verifier, c.reflections, c.uses_rgr)
        for v in VARIANTS
        for c in [CaderConfig(variant=v)]
    }
    assert flags["full"] == (True, False, True, 2, True)
    assert flags["no_stage2"][0] is False
    assert flags["uniform_stage2"] == (True, True, True, 2, True)
    assert flags["no_verifier"] == (True, False, False, 2, True)
    assert flags["no_reflection"] == (True, False, True, 0, True)
    assert flags["no_rgr"] == (True, False, True, 2, False)


@pytest.mark.parametrize(
    "bad",
    [{"variant": "nope"}, {"r_min": 9.0}, {"temperature": 0.0}, {"k_reflections": -1}, {"crop_edge": "x"}],
)
def test_config_rejects_bad_values(bad):
    with pytest.raises(ValueError):
        CaderConfig(**bad)
