"""DeepSpeed ZeRO-3 with two CPU processes over gloo: a text-only sample on one rank and a video on the other.

Under ZeRO-3 every parameter is gathered collectively when a module runs, so a rank that skips the vision tower
(text-only batch) while the other runs it waits forever. SFTModule's vision guard runs the tower on a dummy input for
every modality a batch lacks; this test trains two steps with such batches, checks that both ranks called the tower
equally often in every step, and that the consolidated HF export reloads.
"""
import json
import os
import socket
import subprocess
import sys
import textwrap

import pytest

# Launched as a script: Lightning's multi-process launch re-runs it (same argv) for rank 1.
SCRIPT = textwrap.dedent(
    """
    import json, sys
    from pathlib import Path

    import lightning as L
    from cader.train.cli import run_export
    from cader.train.datamodule import SFTDataModule, Source
    from cader.train.module import SFTModule
    from cader.train.strategies import CPUDeepSpeedStrategy

    model_dir, data_file, root = sys.argv[1:4]


    class VisionCalls(L.Callback):
        def on_train_start(self, trainer, module):
            self.calls, self.steps = 0, []
            module._visual().register_forward_hook(lambda *args: setattr(self, "calls", self.calls + 1))

        def on_train_batch_start(self, trainer, module, batch, batch_idx):
            self.calls = 0

        def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
            kind = "video" if "pixel_values_videos" in batch else "image" if "pixel_values" in batch else "text"
            self.steps.append({"kind": kind, "vision_calls": self.calls, "loss": float(outputs["loss"])})

        def on_train_end(self, trainer, module):
            Path(root, f"rank{trainer.global_rank}.json").write_text(json.dumps(self.steps))


    calls = VisionCalls()
    dm = SFTDataModule([Source("mix", "sharegpt", data_file)], processor_path=model_dir, batch_size=1,
                       max_length=1024, report_dir=root)
    module = SFTModule(model_dir, lr=1e-3)
    trainer = L.Trainer(default_root_dir=root, accelerator="cpu", devices=2, strategy=CPUDeepSpeedStrategy("zero3"),
                        precision="32-true", max_steps=2, max_epochs=2, logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False, use_distributed_sampler=False,
                        callbacks=[calls])
    trainer.fit(module, datamodule=dm)
    run_export(trainer, module)
    """
)


def _clean_environ() -> dict:
    """os.environ without the rank variables an earlier in-process Lightning/DeepSpeed run leaves behind (with
    LOCAL_RANK set, Lightning believes it is already a launched rank and never starts the second process)."""
    prefixes = ("LOCAL_RANK", "RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "NODE_RANK", "GROUP_RANK", "MASTER_",
                "PL_", "TORCHELASTIC_", "CROSS_RANK", "CROSS_SIZE")
    return {k: v for k, v in os.environ.items() if not k.startswith(prefixes)}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _write_mix(tmp_path):
    from cader.dev.synthetic.media import VideoSpec, write_video

    write_video(VideoSpec("clip", duration=6.0, fps=2, t_s=2.0, t_e=4.0, colour="red"), tmp_path / "clip.mp4")
    rows = [
        {"messages": [{"role": "user", "content": "What is 2 + 2?\nOptions:\nA. 3\nB. 4"},
                      {"role": "assistant", "content": "<think>2 + 2 = 4.</think><answer>B</answer>"}]},
        {"messages": [{"role": "user", "content": "<video>What colour is the shape?\nOptions:\nA. red\nB. blue"},
                      {"role": "assistant", "content": "<think>It is red.</think><answer>A</answer>"}],
         "videos": ["clip.mp4"]},
    ]
    path = tmp_path / "mix.json"
    path.write_text(json.dumps(rows))
    return path


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_zero3_two_processes_text_only_vs_video_rank(tiny_model_dir, tmp_path):
    pytest.importorskip("deepspeed")
    data = _write_mix(tmp_path)
    script = tmp_path / "zero3_two_ranks.py"
    script.write_text(SCRIPT)
    root = tmp_path / "run"
    root.mkdir()
    for _ in range(3):   # a free port can be taken by another process before rank 0 binds it: retry
        env = {**_clean_environ(), "DS_ACCELERATOR": "cpu", "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false",
               "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(_free_port())}
        proc = subprocess.run([sys.executable, str(script), str(tiny_model_dir), str(data), str(root)],
                              cwd=tmp_path, env=env, capture_output=True, text=True, timeout=200, check=False)
        if "EADDRINUSE" not in proc.stderr:
            break
    assert proc.returncode == 0, proc.stderr[-4000:]

    ranks = [json.loads((root / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert [len(r) for r in ranks] == [2, 2]
    for step0, step1 in zip(*ranks):
        # one rank trains on the text-only sample while the other trains on the video, in every step
        assert {step0["kind"], step1["kind"]} == {"text", "video"}
        # the guard: the tower ran on both ranks, equally often (the text-only rank on dummies)
        assert step0["vision_calls"] == step1["vision_calls"] >= 1
        assert all(abs(s["loss"]) < 1e3 for s in (step0, step1))

    import torch
    from transformers import AutoModelForImageTextToText

    export = root / "export"
    trained = AutoModelForImageTextToText.from_pretrained(export)
    base = AutoModelForImageTextToText.from_pretrained(tiny_model_dir)
    trained_state, base_state = trained.state_dict(), base.state_dict()
    assert trained_state.keys() == base_state.keys()
    assert all(torch.isfinite(v).all() for v in trained_state.values())
    changed = [k for k in base_state if not torch.equal(trained_state[k], base_state[k])]
    assert any(k.startswith("model.language_model") for k in changed)
    assert any(k.startswith("model.visual") for k in changed)    # the video rank's gradients reached the tower
