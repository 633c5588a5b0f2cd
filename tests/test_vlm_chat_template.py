"""The Qwen3 thinking switch through train -> export -> eval, and the processor's video expansion.

The tiny model's own template ignores `enable_thinking`, as the released Qwen3-VL-*-Instruct templates do, so these
tests meet the situation a real checkpoint puts CADER in.
"""

import re

import numpy as np
import pytest
import torch
from cader.evaluate.backends.base import Prompt, template_check
from cader.evaluate.backends.hf import HFBackend
from cader.vlm.chat_template import (
    GENERATION_PROMPT,
    QWEN3_VL_CHAT_TEMPLATE,
    THINK_PREFILL,
    ThinkingSwitchError,
    add_thinking_switch,
    honours_thinking_switch,
)
from cader.vlm.loading import load_processor
from cader.vlm.messages import build_messages, encode, render
from cader.vlm.video import Frames

# A template that already has the Qwen3 switch (the shape of Qwen3's own templates): left as it is.
SWITCHED_ELSEWHERE = QWEN3_VL_CHAT_TEMPLATE.replace(
    "<|im_start|>assistant\n{% endif %}",
    "<|im_start|>assistant\n{% if enable_thinking is defined and enable_thinking is false %}"
    "<think>\n\n</think>\n\n{% endif %}{% endif %}",
)


def _frames(n=4, size=64):
    return Frames(
        np.zeros((n, size, size, 3), np.uint8), np.arange(n) + 0.5, np.arange(n), native_fps=1.0
    )


def _render_raw(template, messages, **kw):
    from transformers.utils.chat_template_utils import render_jinja_template

    rendered, _ = render_jinja_template(conversations=[messages], chat_template=template, **kw)
    return rendered[0]


def test_tiny_template_ignores_enable_thinking_like_the_released_instruct_one():
    msgs = build_messages("Q?", system="S", video=_frames())
    on = _render_raw(QWEN3_VL_CHAT_TEMPLATE, msgs, add_generation_prompt=True, enable_thinking=True)
    off = _render_raw(QWEN3_VL_CHAT_TEMPLATE, msgs, add_generation_prompt=True, enable_thinking=False)
    assert on == off
    assert on == (
        "<|im_start|>system\nS<|im_end|>\n"
        "<|im_start|>user\n<|vision_start|><|video_pad|><|vision_end|>Q?<|im_end|>\n"
        "<|im_start|>assistant\n"
    )
    assert not honours_thinking_switch(QWEN3_VL_CHAT_TEMPLATE)


def test_add_thinking_switch_keeps_thinking_on_and_prefills_thinking_off():
    switched = add_thinking_switch(QWEN3_VL_CHAT_TEMPLATE)
    assert honours_thinking_switch(switched)
    msgs = build_messages("Q?", system="S", video=_frames())
    base = _render_raw(QWEN3_VL_CHAT_TEMPLATE, msgs, add_generation_prompt=True)
    assert _render_raw(switched, msgs, add_generation_prompt=True, enable_thinking=True) == base
    assert _render_raw(switched, msgs, add_generation_prompt=True) == base  # the Qwen3 default is thinking on
    assert _render_raw(switched, msgs, add_generation_prompt=True, enable_thinking=False) == base + THINK_PREFILL
    # a training row (no generation prompt) renders the same with or without the switch
    row = build_messages("Q?", video=_frames(), assistant_text="<think>x</think><answer>A</answer>")
    for flag in (True, False):
        assert _render_raw(switched, row, add_generation_prompt=False, enable_thinking=flag) == _render_raw(
            QWEN3_VL_CHAT_TEMPLATE, row, add_generation_prompt=False
        )
    assert add_thinking_switch(switched) == switched  # idempotent
    assert add_thinking_switch(SWITCHED_ELSEWHERE) == SWITCHED_ELSEWHERE


def test_add_thinking_switch_refuses_a_template_whose_prompt_does_not_end_with_the_assistant_header():
    odd = QWEN3_VL_CHAT_TEMPLATE.replace("<|im_start|>assistant\n{% endif %}", "<|im_start|>assistant\nSure: {% endif %}")
    with pytest.raises(ThinkingSwitchError):
        add_thinking_switch(odd)


def test_render_prefills_only_thinking_off_prompts_when_asked(tiny_model_dir):
    processor = load_processor(str(tiny_model_dir))
    msgs = build_messages("Q?")
    assert render(processor, msgs, enable_thinking=False, prefill_think=True).endswith(GENERATION_PROMPT + THINK_PREFILL)
    assert render(processor, msgs, enable_thinking=True, prefill_think=True).endswith(GENERATION_PROMPT)
    assert render(processor, msgs, enable_thinking=False, prefill_think=False).endswith(GENERATION_PROMPT)


def _ids(tokenizer, text):
    return tokenizer(text, add_special_tokens=False)["input_ids"]


@pytest.fixture(scope="module")
def sft_export(tiny_model_dir, tmp_path_factory):
    """One SFT step on a CoT target from the tiny base model (whose template ignores the switch), then the export."""
    from cader.train.export import export_hf
    from cader.train.module import SFTModule

    module = SFTModule(str(tiny_model_dir), lr=1e-3)
    processor = load_processor(str(tiny_model_dir))
    frames = _frames()
    msgs = build_messages("Which colour?", video=frames, assistant_text="<think>red</think><answer>A</answer>")
    batch = dict(encode(processor, msgs, video=frames, add_generation_prompt=False))
    batch["labels"] = batch["input_ids"].clone()
    optimizer = torch.optim.AdamW(module.model.parameters(), lr=1e-3)
    module.model(**batch).loss.backward()
    optimizer.step()
    return export_hf(module.state_dict(), str(tiny_model_dir), tmp_path_factory.mktemp("switch_sft") / "export")


def test_export_carries_the_switch_and_stage1_prompts_end_with_the_empty_think_block(tiny_model_dir, sft_export):
    assert not honours_thinking_switch(load_processor(str(tiny_model_dir)))
    assert honours_thinking_switch(load_processor(str(sft_export)))

    exported, base = HFBackend(str(sft_export), dtype="float32"), HFBackend(str(tiny_model_dir), dtype="float32")
    assert exported.template.to_dict() == {"honours_enable_thinking": True, "think_block_added": False}
    assert base.template.to_dict() == {"honours_enable_thinking": False, "think_block_added": True}

    tok = exported.tokenizer
    stage1 = Prompt("Which colour? A. red B. blue", system="S", video=_frames(), enable_thinking=False)
    stage2 = Prompt("Where is it?", system="S", video=_frames(), enable_thinking=True)
    thinking_off_tail = _ids(tok, GENERATION_PROMPT + THINK_PREFILL)
    for backend in (exported, base):  # switch in the template, or the block added by the backend: same ids
        ids = backend._inputs(stage1)["input_ids"][0].tolist()
        assert ids[-len(thinking_off_tail):] == thinking_off_tail
        open_ids = backend._inputs(stage2)["input_ids"][0].tolist()
        assert open_ids[-len(_ids(tok, GENERATION_PROMPT)):] == _ids(tok, GENERATION_PROMPT)
        assert tok.convert_tokens_to_ids("<think>") not in open_ids
    assert exported._inputs(stage1)["input_ids"].tolist() == base._inputs(stage1)["input_ids"].tolist()


def test_vllm_requests_carry_the_think_block_and_the_bare_video_placeholder(tiny_model_dir):
    from cader.evaluate.backends.vllm import VLLMBackend

    backend = VLLMBackend.__new__(VLLMBackend)  # request rendering only: no engine, no vLLM import
    backend.processor = load_processor(str(tiny_model_dir))
    backend.template = template_check(backend.processor)
    off = backend._request(Prompt("Q?", video=_frames(), enable_thinking=False))
    on = backend._request(Prompt("Q?", video=_frames(), enable_thinking=True))
    assert off["prompt"].endswith(GENERATION_PROMPT + THINK_PREFILL)
    assert on["prompt"].endswith(GENERATION_PROMPT)
    # vLLM 0.32's Qwen3-VL prompt update expands the <|video_pad|> alone and keeps the template's outer vision tokens,
    # so the request carries the bare pad (as the HF path does): otherwise the model sees 2 tokens it never saw
    assert "<|vision_start|><|video_pad|><|vision_end|>" not in off["prompt"]
    assert off["prompt"].count("<|video_pad|>") == 1
    assert off["mm_processor_kwargs"] == {"do_sample_frames": False, "do_resize": False}


def _expected_video_text(processor, frames, grid_thw):
    """The reference Qwen3-VL expansion (transformers 4.57 `Qwen3VLProcessor.__call__`): the template's
    `<|vision_start|><|video_pad|><|vision_end|>` becomes, per temporal patch group, `<t seconds>` (mean time of
    the group's frames, one decimal) + `<|vision_start|>` + one pad per merged patch + `<|vision_end|>`."""
    t, h, w = (int(x) for x in grid_thw)
    per_group = h * w // processor.video_processor.merge_size**2
    temporal = processor.video_processor.temporal_patch_size
    stamps = np.asarray(frames.timestamps, float)
    if len(stamps) % temporal:
        stamps = np.concatenate([stamps, np.repeat(stamps[-1:], temporal - len(stamps) % temporal)])
    groups = stamps.reshape(-1, temporal).mean(axis=1)
    assert len(groups) == t
    return "".join(
        f"<{g:.1f} seconds><|vision_start|>" + "<|video_pad|>" * per_group + "<|vision_end|>" for g in groups
    )


@pytest.mark.parametrize("n_frames", [4, 5])
def test_video_expands_exactly_like_the_reference_processor(tiny_model_dir, n_frames):
    processor = load_processor(str(tiny_model_dir))
    frames = _frames(n_frames)
    batch = encode(processor, build_messages("Q?", system="S", video=frames), video=frames)
    text = processor.tokenizer.decode(batch["input_ids"][0])
    expected = (
        "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\n"
        + _expected_video_text(processor, frames, batch["video_grid_thw"][0])
        + "Q?<|im_end|>\n<|im_start|>assistant\n"
    )
    assert text == expected
    starts = text.count("<|vision_start|>")
    assert starts == text.count("<|vision_end|>") == int(batch["video_grid_thw"][0][0])
    # every pad sits inside a group: nothing between </vision_end> and the next <t seconds> but the stamp
    assert re.fullmatch(r"(<[\d.]+ seconds><\|vision_start\|>(<\|video_pad\|>)+<\|vision_end\|>)+",
                        text[text.index("user\n") + 5 : text.index("Q?")])
    n_pads = int((batch["input_ids"][0] == processor.tokenizer.convert_tokens_to_ids("<|video_pad|>")).sum())
    assert n_pads * processor.video_processor.merge_size**2 == int(batch["video_grid_thw"][0].prod())


def test_training_renders_with_the_switched_template(tiny_model_dir):
    from cader.train.datamodule import SFTDataModule

    dm = SFTDataModule([], processor_path=str(tiny_model_dir))
    assert honours_thinking_switch(dm._load_processor())


def test_model_fingerprint_tells_the_export_from_its_base(tiny_model_dir, sft_export):
    from cader.evaluate.method.stage1_reuse import model_fingerprint

    base, exported = model_fingerprint(tiny_model_dir), model_fingerprint(sft_export)
    assert base == model_fingerprint(tiny_model_dir) and base != exported
    assert HFBackend(str(sft_export), dtype="float32").fingerprint() == exported
    assert model_fingerprint("Qwen/Qwen3-VL-8B-Instruct") == "hub:Qwen/Qwen3-VL-8B-Instruct"


def test_batched_letter_logits_and_yes_no_equal_unbatched(sft_export):
    """Left-padded batches of prompts with different videos and lengths give the one-at-a-time results (fp32)."""
    one = HFBackend(str(sft_export), dtype="float32", batch_size=1)
    many = HFBackend(str(sft_export), dtype="float32", batch_size=8)
    rng = np.random.default_rng(0)
    prompts = []
    for k, n in enumerate((2, 4, 6)):
        frames = Frames(rng.integers(0, 255, (n, 64, 32 * (k + 1), 3), dtype=np.uint8), np.arange(n) + 0.5,
                        np.arange(n), native_fps=1.0)
        prompts.append(Prompt("Which colour?" + " Really?" * k, system="S", video=frames))
    for a, b in zip(one.letter_logits(prompts, list("ABCD")), many.letter_logits(prompts, list("ABCD"))):
        assert a.prompt_tokens == b.prompt_tokens
        assert np.allclose(a.logits, b.logits, atol=1e-4), (a.logits, b.logits)
    for a, b in zip(one.yes_no(prompts), many.yes_no(prompts)):
        assert abs(a.p_yes - b.p_yes) < 1e-5 and abs(a.p_no - b.p_no) < 1e-5
