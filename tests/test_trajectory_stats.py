"""Stage-2 measures against stated evidence windows, by hand."""

import pytest
from cader.evaluate.trajectory_stats import (
    contains,
    cost_comparison,
    overlap,
    proposal_stats,
    rate,
    routed_gain,
    verifier_stats,
)


def record(answer, s1, final, evidence, window=None, verifies=(), accepted=None, fallback=None, duration=100.0):
    steps = []
    if window is not None or fallback == "unparseable_proposal":
        steps.append({"phase": "propose", "window": window})
    steps += [{"phase": "verify", "crop": crop, "p_yes": p} for crop, p in verifies]
    return {"answer": answer, "stage1": {"pred": s1}, "pred": final, "correct": final == answer, "duration": duration,
            "meta": {"evidence_window": evidence} if evidence else {}, "error": None,
            "stage2": {"steps": steps, "accepted": accepted, "fallback": fallback}}


def test_windows_by_hand():
    assert overlap([0, 10], [5, 20]) == 5 and overlap([0, 10], [10, 20]) == 0 and overlap([0, 10], [12, 20]) == 0
    assert contains([0, 10], [2, 3]) and not contains([0, 10], [9, 11])


def test_rate_interval_and_chance_test():
    r = rate(8, 10, chance=1 / 6)
    assert r["rate"] == 0.8 and r["ci95"][0] == pytest.approx(0.4439, abs=1e-4) and r["ci95"][1] == pytest.approx(0.9748, abs=1e-4)
    assert r["p_above_chance"] < 1e-4
    assert rate(2, 12, chance=1 / 6)["p_above_chance"] > 0.5
    assert rate(0, 0)["rate"] is None


def test_proposal_stats_parse_overlap_contain_and_chance():
    records = [
        record("A", "B", "A", [40, 42], window=[32, 48]),          # contains
        record("A", "B", "A", [40, 42], window=[41, 60]),          # overlaps only
        record("A", "B", "B", [40, 42], window=[0, 16]),           # misses
        record("A", "B", "B", [40, 42], fallback="unparseable_proposal"),
        {"answer": "A", "stage1": {"pred": "A"}, "pred": "A", "correct": True, "stage2": None},  # exited
    ]
    s = proposal_stats(records)
    assert s["routed"] == 4 and s["proposed"] == 4 and s["parsed"]["k"] == 3
    assert s["overlaps_evidence"]["k"] == 2 and s["contains_evidence"]["k"] == 1
    # a 16 s window on a 100 s video meets [40, 42] for starts in [24, 42]: 18 / 84; a 19 s one: 21 / 81
    assert s["chance_overlap"] == pytest.approx((18 / 84 * 2 + 21 / 81) / 3)


def test_verifier_stats_split_by_evidence_and_auroc():
    records = [record("A", "B", "A", [40, 42], window=[32, 48],
                      verifies=[([32, 48], 0.9), ([0, 16], 0.2), ([60, 76], 0.4), ([38, 54], 0.3)])]
    v = verifier_stats(records)
    assert v["n_with_evidence"] == 2 and v["n_without"] == 2
    assert v["mean_p_yes_with_evidence"] == pytest.approx(0.6) and v["mean_p_yes_without"] == pytest.approx(0.3)
    # pairs (pos, neg): 0.9>0.2, 0.9>0.4, 0.3>0.2, 0.3<0.4 -> 3/4
    assert v["auroc"] == pytest.approx(0.75)


def test_routed_gain_pairs_stage1_with_final():
    records = [
        record("A", "B", "A", [1, 2], window=[0, 16], accepted=[0, 16]),   # corrected
        record("A", "A", "B", [1, 2], window=[0, 16], accepted=[0, 16]),   # overturned
        record("A", "B", "A", [1, 2], window=[0, 16], accepted=[0, 16]),   # corrected
        record("A", "B", "B", [1, 2], window=[50, 66], fallback="not_accepted"),
    ]
    g = routed_gain(records)
    assert g["routed"]["n"] == 4 and g["routed"]["stage1"]["k"] == 1 and g["routed"]["final"]["k"] == 2
    assert g["accepted"]["n"] == 3 and g["accepted"]["corrected"] == 2 and g["accepted"]["overturned"] == 1
    assert g["accepted"]["mcnemar"]["discordant"] == 3 and g["fallbacks"] == {"not_accepted": 1}


def _cost_record(sample_id, correct, forwards, frames, route="stage2", error=None):
    return {"sample_id": sample_id, "correct": correct, "route": route, "error": error,
            "cost": {"forwards": forwards, "frames_decoded": frames}}


def test_cost_comparison_pairs_by_sample_and_divides_the_means():
    # full exits on s1 and s2 (1 forward, 32 frames) and routes s3; uniform routes all three (5 forwards, 96 frames)
    full = [_cost_record("s1", True, 1, 32, "exit"), _cost_record("s2", True, 1, 32, "exit"),
            _cost_record("s3", False, 5, 96), _cost_record("only_full", True, 1, 32, "exit")]
    uniform = [_cost_record(s, c, 5, 96) for s, c in (("s1", True), ("s2", False), ("s3", True))]
    out = cost_comparison(full, uniform)
    assert out["n"] == 3                                        # only_full has no pair
    assert out["full"]["forwards"] == pytest.approx(7 / 3)     # (1 + 1 + 5) / 3
    assert out["full"]["frames_decoded"] == pytest.approx(160 / 3)
    assert out["ratio_full_over_uniform"]["forwards"] == pytest.approx((7 / 3) / 5)       # 0.467
    assert out["ratio_full_over_uniform"]["frames_decoded"] == pytest.approx((160 / 3) / 96)  # 0.556
    assert out["meets_goal"] is True
    assert out["full"]["accuracy"]["k"] == 2 and out["uniform_stage2"]["accuracy"]["k"] == 2
    assert out["mcnemar"]["only_a"] == 1 and out["mcnemar"]["only_b"] == 1   # s2 vs s3
    assert out["full"]["stage2_rate"] == pytest.approx(1 / 3)


def test_cost_comparison_misses_the_goal_when_either_cost_is_above_it():
    full = [_cost_record("s1", True, 1, 90, "exit")]
    uniform = [_cost_record("s1", True, 5, 96)]
    out = cost_comparison(full, uniform)
    assert out["ratio_full_over_uniform"]["forwards"] == pytest.approx(0.2)
    assert out["meets_goal"] is False                          # frames 90/96 > 0.6


def test_cost_comparison_without_shared_samples_does_not_meet_the_goal():
    assert cost_comparison([_cost_record("a", True, 1, 1)], [_cost_record("b", True, 1, 1)])["meets_goal"] is False


def test_routed_gain_and_cost_comparison_resample_videos():
    # three videos: the corrections all come from video v1, so resampling videos can draw v1 zero times
    records = [dict(record("A", "B", "A", None, window=[0, 16], accepted=[0, 16]), video="v1", benchmark="b")
               for _ in range(3)]
    records += [dict(record("A", "A", "A", None, window=[0, 16], accepted=[0, 16]), video=v, benchmark="b")
                for v in ("v2", "v3")]
    boot = routed_gain(records)["routed"]["gain_video_bootstrap"]
    assert boot["resampled"] == "clusters" and boot["n_clusters"] == 3 and boot["n"] == 5
    assert boot["diff"] == pytest.approx(3 / 5) and boot["low"] == 0.0  # a draw of v2 and v3 only gains nothing
    assert routed_gain([])["routed"]["gain_video_bootstrap"] is None
    full = [dict(_cost_record(f"s{i}", i < 2, 1, 1), video=f"v{i // 2}") for i in range(4)]
    uniform = [dict(_cost_record(f"s{i}", True, 5, 5), video=f"v{i // 2}") for i in range(4)]
    diff = cost_comparison(full, uniform)["accuracy_diff_video_bootstrap"]
    assert diff["n_clusters"] == 2 and diff["diff"] == pytest.approx(-0.5) and diff["high"] == 0.0
