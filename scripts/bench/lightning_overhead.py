"""B2: throughput of the Lightning training loop (SFTModule + Trainer.fit) vs a bare PyTorch loop, same run.

Both loops start from the same weights (the same HF folder loaded with the same seed), train on the same batches
(built once by the project's datamodule: budget, encode, label mask, collate) with the same optimizer and schedule
(`SFTModule.configure_optimizers`: AdamW + warmup/cosine LambdaLR) and the same gradient clipping. The first `warmup`
steps of each loop are not timed. Every step is timed on its own and the rounds alternate bare and Lightning; a
step's time is its fastest over the rounds (a shared machine only ever adds time), and throughput = real
(non-padding) tokens of the timed steps / the sum of those times.

    python scripts/bench/lightning_overhead.py                 # tiny model + synthetic mix in a temp dir (~1 min)
    python scripts/bench/lightning_overhead.py --steps 60 --rounds 3
"""

from __future__ import annotations

import logging
import time
import warnings
from pathlib import Path

from cader.scripts.bench.harness import tiny_inputs
from jsonargparse import CLI


def build_batches(model_dir: str, train_dir: Path, batch_size: int, max_length: int, count: int) -> list[dict]:
    """`count` collated batches from the project's datamodule (cycling over epochs if needed)."""
    from cader.train.datamodule import SFTDataModule, Source

    src = Source("video_r1", "video_r1", str(train_dir / "video_r1_cot.json"))
    longvt = Source("longvt", "longvt", str(train_dir / "longvt_sft.parquet"))
    dm = SFTDataModule([src, longvt], processor_path=model_dir, batch_size=batch_size, max_length=max_length)
    dm.setup("fit")
    batches: list[dict] = []
    while len(batches) < count:
        batches += list(dm.train_dataloader())
    return batches[:count]


def _tokens(batch: dict) -> int:
    return int(batch["attention_mask"].sum())


def bare_loop(model_dir: str, batches: list[dict], warmup: int, lr: float, clip: float, seed: int) -> list[float]:
    """Plain PyTorch: forward, backward, clip, step, schedule, zero_grad. Returns the seconds of each timed step."""
    import torch
    from cader.train.module import SFTModule

    module = SFTModule(model_dir, lr=lr, seed=seed)
    module._total_optimizer_steps = lambda: len(batches)  # no trainer here: the same count Lightning sees
    config = module.configure_optimizers()
    optimizer, scheduler = config["optimizer"], config["lr_scheduler"]["scheduler"]
    model = module.model.train()
    params = [p for p in model.parameters() if p.requires_grad]
    marks = []
    for batch in batches:
        marks.append(time.perf_counter())
        loss = module.sft_loss(module.model_inputs(batch))  # what training_step computes: uint8 pixels, labelled tail
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, clip)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
    marks.append(time.perf_counter())
    return [b - a for a, b in zip(marks[warmup:], marks[warmup + 1:])]


def lightning_loop(model_dir: str, batches: list[dict], warmup: int, lr: float, clip: float, seed: int,
                   root: Path) -> list[float]:
    """Trainer.fit on SFTModule: CSV logs every 10 steps (as configs/train/cot_mix.yaml), clipping, no checkpoints."""
    import lightning as L
    from cader.train.module import SFTModule
    from lightning.pytorch.loggers import CSVLogger
    from torch.utils.data import DataLoader

    class Timer(L.Callback):
        # one mark per loop iteration (start of each batch) and one at the end: a step's time is everything the
        # loop does between two batches, Lightning's own work included
        def __init__(self):
            self.marks = []

        def on_train_batch_start(self, trainer, module, batch, batch_idx):
            self.marks.append(time.perf_counter())

        def on_train_end(self, trainer, module):
            self.marks.append(time.perf_counter())

    timer = Timer()
    module = SFTModule(model_dir, lr=lr, seed=seed)
    trainer = L.Trainer(default_root_dir=str(root), accelerator="cpu", devices=1, precision="32-true",
                        max_epochs=1, max_steps=len(batches), gradient_clip_val=clip, log_every_n_steps=10,
                        logger=CSVLogger(str(root), name="logs"), enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False, use_distributed_sampler=False,
                        callbacks=[timer])
    # batch_size=None: the list already holds collated batches, handed over unchanged
    trainer.fit(module, train_dataloaders=DataLoader(batches, batch_size=None, shuffle=False))
    marks = timer.marks
    return [b - a for a, b in zip(marks[warmup:], marks[warmup + 1:])]


def main(model_dir: str | None = None, train_dir: str | None = None, steps: int = 30, warmup: int = 5,
         rounds: int = 3, batch_size: int = 4, max_length: int = 2048, lr: float = 2e-3, clip: float = 1.0,
         seed: int = 0) -> dict:
    """Measure both loops; return tokens/s of each and ratio = lightning / bare.

    Args:
        model_dir: HF folder to train (default: a fresh tiny model in a temp dir).
        train_dir: the CoT mix folder (default: the synthetic mix written into a temp dir).
        steps: timed optimizer steps per loop and round.
        warmup: untimed steps before them.
        rounds: alternating bare/Lightning rounds; each step counts with its fastest time.
        batch_size, max_length, lr, clip: as in configs/train/cot_mix_tiny.yaml.
        seed: weights/seed of both loops.
    """
    import torch

    logging.getLogger("lightning").setLevel(logging.ERROR)
    warnings.filterwarnings("ignore")
    begin = time.perf_counter()
    with tiny_inputs(model_dir, train_dir, "cader_p2_", n_train=32, n_images=8, n_tool=1) as (model, train, tmp):
        batches = build_batches(model, train, batch_size, max_length, warmup + steps)
        bare, lightning = [], []
        for r in range(rounds):
            torch.manual_seed(seed)
            bare.append(bare_loop(model, batches, warmup, lr, clip, seed))
            torch.manual_seed(seed)
            lightning.append(lightning_loop(model, batches, warmup, lr, clip, seed, tmp / f"pl{r}"))
    tokens = sum(_tokens(b) for b in batches[warmup:])
    bare_tps = tokens / sum(map(min, zip(*bare)))
    lightning_tps = tokens / sum(map(min, zip(*lightning)))
    result = {"lightning_tokens_per_s": lightning_tps, "bare_tokens_per_s": bare_tps, "ratio": lightning_tps / bare_tps,
              "rounds_tokens_per_s": {"lightning": [tokens / sum(t) for t in lightning],
                                      "bare": [tokens / sum(t) for t in bare]},
              "timed_steps": steps, "warmup_steps": warmup, "tokens_per_step": tokens / steps,
              "threads": torch.get_num_threads(), "seconds": round(time.perf_counter() - begin, 1)}
    print(f"B2 training loop, {steps} timed steps after {warmup} warm-up: Lightning {lightning_tps:.0f} tok/s, bare "
          f"PyTorch {bare_tps:.0f} tok/s, ratio {result['ratio']:.3f} (goal >= 0.95)")
    return result


if __name__ == "__main__":
    CLI(main, as_positional=False)
