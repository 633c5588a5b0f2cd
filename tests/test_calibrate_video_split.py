"""The precision guarantee when questions on one video share its difficulty, split by question or by video.

Simulation: every video draws a random effect u ~ N(0, sigma^2) that shifts the log-odds of every one of its
questions being answered right, at the margins Stage 1 gives them (the logits come from
cader.dev.calibration_rows.synthetic_logits, so without the effect P_top1 of softmax(z / T_true) is exactly the
probability of being right). Each repetition draws a calibration set of videos, splits it into fit and selection
parts with `split_fit_select` (by="question" or by="video"), fits T on the fit part and selects tau on the other with
the package's precision mode (`select_tau_precision`), and measures the error among exits on a large pool of fresh
videos (the mean over exits of each question's error probability on a fresh video, the video effect integrated
out, so without Bernoulli or pool noise). A violation is an exit
error above alpha; precision mode promises violations in at most delta of the repetitions.

What the simulation shows (alpha = delta = 0.1, min_exits = 50; violation rate, question split / video split):
- questions independent (sigma = 0; 240 videos x 4 questions, 120 repetitions): 0.03 / 0.03, both hold;
- 10 videos x 100 questions, sigma = 3 (200 repetitions): 0.205 / 0.295: the question-level split breaks the
  guarantee, and so does the video-level split (more often: its selection part has half as many videos). The
  split keeps the temperature fit and the selection on different videos, which the guarantee's argument assumes,
  but the Clopper-Pearson bound still counts questions as independent trials. Holding the guarantee here needs a
  bound that counts videos (for example the bound on the effective sample size n / design effect); when
  calibrate/tau.py gets one, the second assertion below should turn into "holds".
- the same effect over 320 videos x 3 questions (120 repetitions): both splits hold it again.
"""

import numpy as np
import pytest
from cader.calibrate.margin import margins
from cader.calibrate.records import Stage1Record, split_fit_select
from cader.calibrate.tau import select_tau_precision
from cader.calibrate.temperature import fit_temperature
from cader.dev.calibration_rows import synthetic_logits
from scipy.special import expit, logit

TRUE_T, K = 1.5, 4
ALPHA, DELTA = 0.1, 0.1
MIN_EXITS = 50
POOL_QUESTIONS = 20_000
NODES, WEIGHTS = np.polynomial.hermite_e.hermegauss(40)  # E over u ~ N(0, 1) as a weighted sum
WEIGHTS = WEIGHTS / WEIGHTS.sum()


def _p_top(z):
    p = np.exp((z - z.max(axis=1, keepdims=True)) / TRUE_T)
    return np.clip(p.max(axis=1) / p.sum(axis=1), 1e-12, 1 - 1e-12)


def _fresh_video_error(z, sigma):
    """P(wrong) of each question asked about a fresh video: 1 - E_u[expit(logit(P_top1) + u)], u ~ N(0, sigma^2)."""
    shifted = logit(_p_top(z))[:, None] + sigma * NODES[None, :]
    return 1.0 - expit(shifted) @ WEIGHTS


def _draw(rng, n_videos, per_video, sigma):
    """Logits, gold letters, video ids and P(right) of n_videos * per_video questions."""
    z, _ = synthetic_logits(n_videos * per_video, K, TRUE_T, rng)
    p_top = _p_top(z)
    videos = np.repeat(np.arange(n_videos), per_video)
    p_right = expit(logit(p_top) + rng.normal(0.0, sigma, n_videos)[videos]) if sigma else p_top
    top = z.argmax(axis=1)
    wrong_letter = (top + rng.integers(1, K, top.size)) % K
    gold = np.where(rng.random(top.size) < p_right, top, wrong_letter)
    return z, gold, videos, p_right


def _records(gold, videos):
    """Stage1Records carrying only what split_fit_select reads (benchmark, sample id, video)."""
    return [Stage1Record("sim", i, "sim", f"{i:06d}", [], np.zeros(0), int(g), video=f"v{v}")
            for i, (g, v) in enumerate(zip(gold, videos))]  # fmt: skip


def violation_rates(n_videos, per_video, sigma, repetitions, seed=0):
    """{split unit: (share of repetitions whose exit error on fresh videos exceeds alpha, share that exit)}."""
    rng = np.random.default_rng(seed)
    pool_z, _ = synthetic_logits(POOL_QUESTIONS, K, TRUE_T, rng)
    pool_error = _fresh_video_error(pool_z, sigma)
    counts = {"question": [0, 0], "video": [0, 0]}
    for rep in range(repetitions):
        z, gold, videos, _ = _draw(rng, n_videos, per_video, sigma)
        records = _records(gold, videos)
        for unit, count in counts.items():
            fit, sel = split_fit_select(records, seed=rep, by=unit)
            t_hat = fit_temperature(z[fit], gold[fit]).temperature
            chosen = select_tau_precision(margins(z[sel], t_hat), z[sel].argmax(axis=1) == gold[sel],
                                          alpha=ALPHA, delta=DELTA, min_exits=MIN_EXITS)  # fmt: skip
            if chosen.no_exit:
                continue
            count[1] += 1
            exits = margins(pool_z, t_hat) >= chosen.tau
            count[0] += bool(pool_error[exits].mean() > ALPHA)
    return {unit: (v / repetitions, e / repetitions) for unit, (v, e) in counts.items()}


def slack(repetitions):
    """Three binomial standard deviations of a violation rate near delta (Monte-Carlo noise)."""
    return 3 * np.sqrt(DELTA * (1 - DELTA) / repetitions)


@pytest.mark.slow
def test_independent_questions_hold_the_guarantee_under_either_split():
    rates = violation_rates(n_videos=240, per_video=4, sigma=0.0, repetitions=120)
    for unit, (violations, exits) in rates.items():
        assert exits >= 0.8, (unit, rates)  # the check is not vacuous
        assert violations <= DELTA + slack(120), (unit, rates)


@pytest.mark.slow
def test_a_shared_video_difficulty_breaks_the_question_counting_bound_under_either_split():
    rates = violation_rates(n_videos=10, per_video=100, sigma=3.0, repetitions=200)
    (q_violations, q_exits), (v_violations, v_exits) = rates["question"], rates["video"]
    assert q_exits >= 0.5 and v_exits >= 0.5, rates
    assert q_violations > DELTA + slack(200), rates  # the question-level split breaks the guarantee ...
    assert v_violations > DELTA + slack(200), rates  # ... and the video-level split alone does not restore it
    # the same per-video effect over many videos with few questions each: the bound holds again
    spread = violation_rates(n_videos=320, per_video=3, sigma=3.0, repetitions=120)
    assert all(v <= DELTA + slack(120) and e >= 0.5 for v, e in spread.values()), spread
