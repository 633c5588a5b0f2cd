"""scripts/miniature_seeds.py: one seed's bars read off its summary.json, and the spread over seeds."""

import importlib.util
import json
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
seeds = importlib.import_module("cader.scripts.miniature_seeds")


def _rate(k, n):
    return {"k": k, "n": n, "rate": k / n if n else None}


def _facts(s1_k=36, trend_p=0.001, contains=(15, 18), chance_overlap=0.15, routed=(7, 15), table2=None, flags=()):
    return {
        "stage1_heldout": {**_rate(s1_k, 48), "chance": 1 / 6},
        "margin_trend": {"auroc": 0.8, "p_value": trend_p},
        "stage2": {"proposals": {"contains_evidence": _rate(*contains), "chance_overlap": chance_overlap},
                   "routed_gain": {"routed": {"n": 18, "stage1": _rate(routed[0], 18),
                                              "final": _rate(routed[1], 18)}}},
        "table2": {v: {"accuracy": _rate(k, 32)} for v, k in (table2 or {"full": 28, "no_stage2": 21}).items()},
        "cost_vs_uniform": {"ratio_full_over_uniform": {"forwards": 0.55, "frames_decoded": 0.5}},
        "red_flags": list(flags),
    }


def test_a_seed_that_shows_the_method_holds_every_bar():
    got = seeds.seed_numbers(_facts())
    assert all(got["bars"].values()), got["bars"]
    assert json.loads(json.dumps(got))["bars"] == got["bars"]   # plain JSON types (scipy hands out numpy ones)
    # 15 of 18 proposals against a 15 % random window: P(X >= 15 | Bin(18, 0.15)) is about 2.3e-10
    assert got["proposals_evidence_p"] == pytest.approx(2.27e-10, rel=0.01)
    assert got["routed_stage1_accuracy"] == pytest.approx(7 / 18) and got["routed_final_accuracy"] == pytest.approx(15 / 18)


@pytest.mark.parametrize(("change", "bar"), [
    ({"s1_k": 15}, "stage1_2x_chance"),                       # 31 % < 2 x 16.7 %
    ({"trend_p": 0.2}, "margin_trend"),
    ({"contains": (6, 18)}, "proposals_hold_evidence"),       # p = 0.042: above chance, not far above
    ({"routed": (7, 7)}, "stage2_beats_stage1"),
    ({"table2": {"full": 20, "no_stage2": 21}}, "ablation_order"),
    ({"flags": ["no Table 2 row differs significantly from `full` (smallest McNemar p = 0.3)"]}, "ablation_order"),
])
def test_each_bar_fails_on_its_own_defect(change, bar):
    got = seeds.seed_numbers(_facts(**change))
    assert [b for b, held in got["bars"].items() if not held] == [bar]


def test_the_spread_is_min_median_max_over_the_seeds_that_measured_it():
    per_seed = {0: seeds.seed_numbers(_facts(s1_k=36)), 1: seeds.seed_numbers(_facts(s1_k=30)),
                2: seeds.seed_numbers(_facts(s1_k=12, trend_p=None))}
    out = seeds.aggregate(per_seed)
    assert out["stage1_accuracy"] == {"min": 12 / 48, "median": 30 / 48, "max": 36 / 48, "n": 3}
    assert out["margin_auroc"]["n"] == 3 and out["table2"]["full"]["median"] == pytest.approx(28 / 32)
    assert out["bars_held"]["stage1_2x_chance"] == 2 and out["bars_held"]["margin_trend"] == 2
    assert seeds.spread([None, None]) == {"min": None, "median": None, "max": None, "n": 0}
