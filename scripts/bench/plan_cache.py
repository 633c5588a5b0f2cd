"""SFT data setup time: planning every sample (today's serial probe of every media header) vs the plan cache.

Three setups of the same SFTDataModule on the same mix, in one run so machine speed cancels out:
1. uncached, serial (plan_cache_dir off, plan_workers 1): what every rank paid on every run before the cache;
2. cold cache, `plan_workers` processes: the first run (probes media in parallel, writes the cache);
3. warm cache: every later run and every other rank (reads the cache, stats media, opens no video).
All three must give the same plan; the script checks that before it prints the ratios.

    python scripts/bench/plan_cache.py                     # tiny model + synthetic mix in a temp dir (~1 min)
    python scripts/bench/plan_cache.py --model_dir M --train_dir D/train --plan_workers 8
"""

from __future__ import annotations

import time
from pathlib import Path

from cader.dev.synthetic.train_mix import SYNTHETIC_MIX as MIX  # (name, format, file)
from cader.scripts.bench.harness import mix_sources, tiny_inputs
from jsonargparse import CLI


def timed_setup(model_dir: str, train_dir: Path, cache_dir: str | None, workers: int, report_dir: str,
                max_length: int, mix=MIX):
    from cader.train.datamodule import SFTDataModule

    dm = SFTDataModule(mix_sources(train_dir, mix), processor_path=model_dir, max_length=max_length,
                       report_dir=report_dir, plan_cache_dir=cache_dir, plan_workers=workers)
    dm._load_processor()          # processor loading is the same in all three; time the planning only
    start = time.perf_counter()
    dm.setup("fit")
    return time.perf_counter() - start, dm


def main(model_dir: str | None = None, train_dir: str | None = None, n_train: int = 192, n_images: int = 48,
         plan_workers: int | None = None, max_length: int = 2048) -> dict:
    """Time the three setups and print their ratios.

    Args:
        model_dir: HF folder of the processor (default: a fresh tiny model in a temp dir).
        train_dir: the CoT mix folder (default: the synthetic mix written into a temp dir).
        n_train: synthetic training videos (only without --train_dir).
        n_images: synthetic training images (only without --train_dir).
        plan_workers: processes of the cold run (default: the SFTDataModule default, min(8, cores)).
        max_length: the token budget.
    """
    from cader.train.plan_cache import default_plan_workers

    workers = plan_workers or default_plan_workers()
    with tiny_inputs(model_dir, train_dir, "cader_plan_cache_", n_train=n_train, n_images=n_images) as inputs:
        model_dir, train_dir, tmp = inputs
        cache = str(tmp / "plan_cache")
        # untimed warm-up (imports, template compile, page cache) so the first timed run is not charged for them
        timed_setup(model_dir, train_dir, None, 1, str(tmp / "warmup"), max_length, mix=MIX[-1:])
        serial_s, serial = timed_setup(model_dir, train_dir, None, 1, str(tmp / "r0"), max_length)
        cold_s, cold = timed_setup(model_dir, train_dir, cache, workers, str(tmp / "r1"), max_length)
        warm_s, warm = timed_setup(model_dir, train_dir, cache, workers, str(tmp / "r2"), max_length)
    if not serial.items == cold.items == warm.items:
        raise AssertionError("the cached / parallel plan differs from the serial plan")
    hits = sum(e["plan_cache"]["hits"] for e in warm.report.values())
    result = {"samples": len(serial.items), "rows_planned": hits, "plan_workers": workers,
              "uncached_serial_s": round(serial_s, 3), "cold_cache_parallel_s": round(cold_s, 3),
              "warm_cache_s": round(warm_s, 3), "uncached_over_warm": round(serial_s / warm_s, 1),
              "uncached_over_cold": round(serial_s / cold_s, 2)}
    print(f"SFT setup over {hits} planned rows ({len(serial.items)} samples to train): uncached serial "
          f"{serial_s:.2f} s, cold cache on {workers} processes {cold_s:.2f} s "
          f"(x{result['uncached_over_cold']}), warm cache {warm_s:.2f} s (x{result['uncached_over_warm']} "
          f"faster than uncached)")
    return result


if __name__ == "__main__":
    CLI(main, as_positional=False)
