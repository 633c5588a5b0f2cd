"""The verifier threshold counts videos, not questions (calibrate/ltt.py `select_verifier_threshold` with
``clusters``; calibrate/verifier.py passes each first crop's video): by hand, equal to the question-counting test
when every video has one question, and by simulation with a shared video difficulty.

Simulation: each video draws u ~ N(0, sigma^2), which shifts the log-odds that every one of its first crops misses
the evidence: P(miss | P_yes = p, u) = expit(logit(0.4 (1 - p)) + u), P_yes uniform. The miss rate among accepted
crops (P_yes >= t) of fresh videos is then known exactly (Gauss-Hermite over u, a fine grid over p), and a
threshold whose rate exceeds alpha_v is a violation; the guarantee allows violations in at most delta of the
draws. With 12 videos x 60 crops and sigma = 1.5 the crop-counting test breaks it and the bound on effective counts
holds: violations 0.315 and 0.125 over these 200 draws (a threshold certified in 0.925 and 0.71 of them); 0.288 and
0.088 over 1,000 draws of another seed (`violation_rates`).
"""

import json

import numpy as np
import pytest
from cader.calibrate.binomial import clopper_pearson_upper
from cader.calibrate.clusters import design_effect_from_counts, design_effects_at
from cader.calibrate.ltt import select_verifier_threshold
from cader.calibrate.verifier import calibrate_verifier, verify_observations
from scipy.special import expit, logit

ALPHA_V, DELTA = 0.15, 0.1
NODES, WEIGHTS = np.polynomial.hermite_e.hermegauss(40)
WEIGHTS = WEIGHTS / WEIGHTS.sum()
P_GRID = (np.arange(4000) + 0.5) / 4000


def base_miss(p):
    return 0.4 * (1.0 - p)


def test_one_question_per_video_is_the_question_counting_test():
    rng = np.random.default_rng(3)
    p_yes = rng.uniform(0, 1, 1500)
    miss = rng.uniform(0, 1, 1500) < base_miss(p_yes)
    plain = select_verifier_threshold(p_yes, miss, ALPHA_V, DELTA)
    videos = select_verifier_threshold(p_yes, miss, ALPHA_V, DELTA, clusters=[("b", f"v{i}") for i in range(1500)])
    assert plain["threshold"] is not None and not plain["cluster_bound"] and videos["cluster_bound"]
    for key in ("threshold", "n_accepted", "miss_rate", "upper_bound_miss", "certified"):
        assert videos[key] == plain[key], key
    assert videos["design_effect"] == 1.0


def test_the_bound_is_on_the_counts_divided_by_the_design_effect_by_hand():
    # at threshold 0.5 four videos of 30 accepted crops each, all 6 misses in video 0; below it 40 crops of 40
    # other videos, every one a miss, so the laxer candidate 0.05 fails and the sequence stops at 0.5
    p_yes = np.r_[np.full(120, 0.9), np.full(40, 0.1)]
    miss = np.r_[np.ones(6, bool), np.zeros(114, bool), np.ones(40, bool)]
    videos = np.r_[np.repeat(np.arange(4), 30), np.arange(10, 50)]
    # n = 120, E = 6, p = 0.05: sum_c (e_c - n_c p)^2 = 4.5^2 + 3 x 1.5^2 = 27; within clusters
    # sum_c [e_c (1 - p)^2 + (n_c - e_c) p^2] = 6 x 0.9025 + 114 x 0.0025 = 5.7 = E (1 - p), so cross = 21.3 and
    # d = 1 + 21.3 x 119 / (120 x 5.7) = 4.7057...
    assert design_effect_from_counts([30, 30, 30, 30], [6, 0, 0, 0]) == pytest.approx(1 + 21.3 * 119 / (120 * 5.7))
    out = select_verifier_threshold(p_yes, miss, 0.3, 0.1, min_accepted=20, candidates=np.array([0.5, 0.05]),
                                    clusters=videos)
    d = design_effects_at(p_yes, ~miss, videos, np.array([0.5]))[0]
    assert d >= 1 + 21.3 * 119 / (120 * 5.7) - 1e-9   # the direct estimate, or the Kish floor when larger
    assert out["threshold"] == 0.5 and out["design_effect"] == pytest.approx(d)
    assert out["upper_bound_miss"] == pytest.approx(clopper_pearson_upper(6 / d, 120 / d, 0.1))
    assert out["upper_bound_miss"] > clopper_pearson_upper(6, 120, 0.1)   # wider than counting crops
    assert out["n_accepted"] == 120 and out["miss_rate"] == pytest.approx(0.05)
    crops = select_verifier_threshold(p_yes, miss, 0.2, 0.1, min_accepted=20, candidates=np.array([0.5, 0.05]))
    assert crops["threshold"] == 0.5 and crops["upper_bound_miss"] == pytest.approx(clopper_pearson_upper(6, 120, 0.1))
    # at alpha_v = 0.2 counting crops certifies 0.5; counting videos does not, and says by how much
    strict = select_verifier_threshold(p_yes, miss, 0.2, 0.1, min_accepted=20, candidates=np.array([0.5, 0.05]),
                                       clusters=videos)
    assert strict["threshold"] is None and f"(design effect {d:.3g})" in strict["reason"]


def _first_crop_rows(n, rng):
    """Rows whose first verified crop misses the evidence more often the lower its P_yes: all about one file, which
    two benchmarks (a test and a held-out split of one folder) list in turn."""
    rows = []
    for i in range(n):
        p = float(rng.uniform())
        crop = [300.0, 320.0] if rng.uniform() < base_miss(p) else [95.0, 110.0]
        bench = ("synthetic", "synthetic_heldout")[i % 2]
        rows.append({"benchmark": bench, "sample_id": f"{bench}-{i}", "video": "synthetic/videos/one.mp4",
                     "meta": {"evidence_window": [100.0, 104.0]}, "route": "stage2",
                     "stage2": {"steps": [{"phase": "verify", "crop": crop, "p_yes": p}]}})
    return rows


def test_crops_of_one_file_under_two_benchmarks_are_one_video_and_certify_nothing(tmp_path):
    path = tmp_path / "p.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in _first_crop_rows(600, np.random.default_rng(0))))
    _, _, videos, _ = verify_observations([path])
    assert len(videos) == 600 and len(set(videos)) == 1
    # counting crops certifies a threshold on these very crops, so the refusal below is the video count's doing
    assert calibrate_verifier([path], ALPHA_V, DELTA, min_accepted=20, cluster_bound=False)["threshold"] is not None
    # keyed by (benchmark, video) these were two videos and a threshold was certified on one file's crops
    out = calibrate_verifier([path], ALPHA_V, DELTA, min_accepted=20)
    assert out["threshold"] is None and out["videos"] == 1
    assert out["reason"].startswith("the verified crops come from 1 video(s)") and "refusal" in out["reason"]


def fresh_video_miss_rate(thresholds):
    """The exact miss rate among accepted first crops (P_yes >= t) of fresh videos, per threshold."""
    shifted = logit(base_miss(P_GRID))[:, None] + SIGMA * NODES[None, :]
    per_p = expit(shifted) @ WEIGHTS
    return np.array([per_p[P_GRID >= t].mean() for t in thresholds])


SIGMA, N_VIDEOS, PER_VIDEO, DRAWS = 1.5, 12, 60, 200


def violation_rates(seed=0):
    rng = np.random.default_rng(seed)
    counts = {"questions": [0, 0], "videos": [0, 0]}
    videos = np.repeat(np.arange(N_VIDEOS), PER_VIDEO)
    for _ in range(DRAWS):
        p_yes = rng.uniform(0, 1, videos.size)
        u = rng.normal(0.0, SIGMA, N_VIDEOS)[videos]
        miss = rng.uniform(0, 1, videos.size) < expit(logit(base_miss(p_yes)) + u)
        for name, clusters in (("questions", None), ("videos", videos)):
            t = select_verifier_threshold(p_yes, miss, ALPHA_V, DELTA, clusters=clusters)["threshold"]
            if t is not None:
                counts[name][1] += 1
                counts[name][0] += bool(fresh_video_miss_rate([t])[0] > ALPHA_V)
    return {name: (v / DRAWS, found / DRAWS) for name, (v, found) in counts.items()}


@pytest.mark.slow
def test_a_shared_video_difficulty_breaks_the_crop_counting_bound_and_the_video_bound_holds():
    rates = violation_rates()
    slack = 3 * np.sqrt(DELTA * (1 - DELTA) / DRAWS)
    (q_violations, _), (v_violations, v_found) = rates["questions"], rates["videos"]
    assert q_violations > DELTA + slack, rates     # counting crops as independent trials breaks the guarantee
    assert v_violations <= DELTA + slack, rates    # effective counts over videos keep it
    assert v_found >= 0.3, rates                   # ... while still certifying a threshold often
