"""Scoring forwards (Stage-1 letters, verifier Yes/No) of the HF backend: no KV cache, no attention mask, a token
budget per forward, and the same scores as one prompt at a time."""

import numpy as np
import pytest
import torch
from cader.evaluate.backends.base import Prompt
from cader.evaluate.backends.hf import HFBackend
from cader.vlm.batch import token_budget_groups
from cader.vlm.video import Frames


def test_token_budget_groups_by_hand():
    # lengths 5, 3, 9, 3, 4 -> shortest first: 3 (1), 3 (3), 4 (4), 5 (0), 9 (2)
    # budget 12: [1, 3] pads to 2 x 3 = 6; + 4 -> 3 x 4 = 12 fits; + 5 -> 4 x 5 = 20 does not
    assert token_budget_groups([5, 3, 9, 3, 4], max_tokens=12, max_prompts=8) == [[1, 3, 4], [0], [2]]
    # a prompt over the budget runs alone, and so does one that would push a group over
    assert token_budget_groups([20, 2, 2], max_tokens=10, max_prompts=8) == [[1, 2], [0]]
    # the prompt count caps a group too
    assert token_budget_groups([1, 1, 1, 1, 1], max_tokens=100, max_prompts=2) == [[0, 1], [2, 3], [4]]
    assert token_budget_groups([], max_tokens=10, max_prompts=2) == []
    with pytest.raises(ValueError, match="max_tokens"):
        token_budget_groups([1], max_tokens=0, max_prompts=1)


def _prompts():
    rng = np.random.default_rng(0)
    video = Frames(rng.integers(0, 255, (4, 64, 64, 3), dtype=np.uint8), np.arange(4) * 2.0, np.arange(4) * 4, 2.0)
    return [Prompt(system="You answer.", user=user, video=video if with_video else None)
            for user, with_video in (("Which colour?", True),
                                     ("Which colour is the square in the last part of the clip, A, B, C or D?", True),
                                     ("Yes or no?", False))]


class _Forwards:
    """What each forward of the model was given and gave back, and every attention mask SDPA saw."""

    def __init__(self, model, monkeypatch):
        self.calls, self.masks = [], []
        model.register_forward_hook(self._record, with_kwargs=True)
        sdpa = torch.nn.functional.scaled_dot_product_attention

        def spy(*args, **kwargs):
            self.masks.append(kwargs.get("attn_mask"))
            return sdpa(*args, **kwargs)

        monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", spy)

    def _record(self, module, args, kwargs, output):
        self.calls.append({"batch": int(kwargs["input_ids"].shape[0]), "cache": output.past_key_values,
                           "has_mask": kwargs.get("attention_mask") is not None})


def test_scoring_forwards_return_no_cache_build_no_mask_and_score_as_one_prompt_alone(tiny_model_dir, monkeypatch):
    prompts = _prompts()
    alone = HFBackend(str(tiny_model_dir), dtype="fp32", batch_size=1)
    batched = HFBackend(str(tiny_model_dir), dtype="fp32", batch_size=3, attn_implementation="sdpa")
    seen = _Forwards(batched.model, monkeypatch)
    letters = batched.letter_logits(prompts, ["A", "B", "C", "D"])
    verdicts = batched.yes_no(prompts)
    assert len({x.prompt_tokens for x in letters}) == 3  # three lengths: the batch really was padded
    assert [c["batch"] for c in seen.calls] == [3, 3]  # one forward per call, all three prompts in it
    assert all(c["cache"] is None for c in seen.calls)  # use_cache=False: nothing built to be thrown away
    assert not any(c["has_mask"] for c in seen.calls)
    assert seen.masks and all(m is None for m in seen.masks)  # SDPA ran causal: no (B, 1, L, L) mask anywhere
    want_letters = alone.letter_logits(prompts, ["A", "B", "C", "D"])
    want_verdicts = alone.yes_no(prompts)
    for got, want in zip(letters, want_letters):
        assert got.prompt_tokens == want.prompt_tokens
        assert got.logits == pytest.approx(want.logits, abs=1e-5)
    for got, want in zip(verdicts, want_verdicts):
        assert (got.p_yes, got.p_no) == pytest.approx((want.p_yes, want.p_no), rel=1e-5)


def test_a_prompt_over_the_token_budget_runs_alone(tiny_model_dir, monkeypatch):
    prompts = _prompts()
    lengths = [x.prompt_tokens for x in HFBackend(str(tiny_model_dir), dtype="fp32").letter_logits(prompts, ["A"])]
    shortest, longest = min(lengths), max(lengths)
    # room for the two shorter prompts together, not for the longest with anything
    backend = HFBackend(str(tiny_model_dir), dtype="fp32", batch_size=8, max_batch_tokens=2 * sorted(lengths)[1])
    seen = _Forwards(backend.model, monkeypatch)
    out = backend.letter_logits(prompts, ["A"])
    assert [x.prompt_tokens for x in out] == lengths  # results come back in the prompts' order
    assert sorted(c["batch"] for c in seen.calls) == [1, 2]
    assert shortest < longest
    # generation shares the budget, counted with its new tokens: 2 x (middle + 4) > budget -> one prompt each
    seen.calls.clear()
    backend.generate(prompts, 4)
    assert seen.calls and {c["batch"] for c in seen.calls} == {1}
