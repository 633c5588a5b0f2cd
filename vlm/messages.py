"""Qwen3-VL chat messages and the one processor call every stage uses.

`encode` is the only place the project turns (messages, frames, images) into model inputs. It always hands the
processor the decoded frames together with their real metadata (native fps and source frame indices) and
`do_sample_frames=False`: without the metadata the Qwen3-VL processor assumes 24 fps and writes wrong `<t seconds>`
tokens, and with its own sampling enabled it would re-sample frames we already chose. The vLLM backend, whose
engine runs the processor itself, takes its text from the same `prompt_text` and passes the same metadata and
settings, so both backends feed the model the same token ids.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from cader.vlm.chat_template import apply_template, render_prompt
from cader.vlm.video import Frames


def build_messages(
    user_text: str,
    system: str | None = None,
    video: Frames | None = None,
    images: Sequence = (),
    assistant_text: str | None = None,
) -> list[dict]:
    """System (optional), one user turn with visual parts before the text, and optionally the assistant target."""
    messages: list[dict] = []
    if system:
        messages.append({"role": "system", "content": [{"type": "text", "text": system}]})
    content: list[dict] = [{"type": "image"} for _ in images]
    if video is not None:
        content.append({"type": "video"})
    content.append({"type": "text", "text": user_text})
    messages.append({"role": "user", "content": content})
    if assistant_text is not None:
        messages.append({"role": "assistant", "content": [{"type": "text", "text": assistant_text}]})
    return messages


def render(
    processor,
    messages: list[dict],
    *,
    enable_thinking: bool = False,
    add_generation_prompt: bool = True,
    prefill_think: bool = False,
) -> str:
    """The chat-template text (with vision placeholders not yet expanded).

    `prefill_think`: the processor's template ignores `enable_thinking`, so a thinking-off generation prompt gets the
    empty think block appended here (`cader.vlm.chat_template.render_prompt`).
    """
    if add_generation_prompt:
        return render_prompt(processor, messages, enable_thinking=enable_thinking, prefill_think=prefill_think)
    return apply_template(processor, messages, add_generation_prompt=False, enable_thinking=enable_thinking)


VIDEO_PLACEHOLDER = "<|vision_start|><|video_pad|><|vision_end|>"
VIDEO_PAD = "<|video_pad|>"


def unwrap_video_placeholder(text: str) -> str:
    """Replace the template's `<|vision_start|><|video_pad|><|vision_end|>` by the bare `<|video_pad|>`.

    Qwen3-VL was trained with a video expanded to frame groups `<t seconds><|vision_start|>pads<|vision_end|>` and
    nothing around them: the reference processor (transformers 4.57, `Qwen3VLProcessor.__call__`) replaces the whole
    three-token placeholder with the groups. transformers 5.x replaces only the pad, so the template's outer
    start/end tokens would survive around the groups. Both versions expand a bare pad to exactly the groups, and so
    does vLLM (0.32 expands only `<|video_pad|>` and keeps whatever surrounds it): every backend sends the unwrapped
    text, through `prompt_text`. Images keep their `<|vision_start|><|image_pad|><|vision_end|>`: that is their
    trained layout, and every version expands only the pad.
    """
    return text.replace(VIDEO_PLACEHOLDER, VIDEO_PAD)


def prompt_text(
    processor,
    messages: list[dict],
    *,
    has_video: bool,
    enable_thinking: bool = False,
    add_generation_prompt: bool = True,
    prefill_think: bool = False,
) -> str:
    """The exact text every backend hands its processor: the rendered template, video placeholder unwrapped.

    The HF backend (`encode`) and the vLLM backend (`cader.evaluate.backends.vllm`) both take their text from here,
    so the prompt token ids they produce for the same `Prompt` are the same (tests/test_vllm_real.py checks it
    against the engine's own `RequestOutput.prompt_token_ids`).
    """
    text = render(
        processor,
        messages,
        enable_thinking=enable_thinking,
        add_generation_prompt=add_generation_prompt,
        prefill_think=prefill_think,
    )
    return unwrap_video_placeholder(text) if has_video else text


def _video_tensor(video: Frames) -> np.ndarray:
    # The Qwen3-VL video processor packs frames in temporal pairs; it pads an odd count by repeating the last frame.
    return np.ascontiguousarray(video.frames.transpose(0, 3, 1, 2))  # (T, C, H, W)


def encode(
    processor,
    messages: list[dict],
    *,
    video: Frames | None = None,
    images: Sequence = (),
    enable_thinking: bool = False,
    add_generation_prompt: bool = True,
    prefill_think: bool = False,
    text: str | None = None,
):
    """Chat template + processor -> BatchFeature (input_ids, attention_mask, pixel_values*, *_grid_thw), batch of 1.

    Frames and images arrive already sized to the pixel budget (multiples of 32 px, see `cader.vlm.sampling`), so the
    processor is told not to resize them again.
    """
    if text is None:
        text = prompt_text(
            processor,
            messages,
            has_video=video is not None,
            enable_thinking=enable_thinking,
            add_generation_prompt=add_generation_prompt,
            prefill_think=prefill_think,
        )
    elif video is not None:
        text = unwrap_video_placeholder(text)
    kwargs: dict = {"text": [text], "return_tensors": "pt"}
    if video is not None:
        if len(video) == 0:
            raise ValueError("cannot encode a video with no frames")
        kwargs["videos"] = [_video_tensor(video)]
        kwargs["videos_kwargs"] = {
            "video_metadata": [video.metadata()],
            "do_sample_frames": False,
            "do_resize": False,
        }
    if images:
        kwargs["images"] = list(images)
        kwargs["images_kwargs"] = {"do_resize": False}
    return processor(**kwargs)
