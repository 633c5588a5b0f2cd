"""Proof the miniature (tiny Qwen3-VL + synthetic data) learns the method's roles from pixels: the shipped tiny recipe, end to end through
`train/sft.py`, on the synthetic mix, probed on the held-out split (never trained on).

Videos are 128 s with a 1-6 s coloured event inside a 16 s light scene (cader.dev.synthetic.media), so the
1 fps Stage-1 pass (32 frames, one every 4 s) misses some of the brief events. The export is probed in every CADER
role the way CADER calls it (tests/role_probe.py): each must beat what a model blind to the pixels gets,
by a one-sided binomial (or rank) test:
- Stage 1 (C.1 logits, thinking off) is at least twice chance, right where its frames showed the
  event, and more often right on its larger-margin half than on its smaller one (the routing signal, Fig. 5);
- the proposal (C.2) parses into windows that differ from video to video and hold the evidence (the grounding the
  tiny model gets from its pre-training stand-in, scripts/make_tiny_model.py, must survive the SFT);
- the verifier's P(Yes) (C.3) ranks crops with the event above crops without it (Mann-Whitney);
- the final answer (C.4) on the scene crop beats chance, and beats Stage 1 on Stage 1's low-margin half (the
  samples CADER routes to Stage 2).
The training loss must fall, too.
"""
import csv

import numpy as np
import pytest
from scipy.stats import binom, mannwhitneyu


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_tiny_recipe_learns_the_cader_roles_from_pixels(shipped_tiny_run, capsys):
    from cader.evaluate.backends.hf import HFBackend
    from role_probe import probe_roles

    tmp_path = shipped_tiny_run   # the README's main job, run once per session (tests/conftest.py)
    export = tmp_path / "runs/tiny/sft/export"

    with open(next((tmp_path / "runs/tiny/sft/logs").glob("version_*/metrics.csv"))) as f:
        rows = list(csv.DictReader(f))
    losses = [float(r["train_loss"]) for r in rows if r.get("train_loss")]
    assert len(losses) >= 100
    assert sum(losses[-20:]) / 20 < 0.3 * sum(losses[:20]) / 20

    probe = probe_roles(HFBackend(str(export)), tmp_path / "runs/tiny/data/eval", limit=48)
    s = probe.summary()
    n, chance = s["n"], s["chance"]
    with capsys.disabled():
        print(f"\n[learns] {s}")
    assert n == 48 and chance["window"] == 1 / 8
    # Stage 1: at least twice chance, better than chance by a binomial test, and knows when it saw the event
    assert s["stage1_hits"] >= 2 * chance["letter"] * n, s
    assert binom.sf(s["stage1_hits"] - 1, n, chance["letter"]) < 1e-3, s
    assert s["stage1_accuracy_seen"] > s["stage1_accuracy_unseen"], s
    order = np.argsort(probe.stage1_margin, kind="stable")
    low, high = order[: n // 2], order[n // 2 :]
    stage1 = np.array(probe.stage1_correct)
    assert stage1[high].sum() > stage1[low].sum(), s   # accuracy rises with the margin
    # proposals parse (App. C.2 format), move with the video, and find the evidence far more often than a window
    # at a random scene slot would
    assert s["proposal_parsed"] >= 0.8 * n, s
    assert len(set(probe.proposal_text)) >= 4, probe.proposal_text
    assert binom.sf(s["proposal_covers"] - 1, n, chance["window"]) < 1e-6, s
    # the verifier separates crops with and without the evidence
    assert mannwhitneyu(probe.p_yes_with, probe.p_yes_without, alternative="greater").pvalue < 1e-3, s
    # the answer on the crop that shows the event beats chance, and Stage 1 where Stage 1 is unsure
    assert binom.sf(s["answer_hits"] - 1, n, chance["letter"]) < 1e-3, s
    answer = np.array(probe.answer_correct)
    assert answer[low].sum() > stage1[low].sum(), s
