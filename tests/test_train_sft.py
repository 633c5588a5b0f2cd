"""Training: loss falls, exact resume, HF export (full and LoRA-merged), ZeRO-3 on CPU, configs parse."""
import math
from pathlib import Path

import lightning as L
import pytest
import torch
from cader.train.cli import missing_inputs_message, parse_sft_args, run_export
from cader.train.datamodule import SFTDataModule, Source
from cader.train.module import SFTModule
from cader.train.pixels import normalize_pixels

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def train_dir(tmp_path_factory):
    from cader.dev.synthetic.dataset import Counts, make_synthetic_data

    out = tmp_path_factory.mktemp("sft_train")
    make_synthetic_data(out, counts=Counts(n_train=8, n_images=2, n_tool=1, n_eval=1, n_heldout=1))
    return out / "train"


def _datamodule(model_dir, train_dir, report_dir, ratio=3.0):
    src = Source("video_r1", "video_r1", str(train_dir / "video_r1_cot.json"), ratio=ratio)
    return SFTDataModule([src], processor_path=str(model_dir), batch_size=1, max_length=1024, report_dir=str(report_dir))


class LossRecorder(L.Callback):
    def __init__(self):
        self.losses = {}
        self.batches = {}

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        self.losses[trainer.global_step] = float(outputs["loss"])
        self.batches[trainer.global_step] = int(batch["input_ids"].sum())


def _trainer(root, callbacks=(), max_steps=4, **kw):
    return L.Trainer(default_root_dir=str(root), accelerator="cpu", devices=1, max_steps=max_steps, max_epochs=1,
                     logger=False, enable_progress_bar=False, enable_model_summary=False,
                     use_distributed_sampler=False, callbacks=list(callbacks), **kw)


@pytest.mark.slow
def test_loss_decreases_on_a_repeated_batch(tiny_model_dir, train_dir, tmp_path):
    dm = _datamodule(tiny_model_dir, train_dir, tmp_path)
    dm.setup()
    batch = normalize_pixels(next(iter(dm.train_dataloader())))   # uint8 pixels from the workers -> model inputs
    module = SFTModule(str(tiny_model_dir), lr=1e-2)
    opt = torch.optim.AdamW(module.model.parameters(), lr=1e-2)
    losses = []
    for _ in range(6):
        loss = module.model(**batch).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < 0.8 * losses[0]


@pytest.mark.slow
def test_resume_reproduces_next_step_loss_and_export_reloads(tiny_model_dir, train_dir, tmp_path):
    L.seed_everything(0)
    ckpt_cb = L.pytorch.callbacks.ModelCheckpoint(dirpath=tmp_path / "ck", every_n_train_steps=2, save_top_k=-1)
    full = LossRecorder()
    module = SFTModule(str(tiny_model_dir), lr=5e-3, warmup_ratio=0.25)
    trainer = _trainer(tmp_path / "a", [ckpt_cb, full])
    trainer.fit(module, datamodule=_datamodule(tiny_model_dir, train_dir, tmp_path))
    assert len(full.losses) == 4
    # scheduler: 4 optimizer steps (max_steps), warmup ceil(0.25 * 4) = 1, cosine after; the last lr used = step 3
    assert trainer.optimizers[0].param_groups[0]["lr"] == pytest.approx(0.0)
    ckpt = next(p for p in (tmp_path / "ck").iterdir() if "step=2" in p.name)
    L.seed_everything(0)
    resumed = LossRecorder()
    module2 = SFTModule(str(tiny_model_dir), lr=5e-3, warmup_ratio=0.25)
    _trainer(tmp_path / "b", [resumed]).fit(module2, datamodule=_datamodule(tiny_model_dir, train_dir, tmp_path),
                                           ckpt_path=str(ckpt))
    assert sorted(resumed.losses) == [3, 4]
    for step in (3, 4):
        assert resumed.batches[step] == full.batches[step]
        assert resumed.losses[step] == pytest.approx(full.losses[step], rel=1e-5)

    out = run_export(trainer, module)
    from transformers import AutoModelForImageTextToText

    reloaded = AutoModelForImageTextToText.from_pretrained(out).eval()
    assert (out / "chat_template.jinja").exists() or (out / "chat_template.json").exists()
    state = module.model.state_dict()
    for name, value in reloaded.state_dict().items():
        assert torch.allclose(value, state[name]), name
    ids = torch.tensor([[1, 2, 3]])
    gen = reloaded.generate(input_ids=ids, max_new_tokens=3, do_sample=False)
    assert gen.shape == (1, 6)


@pytest.mark.slow
def test_lora_train_merge_export(tiny_model_dir, train_dir, tmp_path):
    module = SFTModule(str(tiny_model_dir), lr=1e-2, lora_r=4, lora_alpha=8)
    trainable = {n for n, p in module.model.named_parameters() if p.requires_grad}
    assert trainable and all("lora_" in n for n in trainable)
    trainer = _trainer(tmp_path, max_steps=2)
    dm = _datamodule(tiny_model_dir, train_dir, tmp_path)
    trainer.fit(module, datamodule=dm)
    batch = next(iter(dm.train_dataloader()))
    module.model.eval()
    trained = {k: v.clone() for k, v in module.state_dict().items()}
    with torch.no_grad():
        expected = module.model(**batch).logits
    out = run_export(trainer, module)
    # the export leaves the trained module as it was (peft 0.22 merges in place: into the module's own weights
    # when the export adopted them)
    changed = [k for k, v in module.state_dict().items() if not torch.equal(v, trained[k])]
    assert not changed, f"the export changed the trained module: {changed[:3]}"
    from transformers import AutoModelForImageTextToText

    merged = AutoModelForImageTextToText.from_pretrained(out).eval()
    assert not any("lora" in k for k in merged.state_dict())
    with torch.no_grad():
        got = merged(**batch).logits
        again = module.model(**batch).logits
    assert torch.allclose(expected, got, atol=1e-4)
    assert torch.equal(expected, again)
    # the merged weight is the base plus scaling * B @ A of the trained adapters (lora_alpha / r = 2)
    prefix = "model.base_model.model.model.language_model.layers.0.self_attn.q_proj."
    want = trained[prefix + "base_layer.weight"] + 2.0 * (trained[prefix + "lora_B.default.weight"]
                                                          @ trained[prefix + "lora_A.default.weight"])
    torch.testing.assert_close(merged.state_dict()["model.language_model.layers.0.self_attn.q_proj.weight"], want)


@pytest.mark.slow
def test_deepspeed_zero3_on_cpu_one_process(tiny_model_dir, train_dir, tmp_path):
    pytest.importorskip("deepspeed")
    from cader.train.strategies import CPUDeepSpeedStrategy

    module = SFTModule(str(tiny_model_dir), lr=1e-3)
    rec = LossRecorder()
    trainer = _trainer(tmp_path, [rec], max_steps=2, strategy=CPUDeepSpeedStrategy("zero3"), precision="32-true")
    trainer.fit(module, datamodule=_datamodule(tiny_model_dir, train_dir, tmp_path))
    assert len(rec.losses) == 2 and all(math.isfinite(v) for v in rec.losses.values())
    out = run_export(trainer, module)
    from transformers import AutoModelForImageTextToText

    reloaded = AutoModelForImageTextToText.from_pretrained(out)
    assert sum(p.numel() for p in reloaded.parameters()) > 0


@pytest.mark.parametrize("name", ["cot_mix_tiny.yaml", "cot_mix.yaml"])
def test_shipped_configs_parse(name):
    cfg = parse_sft_args(["--config", name])
    assert cfg.data.processor_path == cfg.model.model_path
    assert cfg.data.sources and cfg.trainer.use_distributed_sampler is False


def test_tiny_config_trains_on_every_file_the_synthetic_generator_writes():
    from cader.dev.synthetic.train_mix import SYNTHETIC_MIX

    cfg = parse_sft_args(["--config", "cot_mix_tiny.yaml"])
    listed = [(s["name"] if isinstance(s, dict) else s.name, s["format"] if isinstance(s, dict) else s.format,
               Path(s["path"] if isinstance(s, dict) else s.path).name) for s in cfg.data.sources]
    assert listed == [tuple(x) for x in SYNTHETIC_MIX]


def test_paper_recipe_numbers():
    cfg = parse_sft_args(["--config", "cot_mix"])
    assert cfg.model.lr == 1e-5 and cfg.model.warmup_ratio == 0.1 and cfg.trainer.max_epochs == 1
    assert cfg.data.max_length == 10240 and cfg.data.fps == 1.0 and cfg.data.max_frames == 4096
    assert cfg.data.video_max_pixels == 65536 and cfg.data.image_max_pixels == 262144
    effective = cfg.data.batch_size * cfg.trainer.devices * cfg.trainer.num_nodes * cfg.trainer.accumulate_grad_batches
    assert effective == 16 and cfg.trainer.precision == "bf16-true"


def test_unknown_key_fails_naming_it(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text((REPO / "configs/train/cot_mix_tiny.yaml").read_text() + "\nmodel_typo: 1\n")
    with pytest.raises(SystemExit):
        parse_sft_args(["--config", str(bad)])
    assert "model_typo" in capsys.readouterr().err


def test_deepspeed_configs_load():
    from cader.train.strategies import NAMED_CONFIGS, load_deepspeed_config

    stages = {name: load_deepspeed_config(name)["zero_optimization"]["stage"] for name in NAMED_CONFIGS}
    assert stages == {"zero2": 2, "zero3": 3, "zero3_offload": 3}
    assert load_deepspeed_config("zero3_offload")["zero_optimization"]["offload_optimizer"]["device"] == "cpu"


def test_process_group_timeout_outlasts_the_cold_plan_barrier():
    from datetime import timedelta

    from cader.train.strategies import SFTDeepSpeedStrategy
    from torch.distributed.constants import default_pg_timeout

    cfg = parse_sft_args(["--config", "cot_mix.yaml"])
    minutes = cfg.trainer.strategy.init_args.pg_timeout_minutes
    assert minutes == 120
    assert SFTDeepSpeedStrategy("zero3", pg_timeout_minutes=minutes)._timeout == timedelta(minutes=120)
    assert SFTDeepSpeedStrategy("zero3")._timeout == default_pg_timeout
    with pytest.raises(ValueError, match="pg_timeout_minutes"):
        SFTDeepSpeedStrategy("zero3", pg_timeout_minutes=0)


def test_missing_tiny_inputs_name_the_command(tmp_path):
    make_missing = {f"{tmp_path}/nope": f"python scripts/make_tiny_model.py --out {tmp_path}/nope"}
    msg = missing_inputs_message(make_missing)
    assert f"python scripts/make_tiny_model.py --out {tmp_path}/nope" in msg
    (tmp_path / "nope").mkdir()
    assert missing_inputs_message(make_missing) is None


def test_missing_inputs_of_the_tiny_config_stop_sft_with_their_commands(tmp_path, monkeypatch, capsys):
    import importlib

    sft = importlib.import_module("cader.train.sft")
    monkeypatch.chdir(tmp_path)   # the tiny config's relative runs/tiny/... paths do not exist here
    assert sft.main(["--config", "cot_mix_tiny"]) == 2
    err = capsys.readouterr().err
    assert "python scripts/make_tiny_model.py --out runs/tiny/model" in err and "make_synthetic_data.py" in err


@pytest.mark.slow
def test_plan_only_budgets_the_mix_without_a_trainer(tiny_model_dir, train_dir, tmp_path, capsys):
    import importlib

    sft = importlib.import_module("cader.train.sft")

    # cot_mix.yaml asks for 8 GPUs and DeepSpeed: building its Trainer on this CPU machine would fail.
    source = {"name": "video_r1", "format": "video_r1", "path": str(train_dir / "video_r1_cot.json"),
              "media_root": str(train_dir)}
    argv = ["--config", "cot_mix.yaml", "--model.model_path", str(tiny_model_dir), "--data.sources", f"[{source}]",
            "--data.plan_cache_dir", str(tmp_path / "cache"), "--trainer.default_root_dir", str(tmp_path / "run"),
            "--plan_only", "true"]
    assert sft.main(argv) == 0
    out = capsys.readouterr().out
    assert "video_r1:" in out and "0 reused from an earlier run" in out and "to train" in out
    report = (tmp_path / "run" / "data_report.json").read_text()
    assert '"tool_calls_dropped": 1' in report and list((tmp_path / "cache").glob("video_r1_cot.json.*.plan.arrow"))
    assert sft.main(argv) == 0  # a second run reads the cache
    assert "plan cache: 0 rows planned by this run" in capsys.readouterr().out

    missing = argv[:5] + [f"[{dict(source, path=str(tmp_path / 'absent.json'))}]"] + argv[6:]
    assert sft.main(missing) == 2
    assert "absent.json" in capsys.readouterr().err


def test_a_model_neither_local_nor_cached_stops_sft_in_one_line(tmp_path, monkeypatch, capsys):
    import importlib

    sft = importlib.import_module("cader.train.sft")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    import huggingface_hub.constants

    # an empty cache, read at call time, so the test holds on a machine that did download the 8B
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "empty_cache"))
    code = sft.main(["--config", "cot_mix_tiny", "--make_missing", "null",
                     "--model.model_path", "Qwen/Qwen3-VL-8B-Instruct"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1, err
    # the pinned huggingface-hub installs the `hf` command only (no `huggingface-cli`)
    assert "Qwen/Qwen3-VL-8B-Instruct" in err[0] and "(hf download Qwen/Qwen3-VL-8B-Instruct)" in err[0]
