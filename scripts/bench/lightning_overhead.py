"""P2: throughput of the Lightning training loop (SFTModule + Trainer.fit) vs a bare PyTorch loop, same run.

Both loops start from the same weights (the same HF folder loaded with the same seed), train on the same batches
(built once by the project's datamodule: budget, encode, label mask, collate) with the same optimizer and schedule
(`SFTModule.configure_optimizers`: AdamW + warmup/cosine LambdaLR) and the same gradient clipping. The first `warmup`
steps of each loop are not timed. Throughput = real (non-padding) tokens / second over the timed steps; the rounds
alternate bare and Lightning and the best round of each is kept (least disturbed by other load on the machine).

    python scripts/bench/lightning_overhead.py                 # tiny model + synthetic mix in a temp dir (~1 min)
    python scripts/bench/lightning_overhead.py --steps 60 --rounds 3
"""

from __future__ import annotations

import logging
import tempfile
import time
import warnings
from pathlib import Path

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


def bare_loop(model_dir: str, batches: list[dict], warmup: int, lr: float, clip: float, seed: int) -> float:
    """Plain PyTorch: forward, backward, clip, step, schedule, zero_grad. Returns tokens/s over the timed steps."""
    import torch
    from cader.train.module import SFTModule

    module = SFTModule(model_dir, lr=lr, seed=seed)
    module._total_optimizer_steps = lambda: len(batches)  # no trainer here: the same count Lightning sees
    config = module.configure_optimizers()
    optimizer, scheduler = config["optimizer"], config["lr_scheduler"]["scheduler"]
    model = module.model.train()
    params = [p for p in model.parameters() if p.requires_grad]
    tokens, start = 0, None
    for step, batch in enumerate(batches):
        if step == warmup:
            start = time.perf_counter()
        loss = model(**batch).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, clip)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
        if step >= warmup:
            tokens += _tokens(batch)
    return tokens / (time.perf_counter() - start)


def lightning_loop(model_dir: str, batches: list[dict], warmup: int, lr: float, clip: float, seed: int,
                   root: Path) -> float:
    """Trainer.fit on SFTModule with the tiny config's trainer settings (CSV logs every step, clipping)."""
    import lightning as L
    from cader.train.module import SFTModule
    from lightning.pytorch.loggers import CSVLogger
    from torch.utils.data import DataLoader

    class Timer(L.Callback):
        tokens, start, end = 0, None, None

        def on_train_batch_start(self, trainer, module, batch, batch_idx):
            if batch_idx == warmup:
                self.start = time.perf_counter()

        def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
            if batch_idx >= warmup:
                self.tokens += _tokens(batch)
                self.end = time.perf_counter()

    timer = Timer()
    module = SFTModule(model_dir, lr=lr, seed=seed)
    trainer = L.Trainer(default_root_dir=str(root), accelerator="cpu", devices=1, precision="32-true",
                        max_epochs=1, max_steps=len(batches), gradient_clip_val=clip, log_every_n_steps=1,
                        logger=CSVLogger(str(root), name="logs"), enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False, use_distributed_sampler=False,
                        callbacks=[timer])
    # batch_size=None: the list already holds collated batches, handed over unchanged
    trainer.fit(module, train_dataloaders=DataLoader(batches, batch_size=None, shuffle=False))
    return timer.tokens / (timer.end - timer.start)


def main(
    model_dir: str | None = None,
    train_dir: str | None = None,
    steps: int = 30,
    warmup: int = 5,
    rounds: int = 2,
    batch_size: int = 4,
    max_length: int = 2048,
    lr: float = 2e-3,
    clip: float = 1.0,
    seed: int = 0,
) -> dict:
    """Measure both loops; return tokens/s of each and ratio = lightning / bare.

    Args:
        model_dir: HF folder to train (default: a fresh tiny model in a temp dir).
        train_dir: the CoT mix folder (default: the synthetic mix written into a temp dir).
        steps: timed optimizer steps per loop and round.
        warmup: untimed steps before them.
        rounds: alternating bare/Lightning rounds; the best of each is reported.
        batch_size, max_length, lr, clip: as in configs/train/cot_mix_tiny.yaml.
        seed: weights/seed of both loops.
    """
    import torch

    logging.getLogger("lightning").setLevel(logging.ERROR)
    warnings.filterwarnings("ignore")
    begin = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="cader_p2_") as tmp:
        tmp = Path(tmp)
        if model_dir is None:
            from cader.vlm.tiny import make_tiny_model

            model_dir = str(make_tiny_model(tmp / "model"))
        if train_dir is None:
            from cader.evaluate.benchmarks.synth_data import make_synthetic_data

            make_synthetic_data(tmp / "data", n_train=32, n_images=8, n_tool=1, n_eval=1, n_heldout=1)
            train_dir = str(tmp / "data" / "train")
        batches = build_batches(model_dir, Path(train_dir), batch_size, max_length, warmup + steps)
        bare, lightning = [], []
        for r in range(rounds):
            torch.manual_seed(seed)
            bare.append(bare_loop(model_dir, batches, warmup, lr, clip, seed))
            torch.manual_seed(seed)
            lightning.append(lightning_loop(model_dir, batches, warmup, lr, clip, seed, tmp / f"pl{r}"))
    result = {
        "lightning_tokens_per_s": max(lightning),
        "bare_tokens_per_s": max(bare),
        "ratio": max(lightning) / max(bare),
        "rounds": {"lightning": lightning, "bare": bare},
        "timed_steps": steps,
        "warmup_steps": warmup,
        "tokens_per_step": sum(_tokens(b) for b in batches[warmup:]) / steps,
        "threads": torch.get_num_threads(),
        "seconds": round(time.perf_counter() - begin, 1),
    }
    print(
        f"P2 training loop, {steps} timed steps after {warmup} warm-up: Lightning "
        f"{result['lightning_tokens_per_s']:.0f} tok/s, bare PyTorch {result['bare_tokens_per_s']:.0f} tok/s, "
        f"ratio {result['ratio']:.3f} (goal >= 0.95)"
    )
    return result


if __name__ == "__main__":
    CLI(main, as_positional=False)
