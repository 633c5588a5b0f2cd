"""B15: peak memory of the SFT loss tail at Qwen3-VL-8B's widths, logits at the labelled positions / at all positions.

The tail is what follows the language model's last layer: `lm_head` (hidden 4096 x vocabulary 151,936, the 8B's
sizes from `cader.vlm.flops`; the model's depth is cut to nothing, only the head is built) and the cross-entropy,
forward and backward, in bf16 with the fp32 upcast of the logits, on `positions` last hidden states of which the last
`labelled` carry a label (a sample's target is its end: the video and the prompt before it carry none).
  all_positions  today's path before the change: `lm_head` on every position, transformers' `ForCausalLMLoss`;
  labelled       `cader.train.loss.labelled_loss` (what `SFTModule.sft_loss` runs): rows gathered first.
Each path runs in a fresh process (`harness.run_fresh`); the figure is the growth of the resident set's high-water
mark from just before the tail to its end (the head's weight and the hidden states already exist; the head's weight
gradient, trained in full SFT, is counted on both paths). Goal: labelled / all_positions <= 0.4 at 2,048 positions
with 256 labelled.

    python scripts/bench/loss_tail.py [--positions 2048] [--labelled 256]     # ~2 min on 2 cores, ~6 GiB
"""

from __future__ import annotations

from cader.scripts.bench.harness import PeakRSS, emit, run_fresh, status_kib
from jsonargparse import CLI

PATHS = ("all_positions", "labelled")
GOAL = 0.4


def measure(path: str, positions: int, labelled: int, hidden: int, vocab: int, seed: int = 0) -> dict:
    """Peak resident growth (bytes) of one forward+backward of the loss tail along `path`, in this process."""
    import torch
    from cader.train.loss import IGNORE_INDEX, labelled_loss
    from transformers.loss.loss_utils import ForCausalLMLoss

    torch.manual_seed(seed)
    head = torch.nn.Linear(hidden, vocab, bias=False, dtype=torch.bfloat16)
    states = torch.randn(1, positions, hidden, dtype=torch.bfloat16).requires_grad_(True)
    labels = torch.full((1, positions), IGNORE_INDEX)
    labels[0, positions - labelled:] = torch.randint(0, vocab, (labelled,))
    peak = PeakRSS()
    start = status_kib("VmRSS") * 1024
    peak.start()
    if path == "all_positions":
        loss = ForCausalLMLoss(head(states), labels, vocab)
    elif path == "labelled":
        loss = labelled_loss(states, labels, head)
    else:
        raise ValueError(f"path {path!r}: one of {PATHS}")
    loss.backward()
    top = peak.stop()
    return {"path": path, "loss": loss.item(), "peak_growth_bytes": top - start,
            "weight_grad_bytes": head.weight.grad.numel() * head.weight.grad.element_size()}


def main(positions: int = 2_048, labelled: int = 256, hidden: int | None = None, vocab: int | None = None) -> dict:
    """Measure both paths in fresh processes and report labelled / all_positions.

    Args:
        positions: Hidden states in the sequence (the loss tail's input).
        labelled: Positions whose next token carries a label (the end of the sequence).
        hidden: Hidden size (default: Qwen3-VL-8B's 4,096).
        vocab: Vocabulary (default: Qwen3-VL-8B's 151,936).
    """
    from cader.vlm.flops import QWEN3_VL_8B_TEXT

    kwargs = {"positions": positions, "labelled": labelled, "hidden": hidden or QWEN3_VL_8B_TEXT.hidden,
              "vocab": vocab or QWEN3_VL_8B_TEXT.vocab}
    # one after the other: each fresh process has the machine's memory to itself
    runs = {path: run_fresh("cader.scripts.bench.loss_tail:measure", {"path": path, **kwargs}) for path in PATHS}
    gib = {p: round(r["peak_growth_bytes"] / 2**30, 3) for p, r in runs.items()}
    ratio = runs["labelled"]["peak_growth_bytes"] / runs["all_positions"]["peak_growth_bytes"]
    result = {**kwargs, "peak_growth_gib": gib, "loss": {p: r["loss"] for p, r in runs.items()},
              "weight_grad_gib": round(runs["labelled"]["weight_grad_bytes"] / 2**30, 3),
              "ratio": round(ratio, 3), "goal": f"<= {GOAL:g}", "meets_goal": ratio <= GOAL}
    return emit(result)


if __name__ == "__main__":
    CLI(main, as_positional=False)
