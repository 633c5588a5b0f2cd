"""Sharded init: under ZeRO-3 the weights are created inside `deepspeed.zero.Init` by `SFTModule.configure_model` and
every rank reads only its partition from the checkpoint; the export consolidates the shards on rank 0 only.
Elsewhere (one device, DDP) the module loads the whole model, as before, but only when it is first needed."""
import json
import math
import subprocess
import sys
import textwrap
from pathlib import Path

import lightning as L
import pytest
import torch
from cader.train.module import SFTModule
from test_train_zero3_multiprocess import _clean_environ, _free_port


def state_dict_from_checkpoint(path: str | Path) -> dict[str, torch.Tensor]:
    """Module state dict from a Lightning checkpoint file or a DeepSpeed checkpoint folder (ZeRO shards merged)."""
    path = Path(path)
    if path.is_dir():
        from deepspeed.utils.zero_to_fp32 import get_fp32_state_dict_from_zero_checkpoint

        state = get_fp32_state_dict_from_zero_checkpoint(str(path), tag="checkpoint")
        return {k.removeprefix("_forward_module."): v for k, v in state.items()}
    return torch.load(path, map_location="cpu", weights_only=False)["state_dict"]


TEXTS = ["What is 2 + 2? <think>2 + 2 = 4.</think><answer>B</answer>",
         "Which colour is the sky? <think>It is blue.</think><answer>A</answer>"]


def _text_batches(model_dir) -> list[dict]:
    """Collated text-only batches (one sample each): training steps that need no media."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    batches = []
    for text in TEXTS:
        enc = tokenizer(text, return_tensors="pt")
        batches.append({**enc, "labels": enc["input_ids"].clone()})
    return batches


def _loader(batches):
    """The ready batches one per step (with a batch size, which Lightning's DeepSpeed setup reads)."""
    from torch.utils.data import DataLoader

    return DataLoader(batches, batch_size=1, collate_fn=lambda items: items[0])


def _checkpoint_tensors(model_dir) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return load_file(str(model_dir / "model.safetensors"))


def _zero_partition(numel: int, world: int, rank: int) -> tuple[int, int]:
    """DeepSpeed's ZeRO-3 split: the flat tensor padded to a multiple of `world`, rank r holds the r-th equal part."""
    size = math.ceil(numel / world)
    start = min(rank * size, numel)
    return start, min(start + size, numel)


# ---- reading a rank's slice ----

def test_a_rank_reads_exactly_its_partition_of_every_tensor(tmp_path):
    from cader.train.strategies import SafetensorsFile
    from safetensors.torch import save_file

    tensors = {"matrix": torch.randn(7, 5), "vector": torch.randn(13), "cube": torch.randn(3, 4, 5),
               "bf16": torch.randn(5, 3).to(torch.bfloat16), "int": torch.arange(11), "scalar": torch.tensor(2.5)}
    save_file(tensors, str(tmp_path / "t.safetensors"), metadata={"format": "pt"})
    with SafetensorsFile(tmp_path / "t.safetensors") as reader:
        for name, full in tensors.items():
            assert reader.shape(name) == tuple(full.shape) and torch.equal(reader.read(name), full)
            for world in (1, 2, 3, 4):
                pieces = []
                for rank in range(world):
                    start, stop = _zero_partition(full.numel(), world, rank)
                    piece = reader.read_flat(name, start, stop)
                    assert piece.dtype == full.dtype and piece.numel() == stop - start, (name, world, rank)
                    pieces.append(piece)
                assert torch.equal(torch.cat(pieces), full.reshape(-1)), (name, world)
            # into a given tensor: straight when the dtype is the stored one, converted otherwise
            for dtype in (full.dtype, torch.float64):
                out = torch.zeros(full.numel() + 2, dtype=dtype)
                reader.read_flat(name, 1, full.numel(), out=out[1:full.numel()])
                assert torch.equal(out[1:full.numel()], full.reshape(-1)[1:].to(dtype)) and out[0] == out[-1] == 0


def test_checkpoint_files_follow_a_sharded_index(tiny_model_dir, tmp_path):
    from cader.train.strategies import checkpoint_files
    from transformers import AutoModelForImageTextToText

    model = AutoModelForImageTextToText.from_pretrained(tiny_model_dir)
    model.save_pretrained(tmp_path, max_shard_size="100KB")
    files = checkpoint_files(tmp_path)
    assert len(set(files.values())) > 1 and set(files) == set(model.state_dict())
    assert checkpoint_files(tiny_model_dir).keys() == files.keys()
    with pytest.raises(FileNotFoundError, match="safetensors"):
        checkpoint_files(tmp_path / "nowhere")


# ---- one process, one device: nothing changes but the moment of loading ----

def test_the_module_loads_when_first_needed_and_configure_model_keeps_it(tiny_model_dir):
    module = SFTModule(str(tiny_model_dir))
    assert "model" not in module._modules            # nothing read at construction
    model = module.model                             # a bare loop or a test: the whole model, loaded once
    module.configure_model()                         # Lightning calls the hook on every fit: the weights stay
    assert module.model is model
    base = _checkpoint_tensors(tiny_model_dir)
    state = model.state_dict()
    assert all(torch.equal(state[k], v) for k, v in base.items())


def test_the_export_keeps_the_base_dtype_even_where_only_the_checkpoint_names_it(tiny_model_dir, tmp_path):
    from cader.train.export import export_hf
    from cader.train.strategies import stored_dtype
    from transformers import AutoConfig, AutoModelForImageTextToText

    base_dir = tmp_path / "bf16"
    AutoModelForImageTextToText.from_pretrained(tiny_model_dir, dtype=torch.bfloat16).save_pretrained(base_dir)
    config = json.loads((base_dir / "config.json").read_text())
    for section in (config, config["text_config"], config["vision_config"]):
        section.pop("dtype", None)
        section.pop("torch_dtype", None)
    (base_dir / "config.json").write_text(json.dumps(config))
    assert stored_dtype(base_dir, AutoConfig.from_pretrained(base_dir)) == torch.bfloat16

    module = SFTModule(str(tiny_model_dir))                  # trained in float32
    state = {f"model.{k}": v for k, v in module.model.state_dict().items()}
    out = export_hf(state, str(base_dir), tmp_path / "export", processor_path=str(tiny_model_dir))
    exported = AutoModelForImageTextToText.from_pretrained(out, dtype="auto").state_dict()
    for name, value in exported.items():
        assert value.dtype == torch.bfloat16 and torch.equal(value, state[f"model.{name}"].to(torch.bfloat16)), name


# ---- ZeRO-3 in one process ----

class PartitionProbe(L.Callback):
    """At fit start (weights placed, no step yet): whether every parameter is a partitioned placeholder, and the
    gathered weights."""

    def on_fit_start(self, trainer, module):
        import deepspeed

        params = dict(module.model.named_parameters())
        self.placeholders = all(p.numel() == 0 and hasattr(p, "ds_tensor") for p in params.values())
        self.full_numel = {n: p.ds_numel for n, p in params.items()}
        with deepspeed.zero.GatheredParameters(list(params.values())):
            self.gathered = {n: p.detach().clone() for n, p in params.items()}


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_zero3_configure_model_partitions_and_the_export_equals_the_consolidated_shards(tiny_model_dir, tmp_path):
    pytest.importorskip("deepspeed")
    from cader.train.cli import run_export
    from cader.train.strategies import CPUDeepSpeedStrategy
    from transformers import AutoModelForImageTextToText

    probe = PartitionProbe()
    module = SFTModule(str(tiny_model_dir), lr=1e-3)
    trainer = L.Trainer(default_root_dir=str(tmp_path), accelerator="cpu", devices=1, max_steps=2, max_epochs=1,
                        strategy=CPUDeepSpeedStrategy("zero3"), precision="32-true", logger=False,
                        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                        use_distributed_sampler=False, callbacks=[probe])
    trainer.fit(module, train_dataloaders=_loader(_text_batches(tiny_model_dir)))

    base = _checkpoint_tensors(tiny_model_dir)
    assert probe.placeholders
    assert probe.full_numel == {k: v.numel() for k, v in base.items()}
    assert all(torch.equal(probe.gathered[k], v) for k, v in base.items())

    trainer.save_checkpoint(tmp_path / "ckpt")
    consolidated = state_dict_from_checkpoint(tmp_path / "ckpt")     # DeepSpeed's own merge of the fp32 shards
    out = run_export(trainer, module)
    exported = AutoModelForImageTextToText.from_pretrained(out).state_dict()
    assert exported.keys() == base.keys()
    for name, value in exported.items():
        assert torch.equal(value, consolidated[f"model.{name}"]), name
    assert any(not torch.equal(exported[k], base[k]) for k in base)  # the two steps changed the weights


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_zero3_bf16_partitions_hold_the_f32_checkpoints_weights(tiny_model_dir, tmp_path):
    """The paper recipe's case: bf16 training weights read from a checkpoint stored in another dtype. Inside
    zero.Init every new floating tensor is cast to the training dtype, so the F32 staging buffer came back bf16 (half
    the bytes) and the partitions held NaN: the first loss was NaN."""
    pytest.importorskip("deepspeed")
    from cader.train.strategies import CPUDeepSpeedStrategy

    probe, losses = PartitionProbe(), StepLosses()
    trainer = L.Trainer(default_root_dir=str(tmp_path), accelerator="cpu", devices=1, max_steps=1, max_epochs=1,
                        strategy=CPUDeepSpeedStrategy("zero3"), precision="bf16-true", logger=False,
                        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                        use_distributed_sampler=False, callbacks=[probe, losses])
    trainer.fit(SFTModule(str(tiny_model_dir), lr=1e-3, dtype="bfloat16"),
                train_dataloaders=_loader(_text_batches(tiny_model_dir)[:1]))
    base = _checkpoint_tensors(tiny_model_dir)
    assert {v.dtype for v in base.values() if v.is_floating_point()} == {torch.float32}
    for name, value in base.items():
        assert torch.equal(probe.gathered[name], value.to(probe.gathered[name].dtype)), name
    assert all(math.isfinite(x) for x in losses.losses.values()) and losses.losses


class StepLosses(L.Callback):
    def __init__(self):
        self.losses = {}

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        self.losses[trainer.global_step] = float(outputs["loss"])


def _fit_zero3(model_dir, root, batches, epochs: int, ckpt_path=None):
    from cader.train.strategies import CPUDeepSpeedStrategy

    # a constant learning rate: the schedule then does not depend on how many epochs a run plans
    module = SFTModule(str(model_dir), lr=1e-2, warmup_ratio=0.0, lr_scheduler_type="constant_with_warmup")
    losses = StepLosses()
    trainer = L.Trainer(default_root_dir=str(root), accelerator="cpu", devices=1, max_epochs=epochs,
                        strategy=CPUDeepSpeedStrategy("zero3"), precision="32-true", logger=False,
                        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                        use_distributed_sampler=False, callbacks=[losses])
    trainer.fit(module, train_dataloaders=_loader(batches), ckpt_path=ckpt_path)
    return trainer, losses.losses


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_zero3_resume_from_the_sharded_checkpoint_continues_the_run(tiny_model_dir, tmp_path):
    pytest.importorskip("deepspeed")
    batches = _text_batches(tiny_model_dir)          # two steps an epoch
    _, full = _fit_zero3(tiny_model_dir, tmp_path / "full", batches, epochs=2)
    first, _ = _fit_zero3(tiny_model_dir, tmp_path / "first", batches, epochs=1)
    first.save_checkpoint(tmp_path / "epoch1")
    _, resumed = _fit_zero3(tiny_model_dir, tmp_path / "resumed", batches, epochs=2,
                            ckpt_path=str(tmp_path / "epoch1"))
    assert sorted(full) == [1, 2, 3, 4] and sorted(resumed) == [3, 4]
    for step in (3, 4):
        assert resumed[step] == pytest.approx(full[step], rel=1e-5)


# ---- ZeRO-3 in two processes ----

# Launched as a script: Lightning's multi-process launch re-runs it (same argv) for rank 1.
SCRIPT = textwrap.dedent(
    """
    import json, sys
    from pathlib import Path

    import deepspeed
    import lightning as L
    from cader.train.cli import run_export
    from cader.train.module import SFTModule
    from cader.train.strategies import CPUDeepSpeedStrategy
    from torch.utils.data import DataLoader
    from transformers import AutoTokenizer

    model_dir, root, lora_r, texts = sys.argv[1], sys.argv[2], int(sys.argv[3]), json.loads(sys.argv[4])


    class Partitions(L.Callback):
        def on_fit_start(self, trainer, module):
            params = list(module.model.parameters())
            info = {"placeholders": all(p.numel() == 0 for p in params),
                    "local": sum(p.ds_tensor.numel() for p in params), "full": sum(p.ds_numel for p in params),
                    "count": len(params)}
            lora_b = [p for n, p in module.model.named_parameters() if "lora_B" in n]
            with deepspeed.zero.GatheredParameters(lora_b):     # LoRA starts from the base model: B = 0
                info["lora_b_zero"] = all(not p.any() for p in lora_b)
            Path(root, f"rank{trainer.global_rank}.json").write_text(json.dumps(info))


    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    batches = []
    for text in texts:
        enc = tokenizer(text, return_tensors="pt")
        batches.append({**enc, "labels": enc["input_ids"].clone()})
    module = SFTModule(model_dir, lr=1e-2, lora_r=lora_r, lora_alpha=8)
    trainer = L.Trainer(default_root_dir=root, accelerator="cpu", devices=2, strategy=CPUDeepSpeedStrategy("zero3"),
                        precision="32-true", max_steps=2, max_epochs=2, logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False, use_distributed_sampler=False,
                        callbacks=[Partitions()])
    # batch_size 1 + the ready batch: Lightning's DeepSpeed reads the loader's batch size
    trainer.fit(module, train_dataloaders=DataLoader(batches, batch_size=1, collate_fn=lambda items: items[0]))
    trainer.save_checkpoint(Path(root, "ckpt"))
    run_export(trainer, module)
    """
)


def _run_two_ranks(tiny_model_dir, tmp_path, lora_r: int):
    script = tmp_path / "two_ranks.py"
    script.write_text(SCRIPT)
    root = tmp_path / "run"
    root.mkdir()
    for _ in range(3):   # a free port can be taken by another process before rank 0 binds it: retry
        env = {**_clean_environ(), "DS_ACCELERATOR": "cpu", "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false",
               "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(_free_port())}
        proc = subprocess.run([sys.executable, str(script), str(tiny_model_dir), str(root), str(lora_r), json.dumps(TEXTS)],
                              cwd=tmp_path, env=env, capture_output=True, text=True, timeout=200, check=False)
        if "EADDRINUSE" not in proc.stderr:
            break
    assert proc.returncode == 0, proc.stderr[-4000:]
    return root


def _merged_lora(consolidated: dict[str, torch.Tensor], scaling: float) -> dict[str, torch.Tensor]:
    """The HF state dict that merging the consolidated LoRA state gives: W + scaling * B @ A per adapted layer."""
    prefix, merged = "model.base_model.model.", {}
    for key, value in consolidated.items():
        if "lora_" in key:
            continue
        name = key.removeprefix(prefix).replace(".base_layer.", ".")
        if ".base_layer.weight" in key:
            stem = key.removesuffix("base_layer.weight")
            a, b = consolidated[stem + "lora_A.default.weight"], consolidated[stem + "lora_B.default.weight"]
            value = value + scaling * (b @ a)
        merged[name] = value
    return merged


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("lora_r", [0, 4])
def test_zero3_two_ranks_hold_half_each_and_export_the_consolidated_model(tiny_model_dir, tmp_path, lora_r):
    pytest.importorskip("deepspeed")
    from transformers import AutoModelForImageTextToText

    root = _run_two_ranks(tiny_model_dir, tmp_path, lora_r)
    ranks = [json.loads((root / f"rank{r}.json").read_text()) for r in (0, 1)]
    base = _checkpoint_tensors(tiny_model_dir)
    for info in ranks:
        assert info["placeholders"] and info["lora_b_zero"]
        # each rank holds half of every tensor (rounded up: the odd element is padding), never the whole model
        assert info["full"] / 2 <= info["local"] <= (info["full"] + info["count"]) / 2

    consolidated = state_dict_from_checkpoint(root / "ckpt")
    exported = AutoModelForImageTextToText.from_pretrained(root / "export").state_dict()
    if lora_r:
        expected = _merged_lora(consolidated, scaling=8 / lora_r)
        for name, value in exported.items():
            assert torch.allclose(value, expected[name], atol=1e-6), name
        adapted = [k for k in base if not torch.equal(exported[k], base[k])]
        assert adapted and all("language_model" in k and "proj" in k for k in adapted)
    else:
        for name, value in exported.items():
            assert torch.equal(value, consolidated[f"model.{name}"]), name
        assert any(k.startswith("model.language_model") and not torch.equal(exported[k], base[k]) for k in base)
