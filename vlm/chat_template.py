"""The Qwen3-VL chat template, with the Qwen3 thinking switch.

Layout follows the released Qwen3-VL-Instruct template: `<|im_start|>{role}\n{content}<|im_end|>\n`, an image part
renders as `<|vision_start|><|image_pad|><|vision_end|>` and a video part as `<|vision_start|><|video_pad|><|vision_end|>`
(the processor expands each pad into one token per merged patch and writes the `<t seconds>` timestamps).

The thinking switch follows the Qwen3 convention, because CADER turns chain-of-thought off in Stage 1 and on in
Stage 2 (paper, App. C): `enable_thinking=False` pre-fills an empty `<think>\n\n</think>\n\n` block so the model
answers directly; `enable_thinking=True` (the default) leaves the assistant turn open so a CoT-trained model writes
its own `<think>...</think>`. Released Instruct templates ignore the flag, in which case the model answers directly
anyway; that is the behaviour Stage 1 wants.
"""

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
    "{% elif part['type'] == 'text' %}"
    "{{ part['text'] }}"
    "{% endif %}"
    "{% endfor %}"
    "{% endif %}"
    "<|im_end|>\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}"
    "<|im_start|>assistant\n"
    "{% if enable_thinking is defined and enable_thinking is false %}"
    "<think>\n\n</think>\n\n"
    "{% endif %}"
    "{% endif %}"
)
