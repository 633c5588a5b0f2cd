"""The HF backend generates a batch of prompts in one `model.generate` (left padding) with the texts and token
counts of one prompt at a time; a row that ended early is cut after its end token."""

import numpy as np
import torch
from cader.evaluate.backends.base import Prompt
from cader.evaluate.backends.hf import HFBackend, until_end
from cader.vlm.video import Frames


def test_a_row_is_cut_after_its_first_end_token():
    assert until_end(torch.tensor([5, 6, 2, 0, 0]), {2}).tolist() == [5, 6, 2]
    assert until_end(torch.tensor([5, 6, 7]), {2}).tolist() == [5, 6, 7]   # max_new_tokens reached
    assert until_end(torch.tensor([9, 3, 4]), {3, 4}).tolist() == [9, 3]   # several end tokens (Qwen: two)
    assert until_end(torch.tensor([], dtype=torch.long), {2}).tolist() == []


def test_a_batch_generates_what_each_prompt_generates_alone(tiny_model_dir):
    rng = np.random.default_rng(0)
    video = Frames(rng.integers(0, 255, (4, 64, 64, 3), dtype=np.uint8), np.arange(4) * 2.0, np.arange(4) * 4, 2.0)
    prompts = [Prompt(system="You answer.", user=user, video=video if with_video else None)
               for user, with_video in (("Which colour?", True), ("Name the window where the event happens, "
                                                                  "in seconds, as JSON.", True), ("Yes or no?", False))]
    alone = HFBackend(str(tiny_model_dir), dtype="fp32", batch_size=1).generate(prompts, 12)
    batched = HFBackend(str(tiny_model_dir), dtype="fp32", batch_size=3).generate(prompts, 12)
    assert batched == alone
    assert len({g.prompt_tokens for g in alone}) == 3   # three prompt lengths: the batch really was padded
