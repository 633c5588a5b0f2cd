"""B3: padded-token fraction of the SFT batches, length-grouped (the project's sampler) vs random batching.

Both batchings see the same samples, the same batch size and the same seeds; the padded fraction of an epoch is
(padding slots) / (batch slots) = 1 - real tokens / sum(batch size x longest sequence in the batch), summed over all
batches and averaged over `epochs` shuffles. Sequence lengths are the real encoded lengths (each sample is encoded
once, pixels included), not the budget's plan.

    python scripts/bench/padding.py                      # tiny model + synthetic mix in a temp dir (~1 min)
    python scripts/bench/padding.py --model_dir M --train_dir D/train --batch_size 4
"""

from __future__ import annotations

import random
import time
from pathlib import Path

from cader.scripts.bench.harness import mix_sources, tiny_inputs
from jsonargparse import CLI


def padded_fraction(batches: list[list[int]], lengths: list[int]) -> float:
    """Padding slots / all slots over a list of batches (indices into `lengths`)."""
    slots = sum(len(b) * max(lengths[i] for i in b) for b in batches)
    real = sum(lengths[i] for b in batches for i in b)
    return 1.0 - real / slots


def random_batches(n: int, batch_size: int, seed: int) -> list[list[int]]:
    order = list(range(n))
    random.Random(seed).shuffle(order)
    return [order[k : k + batch_size] for k in range(0, n, batch_size)]


def encoded_lengths(model_dir: str, train_dir: Path, max_length: int) -> list[int]:
    from cader.train.datamodule import SFTDataModule

    dm = SFTDataModule(mix_sources(train_dir), processor_path=model_dir, max_length=max_length)
    dm.setup("fit")
    return [len(dm.encoder.encode(item)["input_ids"]) for item in dm.items]


def main(model_dir: str | None = None, train_dir: str | None = None, batch_size: int = 4, mega_batch: int = 32,
         max_length: int = 2048, epochs: int = 5, seed: int = 0) -> dict:
    """Measure the padded-token fraction of both batchings.

    Args:
        model_dir: HF folder whose processor encodes the samples (default: a fresh tiny model in a temp dir).
        train_dir: the CoT mix folder (default: the synthetic mix written into a temp dir).
        batch_size: per-device micro-batch (configs/train/cot_mix_tiny.yaml uses 4).
        mega_batch: the length-grouped sampler's mega-batch factor (SFTDataModule default).
        max_length: the token budget (cot_mix_tiny.yaml: 2048).
        epochs: shuffles averaged (seeds seed .. seed+epochs-1).
        seed: first seed.
    """
    from cader.train.collate import LengthGroupedBatchSampler

    start = time.perf_counter()
    with tiny_inputs(model_dir, train_dir, "cader_padding_") as (model, train, _):
        lengths = encoded_lengths(model, train, max_length)

    grouped, rand = [], []
    for epoch in range(epochs):
        sampler = LengthGroupedBatchSampler(lengths, batch_size, seed=seed, mega=mega_batch)
        sampler.set_epoch(epoch)
        grouped.append(padded_fraction(list(sampler), lengths))
        rand.append(padded_fraction(random_batches(len(lengths), batch_size, seed + epoch), lengths))
    result = {"grouped_padding_fraction": sum(grouped) / epochs, "random_padding_fraction": sum(rand) / epochs,
              "samples": len(lengths), "batch_size": batch_size, "length_min": min(lengths),
              "length_max": max(lengths), "seconds": round(time.perf_counter() - start, 1)}
    print(f"B3 padded-token fraction over {len(lengths)} samples (lengths {min(lengths)}..{max(lengths)}), batch "
          f"{batch_size}: length-grouped {100 * result['grouped_padding_fraction']:.2f} %, random "
          f"{100 * result['random_padding_fraction']:.2f} % (goal: grouped <= 5 %)")
    return result


if __name__ == "__main__":
    CLI(main, as_positional=False)
