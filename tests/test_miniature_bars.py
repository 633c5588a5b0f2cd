"""scripts/miniature_bars.py: each bar of the miniature decided on hand-built summary numbers."""

import importlib

import pytest

bars = importlib.import_module("cader.scripts.miniature_bars")


def _rate(k, n):
    return {"k": k, "n": n, "rate": k / n if n else None}


def _facts(s1_k=36, auroc=0.9, at_bound=False, exit_rate=0.4, parsed=(18, 18), contains=(15, 18), gain_low=0.1,
           full=28, no_stage2=21, gap_p=0.01):
    return {
        "stage1_heldout": {**_rate(s1_k, 48), "chance": 1 / 6},
        "margin_trend": {"auroc": auroc, "p_value": 0.001},
        "calibration": {"temperature": 1.5, "tau": 0.3, "exit_rate": exit_rate, "at_bound": at_bound,
                        "bounds": [0.05, 20.0], "no_exit": not exit_rate},
        "stage2": {"proposals": {"parsed": _rate(*parsed), "contains_evidence": _rate(*contains),
                                 "chance_overlap": 0.15},
                   "routed_gain": {"routed": {"stage1": _rate(7, 18), "final": _rate(15, 18),
                                              "gain_video_bootstrap": {"low": gain_low, "high": 0.7}}}},
        "table2": {"full": {"accuracy": _rate(full, 32)}, "no_stage2": {"accuracy": _rate(no_stage2, 32)}},
        "table2_gaps": {"no_stage2": gap_p, "no_rgr": None},
    }


def test_a_run_that_shows_the_method_holds_every_bar_and_says_so():
    values = bars.bar_values(_facts())
    assert list(values) == list(bars.BARS) and all(held for held, _ in values.values())
    assert bars.verdict_lines(_facts())[-1] == "verdict: the method works here (every bar holds)"
    # 15 of 18 proposals against a 15 % random window: P(X >= 15 | Bin(18, 0.15)) is about 2.3e-10
    assert bars.evidence_p_value(_facts()["stage2"]["proposals"]) == pytest.approx(2.27e-10, rel=0.01)


@pytest.mark.parametrize(("change", "bar"), [
    ({"s1_k": 15}, "stage1_2x_chance"),                 # 31 % < 2 x 16.7 %
    ({"auroc": 0.79}, "margin_auroc"),
    ({"at_bound": True}, "temperature_inside"),
    ({"exit_rate": 0.0}, "certified_exit"),
    ({"parsed": (14, 18)}, "proposals_parse"),          # 78 % < 80 %
    ({"contains": (4, 18)}, "proposals_hold_evidence"),  # p = 0.18: what a random window gives
    ({"gain_low": 0.0}, "stage2_beats_stage1"),         # the interval touches 0
    ({"full": 21}, "full_beats_no_stage2"),             # a tie is not a win
    ({"gap_p": 0.2}, "full_beats_no_stage2"),           # no row differs significantly
])
def test_each_bar_fails_on_its_own_defect_and_the_verdict_names_it(change, bar):
    values = bars.bar_values(_facts(**change))
    assert [b for b, (held, _) in values.items() if not held] == [bar]
    lines = bars.verdict_lines(_facts(**change))
    assert lines[-1] == f"verdict: 1 of {len(bars.BARS)} bars do not hold ({bar})"
    assert sum(line.startswith("DOES NOT HOLD") for line in lines) == 1


def test_a_missing_number_fails_its_bar_instead_of_crashing():
    values = bars.bar_values({})
    assert not any(held for held, _ in values.values())
    assert all(isinstance(reading, str) for _, reading in values.values())
