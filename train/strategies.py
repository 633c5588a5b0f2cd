"""DeepSpeed strategies for SFT: the shipped ZeRO configs by name, a CPU variant (gloo) for tests, and how each
strategy materialises the model's weights.

Lightning's DeepSpeedStrategy refuses any accelerator but CUDA; DeepSpeed itself runs ZeRO-2/3 on CPU over gloo
(with the CPU accelerator set in vlm), so `CPUDeepSpeedStrategy` only lifts Lightning's check and picks gloo. Micro-batch size,
gradient accumulation, clipping and bf16 are filled in by Lightning from the Trainer/DataLoader, so the JSON files
carry only the ZeRO settings.

Under ZeRO-3 `load_partitioned_model` builds the model inside the `deepspeed.zero.Init` that Lightning opens around
`LightningModule.configure_model`, so each parameter is partitioned as its module is created, and every rank then
reads only its own slice of each tensor from the safetensors checkpoint: no rank ever holds the full weights.
Every other strategy loads the whole model on each rank, which is what DDP and ZeRO-1/2 keep anyway.
"""
from __future__ import annotations

import json
import logging
import math
import os
import sys
import warnings
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path

import torch
from lightning.fabric.utilities.seed import reset_seed
from lightning.pytorch.strategies import DDPStrategy, DeepSpeedStrategy

CONFIG_DIR = Path(__file__).resolve().parents[1] / "configs" / "deepspeed"
NAMED_CONFIGS = ("zero2", "zero3", "zero3_offload")


def load_deepspeed_config(name_or_path: str) -> dict:
    """`zero2`, `zero3`, `zero3_offload` (configs/deepspeed/<name>.json) or a path to a JSON file."""
    path = CONFIG_DIR / f"{name_or_path}.json" if name_or_path in NAMED_CONFIGS else Path(name_or_path)
    if not path.is_file():
        raise FileNotFoundError(f"DeepSpeed config {name_or_path!r} not found (named: {NAMED_CONFIGS})")
    return json.loads(path.read_text())


ZERO_STAGES = (0, 1, 2, 3)


def zero_options(zero: dict) -> dict:
    """The settings a ZeRO block says, in the strategy's option names: stage, offload_optimizer, offload_parameters
    (an offload block whose device is "none" is no offload)."""
    def offloaded(key: str) -> bool:
        block = zero.get(key)
        return isinstance(block, dict) and block.get("device", "cpu") not in (None, "none")

    return {"stage": zero.get("stage", 0), "offload_optimizer": offloaded("offload_optimizer"),
            "offload_parameters": offloaded("offload_param")}


def zero_config_from_options(stage: int, offload_optimizer: bool, offload_parameters: bool) -> dict:
    """A DeepSpeed config from the three options alone (the shipped JSONs' communication settings)."""
    if offload_parameters and stage != 3:
        raise ValueError(f"offload_parameters needs ZeRO stage 3, got stage={stage}")
    zero = {"stage": stage, "overlap_comm": True, "contiguous_gradients": True}
    if offload_optimizer:
        zero["offload_optimizer"] = {"device": "cpu", "pin_memory": True}
    if offload_parameters:
        zero["offload_param"] = {"device": "cpu", "pin_memory": True}
    config = {"zero_optimization": zero, "zero_allow_untested_optimizer": True}
    if offload_optimizer:   # the module's own torch AdamW steps on CPU, not DeepSpeed's CPU Adam in its place
        config["zero_force_ds_cpu_optimizer"] = False
    return config


def resolve_zero_config(zero_config: str | None, stage: int | None = None, offload_optimizer: bool | None = None,
                        offload_parameters: bool | None = None) -> dict:
    """The DeepSpeed config a run uses: the named/path JSON, or one built from the options (zero_config None).

    With a JSON, an option left None means "as the JSON says"; an option the JSON contradicts is an error naming
    both, so a printed setting never silently means nothing."""
    options = {"stage": stage, "offload_optimizer": offload_optimizer, "offload_parameters": offload_parameters}
    if stage is not None and stage not in ZERO_STAGES:
        raise ValueError(f"stage must be one of {ZERO_STAGES}, got {stage}")
    if zero_config is None:
        if stage is None:
            raise ValueError("set zero_config (zero2, zero3, zero3_offload or a JSON path) or stage")
        return zero_config_from_options(stage, bool(offload_optimizer), bool(offload_parameters))
    config = load_deepspeed_config(zero_config)
    said = zero_options(config.get("zero_optimization", {}))
    clashes = [f"{key}={value} (zero_config {zero_config!r} has {key}={said[key]})"
               for key, value in options.items() if value is not None and value != said[key]]
    if clashes:
        raise ValueError(f"conflicting DeepSpeed settings: {'; '.join(clashes)}. Set zero_config to a file that has "
                         "them, or zero_config null to build the config from stage/offload_optimizer/"
                         "offload_parameters")
    return config


# DeepSpeed (0.19) gathers and scatters ZeRO partitions through torch.distributed.all_gather_into_tensor and
# reduce_scatter_tensor, which torch 2.14 deprecates in favour of *_single. The call sits in DeepSpeed, not here, and
# nothing a user sets avoids it; and although Python shows a warning once per code location, libraries that enter
# `warnings.catch_warnings()` during a step (subprocess's os.get_exec_path, pandas' dtype checks) reset that memory,
# so the two FutureWarnings printed again every ZeRO-3 step. Only these two messages are silenced.
DEEPSPEED_COLLECTIVE_DEPRECATIONS = r"`torch\.distributed\.(all_gather_into_tensor|reduce_scatter_tensor)` is deprecated"


def silence_deepspeed_collective_deprecations() -> None:
    warnings.filterwarnings("ignore", message=DEEPSPEED_COLLECTIVE_DEPRECATIONS, category=FutureWarning)


class SFTDeepSpeedStrategy(DeepSpeedStrategy):
    """DeepSpeedStrategy whose ZeRO settings come from one place, so that what `--print_config` shows is what runs.

    Lightning's DeepSpeedStrategy takes some forty ZeRO/offload/fp16 keyword arguments and ignores all of them
    once a `config` is given; this class exposes only settings that take effect. The run's DeepSpeed config is
    `self.config`; Lightning fills in micro-batch size, gradient accumulation, clipping and bf16/fp16 from the
    Trainer and DataLoader.
    """

    def __init__(self, zero_config: str | None = "zero3", stage: int | None = None,
                 offload_optimizer: bool | None = None, offload_parameters: bool | None = None,
                 pg_timeout_minutes: float | None = None, process_group_backend: str | None = None,
                 load_full_weights: bool = False, exclude_frozen_parameters: bool = False,
                 logging_level: int = logging.WARNING):
        """
        Args:
            zero_config: a shipped ZeRO config by name (zero2, zero3, zero3_offload: configs/deepspeed/) or a JSON
                path; null builds it from `stage`, `offload_optimizer` and `offload_parameters`.
            stage: ZeRO stage 0-3. With a zero_config: null (as the file says) or the file's own stage; another
                stage is an error naming both.
            offload_optimizer: optimizer state on CPU. With a zero_config: null or what the file says.
            offload_parameters: parameters on CPU (stage 3 only). With a zero_config: null or what the file says.
            pg_timeout_minutes: bound on every collective, the barrier after `prepare_data` included: there local
                rank 0 plans the whole mix while the other ranks wait, and a cold plan of the full 228.8K-row mix
                can outlast torch's 30-minute default. null keeps that default.
            process_group_backend: torch.distributed backend (null: nccl on GPU).
            load_full_weights: resume from a consolidated single-file checkpoint instead of ZeRO shards.
            exclude_frozen_parameters: leave frozen parameters out of checkpoints.
            logging_level: DeepSpeed's logger level.

        The Trainer sets the accelerator, devices, cluster environment and precision plugin on the strategy itself.
        """
        self.zero_config = zero_config
        silence_deepspeed_collective_deprecations()
        config = resolve_zero_config(zero_config, stage, offload_optimizer, offload_parameters)
        kwargs = {}
        if pg_timeout_minutes is not None:
            if not pg_timeout_minutes > 0:
                raise ValueError(f"pg_timeout_minutes must be positive, got {pg_timeout_minutes}")
            kwargs["timeout"] = timedelta(minutes=pg_timeout_minutes)
        super().__init__(config=config, process_group_backend=process_group_backend,
                         load_full_weights=load_full_weights, exclude_frozen_parameters=exclude_frozen_parameters,
                         logging_level=logging_level, **kwargs)


class CPUDeepSpeedStrategy(SFTDeepSpeedStrategy):
    """ZeRO on CPU processes over gloo (tests and laptops only; far too slow for real training)."""

    def __init__(self, zero_config: str | None = "zero3", stage: int | None = None,
                 offload_optimizer: bool | None = None, offload_parameters: bool | None = None,
                 pg_timeout_minutes: float | None = None, process_group_backend: str | None = "gloo", **kwargs):
        """Args: as SFTDeepSpeedStrategy, with gloo as the process group backend."""
        os.environ.setdefault("DS_ACCELERATOR", "cpu")
        super().__init__(zero_config=zero_config, stage=stage, offload_optimizer=offload_optimizer,
                         offload_parameters=offload_parameters, pg_timeout_minutes=pg_timeout_minutes,
                         process_group_backend=process_group_backend, **kwargs)

    def setup_environment(self) -> None:
        DDPStrategy.setup_environment(self)     # skips DeepSpeedStrategy's CUDA-only check

    @property
    def root_device(self) -> torch.device:
        # DeepSpeed reads `device_rank = root_device.index` and compares it with 0; CPU devices have index None
        return torch.device("cpu", 0)

    def setup_distributed(self) -> None:
        # as DeepSpeedStrategy, minus the check that CUDA device indices match local ranks (CPU devices have none)
        reset_seed()
        self.set_world_ranks()
        self._init_deepspeed_distributed()


# ---- model materialisation ----

def is_zero3(strategy) -> bool:
    """Whether `strategy` partitions parameters (DeepSpeed ZeRO stage 3)."""
    return isinstance(strategy, DeepSpeedStrategy) and strategy.zero_stage_3


@contextmanager
def outside_zero_init():
    """Suspend an active `deepspeed.zero.Init` (no-op without one).

    Modules created here keep their full, initialised tensors. Parameter initialisers run on the empty placeholders
    of a partitioned parameter and do nothing, so a module whose initialisation matters (LoRA's zero `lora_B`) must
    be created outside; the DeepSpeed engine partitions such parameters later, broadcasting rank 0's values.
    """
    if "deepspeed" not in sys.modules:    # no zero.Init can be active
        yield
        return
    from deepspeed.runtime.zero.partition_parameters import restore_init_context, shutdown_init_context

    shutdown_init_context()
    try:
        yield
    finally:
        restore_init_context()


def local_model_folder(model_path: str) -> Path:
    """The folder holding `model_path`'s config and safetensors (a hub id resolves to its local snapshot)."""
    if Path(model_path).is_dir():
        return Path(model_path)
    from huggingface_hub import snapshot_download

    return Path(snapshot_download(model_path, allow_patterns=["*.json", "*.safetensors"]))


_SAFETENSORS_DTYPES = {"F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
                       "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8,
                       "U8": torch.uint8, "BOOL": torch.bool}


class SafetensorsFile:
    """Element ranges of the tensors in one .safetensors file, read with plain reads.

    Not memory-mapped: every page of a mapped file that a rank touches counts in its resident set until the file is
    closed, so reading half of every tensor through a map costs half the checkpoint again; a read only passes
    through the page cache, which all ranks share. Tensors are stored row-major and contiguous, so a range of the
    flattened tensor is one range of bytes.
    """

    def __init__(self, path: Path):
        self.path = Path(path)
        with open(self.path, "rb") as f:
            header_size = int.from_bytes(f.read(8), "little")
            header = json.loads(f.read(header_size))
        header.pop("__metadata__", None)
        self.entries: dict[str, dict] = header
        self._data_start = 8 + header_size
        self._file = None

    def __enter__(self):
        self._file = open(self.path, "rb", buffering=0)
        return self

    def __exit__(self, *exc):
        self._file.close()
        self._file = None

    def shape(self, name: str) -> tuple[int, ...]:
        return tuple(self.entries[name]["shape"])

    def read_flat(self, name: str, start: int, stop: int, out: torch.Tensor | None = None) -> torch.Tensor:
        """Elements [start, stop) of tensor `name` flattened (inside `with`). Given `out`, they land there: read
        straight into it when it is a contiguous CPU tensor of the stored dtype, so no second buffer exists."""
        entry = self.entries[name]
        dtype = _SAFETENSORS_DTYPES[entry["dtype"]]
        direct = out is not None and out.dtype == dtype and out.is_contiguous() and out.device.type == "cpu"
        buffer = out if direct else torch.empty(stop - start, dtype=dtype, device="cpu")
        itemsize = buffer.element_size()
        self._read_into(self._data_start + entry["data_offsets"][0] + start * itemsize, buffer.view(torch.uint8))
        if out is None or direct:
            return buffer
        return out.copy_(buffer)

    def _read_into(self, offset: int, target: torch.Tensor) -> None:
        view, done = memoryview(target.numpy()), 0
        self._file.seek(offset)
        while done < len(view):
            got = self._file.readinto(view[done:])
            if not got:
                raise EOFError(f"{self.path}: shorter than its header says")
            done += got

    def read(self, name: str) -> torch.Tensor:
        return self.read_flat(name, 0, math.prod(self.shape(name))).reshape(self.shape(name))


def checkpoint_files(folder: Path) -> dict[str, Path]:
    """Tensor name -> safetensors file holding it (single-file or sharded checkpoint)."""
    index = folder / "model.safetensors.index.json"
    if index.is_file():
        weight_map = json.loads(index.read_text())["weight_map"]
        return {name: folder / file for name, file in weight_map.items()}
    single = folder / "model.safetensors"
    if not single.is_file():
        raise FileNotFoundError(f"{folder}: no model.safetensors(.index.json); partitioned loading under ZeRO-3 "
                                "reads safetensors checkpoints only")
    return {name: single for name in SafetensorsFile(single).entries}


def stored_dtype(folder: Path, config) -> torch.dtype:
    """The dtype `dtype="auto"` means: the config's (top level, else the language model's), else the checkpoint's
    first floating tensor's."""
    for dtype in (getattr(config, "dtype", None), getattr(config.get_text_config(), "dtype", None)):
        if isinstance(dtype, torch.dtype):
            return dtype
        if isinstance(dtype, str) and isinstance(getattr(torch, dtype, None), torch.dtype):
            return getattr(torch, dtype)
    files = checkpoint_files(folder)
    entry = SafetensorsFile(files[next(iter(files))]).entries
    stored = [_SAFETENSORS_DTYPES[e["dtype"]] for e in entry.values() if e["dtype"] in ("F64", "F32", "F16", "BF16")]
    return stored[0] if stored else torch.float32


def _partition_range(param) -> tuple[int, int]:
    """The flat element range [start, stop) of `param` that this rank's ZeRO-3 partition holds."""
    from deepspeed import comm

    size = param.ds_tensor.ds_numel     # equal on every rank; the last one is padded past ds_numel
    start = comm.get_rank(group=param.ds_process_group) * size
    return min(start, param.ds_numel), min(start + size, param.ds_numel)


def _fill_partition(param, reader: SafetensorsFile, name: str) -> None:
    if reader.shape(name) != tuple(param.ds_shape):
        raise ValueError(f"{name}: checkpoint shape {reader.shape(name)} != model {tuple(param.ds_shape)}")
    start, stop = _partition_range(param)
    with torch.no_grad():
        param.ds_tensor.zero_()          # the padding of the last partition, for reproducible optimizer state
        if stop > start:
            reader.read_flat(name, start, stop, out=param.ds_tensor[:stop - start])


def fill_partitions(model, folder: Path) -> None:
    """Copy each rank's slice of every parameter (and any persistent buffer) from the checkpoint in `folder`."""
    params = dict(model.named_parameters())      # tied weights appear once
    unsharded = [n for n, p in params.items() if not hasattr(p, "ds_tensor")]
    if unsharded:
        raise RuntimeError(f"parameters not partitioned (built outside zero.Init?): {unsharded[:5]}")
    if any(p.ds_tensor.final_location is not None for p in params.values()):
        raise NotImplementedError("partitioned loading does not support NVMe parameter offload")
    files = checkpoint_files(folder)
    missing = sorted(set(params) - set(files))
    if missing:
        raise KeyError(f"{folder}: checkpoint lacks {len(missing)} parameters of the model, e.g. {missing[:5]}")
    buffers = {n: b for n, b in model.named_buffers() if n in files}
    for file in sorted(set(files.values())):
        with SafetensorsFile(file) as reader:
            for name in reader.entries:
                if name in params:
                    _fill_partition(params[name], reader, name)
                elif name in buffers:
                    buffers[name].copy_(reader.read(name))


def load_partitioned_model(model_path: str, dtype: str | torch.dtype = "auto"):
    """Qwen3-VL (any AutoModelForImageTextToText) built under the active `zero.Init` and filled slice by slice.

    Construction skips weight initialisation (every parameter is then loaded) and keeps RoPE's `arange` in float32
    (zero.Init would otherwise cast it to the 16-bit training dtype), as transformers does in its own ZeRO-3 path.
    """
    from cader.vlm.loading import resolve_dtype
    from transformers import AutoConfig, AutoModelForImageTextToText, GenerationConfig
    from transformers.initialization import no_init_weights
    from transformers.integrations.deepspeed import prevent_arange_dtype_change

    folder = local_model_folder(model_path)
    config = AutoConfig.from_pretrained(folder)
    torch_dtype = resolve_dtype(dtype)
    if torch_dtype == "auto":
        torch_dtype = stored_dtype(folder, config)
    with no_init_weights(), prevent_arange_dtype_change():
        model = AutoModelForImageTextToText.from_config(config, dtype=torch_dtype)
    model.tie_weights()          # skipped with the initialisation
    # outside zero.Init: it turns every floating tensor made inside it into the training dtype on the accelerator,
    # so the staging buffer for an F32 checkpoint's bytes would come back bf16 (half the bytes: NaN weights)
    with outside_zero_init():
        fill_partitions(model, folder)
    if (folder / "generation_config.json").is_file():
        model.generation_config = GenerationConfig.from_pretrained(folder)
    return model


def load_model_for(strategy, model_path: str, dtype: str | torch.dtype):
    """The model as `strategy` wants it on this rank: partitioned under ZeRO-3, whole otherwise."""
    if is_zero3(strategy):
        return load_partitioned_model(model_path, dtype)
    from cader.vlm.loading import load_model

    return load_model(model_path, dtype=dtype)
