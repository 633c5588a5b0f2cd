"""The SFT loss where the labels are: logits only at positions whose next token is labelled.

transformers' causal-LM loss runs `lm_head` on every position and upcasts the logits to fp32 before the
cross-entropy: at the paper's 10,240 tokens and a 151,936-word vocabulary that is ~6 GiB of fp32 logits (and as much
again for their gradient) while 80 % or more of a real sample's positions carry no label (the video and the prompt).
Here the last hidden states are gathered at the labelled positions first, so `lm_head`, the fp32 upcast and the
cross-entropy see only those rows; the loss is the same number (the mean over labelled tokens, as transformers'
`ForCausalLMLoss` without `num_items_in_batch`, which is how `SFTModule` always called it).

Why not a fused kernel (liger-kernel's fused linear cross-entropy): it is Triton, so it does not run on the CPU
where this project's tests and the tiny recipe run, and it would be a second code path; the gather is exact, plain
torch, and already takes the tail from growing with the sequence to growing with the target (B15).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from cader.train.turns import IGNORE_INDEX


def next_token_labels(labels: torch.Tensor) -> torch.Tensor:
    """The label each position predicts: `labels` shifted left by one, IGNORE_INDEX after the last token (as
    transformers' `ForCausalLMLoss` shifts them)."""
    return F.pad(labels, (0, 1), value=IGNORE_INDEX)[..., 1:]


def labelled_rows(hidden: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(hidden states of the positions that predict a label, (n, hidden); those labels, (n,)).

    hidden: (batch, length, hidden) last hidden states; labels: (batch, length), IGNORE_INDEX where unlabelled.
    """
    targets = next_token_labels(labels).to(hidden.device)
    keep = targets != IGNORE_INDEX
    return hidden[keep], targets[keep]


def labelled_loss(hidden: torch.Tensor, labels: torch.Tensor, lm_head: torch.nn.Module) -> torch.Tensor:
    """Mean next-token cross-entropy over the labelled positions, with `lm_head` run on those rows only.

    The logits are upcast to fp32 as transformers does; a batch with no label gives NaN, as transformers' mean does.
    """
    rows, targets = labelled_rows(hidden, labels)
    logits = lm_head(rows).float()
    return F.cross_entropy(logits, targets, reduction="mean")
