import string
import subprocess
import sys

import numpy as np
import pytest
import torch
from cader.vlm.loading import load_model, load_processor
from cader.vlm.messages import build_messages, encode, render
from cader.vlm.video import VideoReader
from PIL import Image


@pytest.fixture(scope="module")
def processor(tiny_model_dir):
    return load_processor(str(tiny_model_dir))


@pytest.fixture(scope="module")
def model(tiny_model_dir):
    return load_model(str(tiny_model_dir), dtype="float32")


def test_letters_and_yes_no_are_single_tokens(processor):
    tok = processor.tokenizer
    for word in [*string.ascii_uppercase, "Yes", "No"]:
        ids = tok.encode(word, add_special_tokens=False)
        assert len(ids) == 1, word
        assert tok.decode(ids) == word
    assert len({tok.convert_tokens_to_ids(c) for c in string.ascii_uppercase}) == 26


def test_chat_template_renders_like_the_released_instruct_template(processor):
    """No default system turn, `<|im_start|>role\n...<|im_end|>\n`, and `enable_thinking` ignored (the switch is added
    by training/export or by the backends: tests/test_vlm_chat_template.py)."""
    msgs = build_messages("Q?", system="S")
    off = render(processor, msgs, enable_thinking=False)
    on = render(processor, msgs, enable_thinking=True)
    assert off == on == "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nQ?<|im_end|>\n<|im_start|>assistant\n"
    assert render(processor, build_messages("Q?"), enable_thinking=True).startswith("<|im_start|>user\n")


def test_video_prompt_carries_real_timestamps(processor, barcode_video):
    frames = VideoReader(barcode_video).sample_uniform(0.5, start=10, end=30, max_pixels=65_536)
    assert list(frames.timestamps) == [11.0, 13.0, 15.0, 17.0, 19.0, 21.0, 23.0, 25.0, 27.0, 29.0]
    batch = encode(processor, build_messages("Q?", video=frames), video=frames)
    text = processor.tokenizer.decode(batch["input_ids"][0])
    # the processor stamps each temporal pair with the mean time of its two frames
    stamps = [float(s.split()[0]) for s in text.split("<")[1:] if s.endswith("seconds>") or " seconds>" in s]
    assert stamps == [12.0, 16.0, 20.0, 24.0, 28.0]
    assert batch["video_grid_thw"].tolist() == [[5, 4, 4]]  # 48x64 -> 64x64 px: 4x4 patches of 16 px


def test_forward_loss_backward_and_generate(model, processor, barcode_video):
    frames = VideoReader(barcode_video).sample_uniform(0.2, max_pixels=65_536)
    image = Image.fromarray(np.full((64, 96, 3), 200, np.uint8))
    msgs = build_messages("Which?", video=frames, images=[image], assistant_text="<answer>A</answer>")
    batch = encode(processor, msgs, video=frames, images=[image], add_generation_prompt=False)
    labels = batch["input_ids"].clone()
    model.train()
    out = model(**batch, labels=labels)
    assert torch.isfinite(out.loss)
    out.loss.backward()
    vision_grads = [p.grad for n, p in model.named_parameters() if "visual" in n and p.grad is not None]
    assert vision_grads and any(g.abs().sum() > 0 for g in vision_grads)
    model.zero_grad()
    model.eval()
    prompt = encode(processor, build_messages("Which?", video=frames), video=frames)
    with torch.no_grad():
        gen = model.generate(**prompt, max_new_tokens=4, do_sample=False)
    assert gen.shape[1] > prompt["input_ids"].shape[1]


@pytest.mark.slow
def test_reloads_offline_in_a_fresh_process(tiny_model_dir):
    code = (
        "from transformers import AutoProcessor, AutoModelForImageTextToText\n"
        f"p = AutoProcessor.from_pretrained({str(tiny_model_dir)!r})\n"
        f"m = AutoModelForImageTextToText.from_pretrained({str(tiny_model_dir)!r})\n"
        "print(type(m).__name__, type(p).__name__, sum(x.numel() for x in m.parameters()))\n"
    )
    env = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "PATH": "/usr/bin:/bin"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    name, proc_name, n_params = out.stdout.split()[-3:]
    assert name == "Qwen3VLForConditionalGeneration" and proc_name == "Qwen3VLProcessor"
    assert 100_000 < int(n_params) < 1_000_000
