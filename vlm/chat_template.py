"""The Qwen3-VL chat template and the Qwen3 thinking switch.

`QWEN3_VL_CHAT_TEMPLATE` is the tiny model's template. It renders every conversation the toolkit builds (system,
user and assistant turns whose content is a string or a list of image/video/text parts) to the same text as the
released Qwen3-VL-*-Instruct template: `<|im_start|>{role}\n{content}<|im_end|>\n`, no default system turn, an image
part as `<|vision_start|><|image_pad|><|vision_end|>`, a video part as `<|vision_start|><|video_pad|><|vision_end|>`
(the processor expands each pad into one token per merged patch and writes the `<t seconds>` timestamps), and
`<|im_start|>assistant\n` as the generation prompt. Like the released Instruct template it *ignores*
`enable_thinking`, so the tiny model meets the same problem the real checkpoint does.

CADER needs the switch (paper App. C.1: Stage 1 and the verifier run with `enable_thinking=False`; proposals and the
final answer with thinking on), and a CoT-trained checkpoint opens every reply with `<think>`. Following the Qwen3
convention (and LLaMA-Factory's Qwen3-VL template, which the paper trained with), thinking off pre-fills an empty
think block after the generation prompt. Two ways in:
- training adds the switch to the base model's own template (`add_thinking_switch`) and the export saves that
  template, so every consumer of the exported folder (transformers, vLLM, our backends) sees it;
- evaluation checks whatever template it loaded (`honours_thinking_switch`) and, when the switch is missing,
  appends `THINK_PREFILL` to thinking-off prompts itself (`render_prompt`), recording that it did.
"""

from __future__ import annotations

THINK_PREFILL = "<think>\n\n</think>\n\n"
GENERATION_PROMPT = "<|im_start|>assistant\n"

QWEN3_VL_CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}"
    "{{ message['content'] }}"
    "{% else %}"
    "{% for part in message['content'] %}"
    "{% if part['type'] == 'image' or 'image' in part or 'image_url' in part %}"
    "<|vision_start|><|image_pad|><|vision_end|>"
    "{% elif part['type'] == 'video' or 'video' in part %}"
    "<|vision_start|><|video_pad|><|vision_end|>"
    "{% elif 'text' in part %}"
    "{{ part['text'] }}"
    "{% endif %}"
    "{% endfor %}"
    "{% endif %}"
    "<|im_end|>\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}"
    "<|im_start|>assistant\n"
    "{% endif %}"
)

# Appended to a template that lacks the switch. The Qwen3-VL template's last statement is the generation prompt, so
# text added after it lands right after `<|im_start|>assistant\n`, exactly where the Qwen3 templates put the block.
_SWITCH_SUFFIX = (
    "{%- if add_generation_prompt and enable_thinking is defined and enable_thinking is false %}"
    "{{- '<think>\\n\\n</think>\\n\\n' }}"
    "{%- endif %}"
)

_PROBE = [{"role": "user", "content": [{"type": "text", "text": "probe"}]}]


class ThinkingSwitchError(ValueError):
    """A chat template that cannot be given the thinking switch (its generation prompt is not where we expect)."""


def _render(template: str, enable_thinking: bool) -> str:
    from transformers.utils.chat_template_utils import render_jinja_template

    rendered, _ = render_jinja_template(
        conversations=[_PROBE], chat_template=template, add_generation_prompt=True, enable_thinking=enable_thinking
    )
    return rendered[0]


def template_of(processor_or_template) -> str:
    """The chat template string of a processor/tokenizer, or the string itself."""
    if isinstance(processor_or_template, str):
        return processor_or_template
    for owner in (processor_or_template, getattr(processor_or_template, "tokenizer", None)):
        template = getattr(owner, "chat_template", None)
        if isinstance(template, str) and template:
            return template
        if isinstance(template, dict) and template.get("default"):
            return template["default"]
    raise ThinkingSwitchError(f"{type(processor_or_template).__name__} has no chat template")


def honours_thinking_switch(processor_or_template) -> bool:
    """True when thinking off renders the thinking-on prompt followed by the empty think block (the Qwen3 switch)."""
    template = template_of(processor_or_template)
    on, off = _render(template, True), _render(template, False)
    return off == on + THINK_PREFILL


def add_thinking_switch(template: str) -> str:
    """The template with the Qwen3 thinking switch; unchanged when it already has it.

    Checked by rendering, not by reading the Jinja: the result must render the thinking-on prompt unchanged and
    the thinking-off prompt as that plus the empty think block, or ThinkingSwitchError is raised.
    """
    if honours_thinking_switch(template):
        return template
    on = _render(template, True)
    if not on.endswith(GENERATION_PROMPT):
        raise ThinkingSwitchError(f"the generation prompt does not end the rendered text: {on[-60:]!r}")
    switched = template + _SWITCH_SUFFIX
    if _render(switched, True) != on or not honours_thinking_switch(switched):
        raise ThinkingSwitchError("appending the thinking switch did not give the Qwen3 behaviour")
    return switched


def with_thinking_switch(processor):
    """Give a loaded processor (and its tokenizer) the switched template, in place; returns the processor."""
    switched = add_thinking_switch(template_of(processor))
    processor.chat_template = switched
    tokenizer = getattr(processor, "tokenizer", None)
    if tokenizer is not None:
        tokenizer.chat_template = switched
    return processor


def apply_template(processor, messages: list[dict], *, add_generation_prompt: bool, enable_thinking: bool) -> str:
    """`processor.apply_chat_template` as text. `enable_thinking` is passed only to a template that reads it:
    transformers warns about (and forwards to the processor) template kwargs that a template does not use."""
    extra = {"enable_thinking": enable_thinking} if "enable_thinking" in template_of(processor) else {}
    return processor.apply_chat_template(
        messages, tokenize=False, add_generation_prompt=add_generation_prompt, **extra
    )


def render_prompt(
    processor, messages: list[dict], *, enable_thinking: bool, prefill_think: bool = False
) -> str:
    """The chat-template text of a prompt that ends with an open assistant turn.

    `prefill_think`: the template ignores `enable_thinking` (see `honours_thinking_switch`), so a thinking-off prompt
    gets the empty think block appended here instead.
    """
    text = apply_template(processor, messages, add_generation_prompt=True, enable_thinking=enable_thinking)
    if prefill_think and not enable_thinking:
        if not text.endswith(GENERATION_PROMPT):
            raise ThinkingSwitchError(f"prompt does not end with the generation prompt: {text[-60:]!r}")
        text += THINK_PREFILL
    return text
