"""Proof it learns (issue 3, item 6): the shipped tiny recipe, end to end through `train/sft.py`, on the synthetic mix.

data -> labels -> training -> export is checked on what the model can only know from pixels: the colour of the
shape in a *held-out* video (synthetic_heldout, never trained on), read two ways from the exported model:
- the way CADER Stage 1 reads it (App. C.1 prompt, thinking off so the chat template pre-fills an empty think
  block, option-letter logits at the first answer position, through the HF backend): the six options are in the
  fixed order of the training mix (synth.canonical_colour_options) and the mix holds direct-answer rows, so the
  letter must be right far above chance (1/6);
- the CoT way: the training prompt plus the start of the CoT target ("... a large"), whose next-token logits over
  the six colour words must pick the shown colour far above chance.
The training loss must fall, too.
"""
import csv
import shutil
from pathlib import Path

import pytest
import torch
from scipy.stats import binom

REPO = Path(__file__).resolve().parents[1]
COLOURS = ("red", "green", "blue", "yellow", "cyan", "magenta")   # cader.evaluate.benchmarks.synth.EVENT_COLOURS


def _heldout_inputs(processor, data_root: Path):
    from cader.evaluate.benchmarks import load_benchmark, video_path
    from cader.evaluate.benchmarks.synth_train import SYSTEM_TEXT, prompt_with_options
    from cader.vlm.messages import build_messages, encode, render
    from cader.vlm.video import VideoReader

    samples, errors = load_benchmark("synthetic_heldout", data_root)
    assert not errors and len(samples) >= 40
    assert all(s.options == list(COLOURS) for s in samples)   # six options in the training mix's fixed order
    out = []
    for s in samples:
        frames = VideoReader(video_path(s, data_root)).sample_uniform(1.0, max_frames=64, max_pixels=6144)
        t_s, t_e = s.meta["evidence_window"]
        messages = build_messages(prompt_with_options(s.question, s.options), system=SYSTEM_TEXT, video=frames)
        # the CoT target of the training mix (synth.cot_text) up to the colour word
        text = render(processor, messages, enable_thinking=True)
        text += f"<think>The video is mostly a grey background. Between {t_s:.0f}s and {t_e:.0f}s a large"
        out.append((s, frames, encode(processor, [], video=frames, text=text)))
    return out


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_tiny_recipe_learns_colour_from_pixels(tiny_model_dir, tmp_path, monkeypatch, capsys):
    from cader.evaluate.backends.base import Prompt
    from cader.evaluate.backends.hf import HFBackend
    from cader.evaluate.benchmarks.synth_data import make_synthetic_data
    from cader.evaluate.method.prompts import stage1_prompt
    from cader.train.sft import main

    # the shipped config's relative paths (runs/tiny/...) resolve inside tmp_path
    monkeypatch.chdir(tmp_path)
    shutil.copytree(tiny_model_dir, "runs/tiny/model")
    make_synthetic_data("runs/tiny/data", n_eval=1, n_heldout=48)
    assert main(["--config", str(REPO / "configs/train/cot_mix_tiny.yaml")]) == 0
    export = tmp_path / "runs/tiny/sft/export"

    with open(next((tmp_path / "runs/tiny/sft/logs").glob("version_*/metrics.csv"))) as f:
        rows = list(csv.DictReader(f))
    losses = [float(r["train_loss"]) for r in rows if r.get("train_loss")]
    assert len(losses) >= 100
    assert sum(losses[-20:]) / 20 < 0.3 * sum(losses[:20]) / 20

    backend = HFBackend(str(export))
    tok = backend.tokenizer
    colour_ids = [tok(" " + c, add_special_tokens=False)["input_ids"][0] for c in COLOURS]
    assert len(set(colour_ids)) == len(COLOURS)
    colour_hits = letter_hits = 0
    inputs = _heldout_inputs(backend.processor, tmp_path / "runs/tiny/data/eval")
    with torch.inference_mode():
        for sample, frames, feats in inputs:
            logits = backend.model(**feats, logits_to_keep=1).logits[0, -1]
            colour_hits += COLOURS[int(logits[colour_ids].argmax())] == sample.meta["colour"]
            system, user = stage1_prompt(sample.question, sample.options, sample.letters)
            (scores,) = backend.letter_logits([Prompt(user, system=system, video=frames)], sample.letters)
            letter_hits += sample.letters[max(range(len(scores.logits)), key=scores.logits.__getitem__)] == sample.answer
    n = len(inputs)
    with capsys.disabled():
        print(f"\n[learns] held-out colour accuracy {colour_hits}/{n} (chance 1/6); Stage-1 letter accuracy "
              f"{letter_hits}/{n} (chance 1/{len(sample.options)}); loss {sum(losses[:20]) / 20:.2f} -> {sum(losses[-20:]) / 20:.2f}")
    # Both must beat chance (1/6) by a binomial test. The Stage-1 letter accuracy is what CADER reads, and it is stable
    # across runs (34-35/48 here), so it gets the strict level. The free-form colour-name probe moves more from run to
    # run (19-32/48 observed: float results differ between processes, e.g. in thread setup, and 650 steps amplify
    # that), so it only has to beat chance at the 1 % level.
    assert binom.sf(letter_hits - 1, n, 1 / len(sample.options)) < 1e-5, letter_hits
    assert binom.sf(colour_hits - 1, n, 1 / len(COLOURS)) < 1e-2, colour_hits
