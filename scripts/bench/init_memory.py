"""B10: peak resident memory per rank while the model's weights are materialised, 2-process ZeRO-3 on the CPU.

Two ways of creating the same SFTModule under `CPUDeepSpeedStrategy("zero3")` with two ranks over gloo:
- `full_load`: the whole model loaded in `__init__` on every rank (the module before weights moved into
  `configure_model`); DeepSpeed partitions it only later, when the engine is built;
- `sharded`: `SFTModule` as it is: `configure_model`, run by Lightning's own hook under `deepspeed.zero.Init`,
  creates partitioned parameters and each rank reads only its slice of every tensor.
Each rank measures its resident set (VmRSS) just before the module is created (imports, process group and a config
read done, so both ways start from the same state), resets the kernel's high-water mark (VmHWM), creates the module,
runs Lightning's `configure_model` hook and partitions whatever is still whole (what the DeepSpeed engine does first),
then reads the high-water mark. The figure is peak - start, as a fraction of the checkpoint's size; the goal is
<= 0.6 (a rank's own half plus little). The model is a random Qwen3-VL with the tiny model's tokenizer and
structure (cader.dev.tiny) at larger text sizes, written once to a temp folder (367 MiB in float32 by default).

Both ways' ranks run with glibc's MALLOC_MMAP_THRESHOLD_ fixed at 1 MiB: on the CPU, zero.Init creates each full
tensor, broadcasts and partitions it, then frees it, all in host memory (on a GPU that happens in device memory);
glibc's default threshold adapts to the largest block freed so far and then keeps such blocks in the heap, which
adds 0-100 MB to one rank or the other from run to run. `--malloc_mmap_threshold 0` measures with the default.

    python scripts/bench/init_memory.py                   # ~1 min on 2 cores
    python scripts/bench/init_memory.py --hidden_size 1536 --layers 12
"""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path

from cader.scripts.bench.harness import Fresh, FreshProcessError, PeakRSS, free_port, status_kib
from jsonargparse import CLI

WAYS = ("full_load", "sharded")
WORLD_SIZE = 2


# ---- the model ----

def write_random_model(out: Path, hidden_size: int, intermediate_size: int, layers: int, seed: int = 0) -> int:
    """A random Qwen3-VL with the tiny model's tokenizer and structure at the given text sizes, saved as
    safetensors with the tiny processor (the vision tower keeps its tiny size). Returns the checkpoint's tensor
    bytes."""
    from cader.scripts.bench.harness import write_qwen3vl

    heads, head_dim = max(1, hidden_size // 64), 64
    text = {"hidden_size": hidden_size, "intermediate_size": intermediate_size, "num_hidden_layers": layers,
            "num_attention_heads": heads, "num_key_value_heads": max(1, heads // 2), "head_dim": head_dim}
    pairs = head_dim // 2                # rotary pairs split temporal / height / width as the 8B's [24, 20, 20]
    spatial = pairs * 5 // 16
    # the merger feeds the language model
    return write_qwen3vl(out, text, {"out_hidden_size": hidden_size}, [pairs - 2 * spatial, spatial, spatial],
                         seed=seed)


# ---- one rank ----

def _warm_imports(model_dir: str) -> None:
    """Everything both ways import or read, so that neither is charged for it."""
    import deepspeed.runtime.zero.partition_parameters  # noqa: F401
    import safetensors.torch  # noqa: F401
    import transformers.integrations.deepspeed
    import transformers.models.qwen3_vl.modeling_qwen3_vl  # noqa: F401
    from transformers import AutoConfig, AutoModelForImageTextToText  # noqa: F401

    AutoConfig.from_pretrained(model_dir)


def _create_module(way: str, model_dir: str):
    from cader.train.module import SFTModule

    module = SFTModule(model_dir, dtype="float32")
    if way == "full_load":                 # what __init__ did before configure_model existed
        from cader.vlm.loading import load_model

        module.model = load_model(model_dir, dtype="float32").train()
    return module


def partition_the_rest(module, ds_config: dict) -> None:
    """Partition what is still whole, as the DeepSpeed engine does first when it is built: the window ends where
    every rank holds only its partition, the state training starts from either way. (A model loaded whole is
    memory-mapped from the checkpoint, so its pages enter the resident set only here, when they are read.)"""
    import deepspeed
    from deepspeed.runtime.zero.utils import is_zero_param

    if not all(is_zero_param(p) for p in module.model.parameters()):
        deepspeed.zero.Init(module=module.model, config_dict_or_path=ds_config)


def run_rank(way: str, model_dir: str) -> dict:
    """Inside one of the two ranks: create the module, run Lightning's configure_model hook and partition the rest,
    measuring."""
    import lightning as L
    import torch.distributed as dist
    from cader.train.strategies import CPUDeepSpeedStrategy
    from lightning.pytorch.trainer.call import _call_configure_model

    _warm_imports(model_dir)
    strategy = CPUDeepSpeedStrategy("zero3")
    strategy.config["train_micro_batch_size_per_gpu"] = 1     # no dataloader here for Lightning to read it from
    trainer = L.Trainer(accelerator="cpu", devices=WORLD_SIZE, strategy=strategy,
                        precision="32-true", logger=False, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False)
    trainer.strategy.setup_environment()          # the process group, as fit() starts
    dist.barrier()
    start_rss, peak = status_kib("VmRSS") * 1024, PeakRSS()
    peak.start()
    begin = time.perf_counter()
    module = _create_module(way, model_dir)
    trainer.strategy.connect(module)
    module.trainer = trainer
    _call_configure_model(trainer)                # Lightning's hook, under the strategy's init contexts
    partition_the_rest(module, strategy.config)
    seconds = time.perf_counter() - begin
    peak_rss = peak.stop()
    params = list(module.model.parameters())
    local = sum((p.ds_tensor if hasattr(p, "ds_tensor") else p).numel() * p.element_size() for p in params)
    dist.barrier()
    dist.destroy_process_group()
    return {"rank": trainer.global_rank, "start_rss": start_rss, "peak_rss": peak_rss, "local_param_bytes": local,
            "seconds": seconds}


# ---- the launch ----

def _rank_environ(rank: int, port: int, mmap_threshold: int | None) -> dict:
    """The environment of an externally launched rank (Lightning then starts no processes of its own)."""
    launch = ("LOCAL_RANK", "RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "NODE_RANK", "GROUP_RANK", "MASTER_", "PL_",
              "TORCHELASTIC_")
    env = {k: v for k, v in os.environ.items() if not k.startswith(launch)}
    return {**env, "DS_ACCELERATOR": "cpu", "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false",
            "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "LOCAL_RANK": str(rank), "NODE_RANK": "0",
            "WORLD_SIZE": str(WORLD_SIZE), "HF_HUB_OFFLINE": "1", "PYTHONWARNINGS": "ignore",
            **({"MALLOC_MMAP_THRESHOLD_": str(mmap_threshold)} if mmap_threshold else {})}


def measure(way: str, model_dir: Path, mmap_threshold: int | None, timeout: float = 600) -> list[dict]:
    """Both ranks' measurements of one way (a retry when the free port was taken meanwhile)."""
    for attempt in range(3):
        port = free_port()
        ranks = [Fresh("cader.scripts.bench.init_memory:run_rank", {"way": way, "model_dir": str(model_dir)},
                       env=_rank_environ(r, port, mmap_threshold)) for r in range(WORLD_SIZE)]
        try:
            return [rank.result(timeout) for rank in ranks]
        except FreshProcessError as err:
            for rank in ranks:
                rank.stop()
            if "EADDRINUSE" not in str(err) or attempt == 2:
                raise RuntimeError(f"{way} rank failed:\n{err}") from None


def main(hidden_size: int = 1024, intermediate_size: int = 2816, layers: int = 8,
         malloc_mmap_threshold: int | None = 1 << 20) -> dict:
    """Measure both ways and return peak resident growth per rank as a fraction of the checkpoint size.

    Args:
        hidden_size: the language model's width (head_dim 64).
        intermediate_size: its MLP width.
        layers: its depth.
        malloc_mmap_threshold: glibc's MALLOC_MMAP_THRESHOLD_ in both ways' ranks; 0 keeps glibc's adaptive
            default (see the module docstring).
    """
    begin = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="cader_p10_") as tmp:
        tmp = Path(tmp)
        model_bytes = write_random_model(tmp / "model", hidden_size, intermediate_size, layers)
        ranks = {way: measure(way, tmp / "model", malloc_mmap_threshold) for way in WAYS}
    mb = 1024 ** 2
    result = {"model_mb": round(model_bytes / mb, 1), "world_size": WORLD_SIZE,
              "malloc_mmap_threshold": malloc_mmap_threshold or None}
    for way, rows in ranks.items():
        growth = [r["peak_rss"] - r["start_rss"] for r in rows]
        result[way] = {
            "peak_over_start_mb": [round(g / mb, 1) for g in growth],
            "start_rss_mb": [round(r["start_rss"] / mb, 1) for r in rows],
            "local_param_mb": [round(r["local_param_bytes"] / mb, 1) for r in rows],
            "seconds": [round(r["seconds"], 1) for r in rows],
            "peak_over_model": round(max(growth) / model_bytes, 3),
        }
    result["full_load_peak_over_model"] = result["full_load"]["peak_over_model"]
    result["sharded_peak_over_model"] = result["sharded"]["peak_over_model"]
    result["seconds"] = round(time.perf_counter() - begin, 1)
    print(f"B10 init memory, {WORLD_SIZE}-process CPU ZeRO-3, model {result['model_mb']} MB: peak RSS growth per "
          f"rank while the weights are materialised: full load in __init__ "
          f"{result['full_load']['peak_over_start_mb']} MB ({result['full_load_peak_over_model']}x the model), "
          f"sharded configure_model {result['sharded']['peak_over_start_mb']} MB "
          f"({result['sharded_peak_over_model']}x; goal <= 0.6x)")
    return result


if __name__ == "__main__":
    CLI(main, as_positional=False)
