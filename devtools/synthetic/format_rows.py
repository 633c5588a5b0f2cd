"""One row of the synthetic training mix in each released format (the layouts ``train_mix``'s module doc describes),
with the tool-call marker family the row carries (``MixItem.tool_kind``)."""

from __future__ import annotations

import json
from typing import NamedTuple

from cader.dev.synthetic.media import LETTERS, VideoSpec

SYSTEM_TEXT = "You are a helpful assistant."
TOOLS_SPEC = {
    "type": "function",
    "function": {
        "name": "crop_video",
        "description": "Return the clip of the video between two times (seconds).",
        "parameters": {
            "type": "object",
            "properties": {"start_time": {"type": "number"}, "end_time": {"type": "number"}},
            "required": ["start_time", "end_time"],
        },
    },
}


def prompt_with_options(
    question: str, options: list[str], letters: str = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
) -> str:
    """The question, its option lines and the instruction to answer with a letter.

    question: the question text.
    options: the option texts.
    letters: the option letters, in order.
    """
    lines = "\n".join(f"{letters[i]}. {o}" for i, o in enumerate(options))
    return f"{question}\nOptions:\n{lines}\nAnswer with the option's letter from the given choices."


def tool_call_text(spec: VideoSpec) -> str:
    """An assistant turn that calls crop_video on the event's window.

    spec: the video whose event window is cropped.
    """
    call = {"name": "crop_video", "arguments": {"start_time": spec.t_s, "end_time": spec.t_e}}
    return f"<think>I need a closer look at the event.</think>\n<tool_call>\n{json.dumps(call)}\n</tool_call>"


def longvt_part(kind: str, value: str) -> dict:
    """One content part with every key present, the absent ones null.

    kind: text, image_url or video_url.
    value: the text, or the media path.
    """
    part = {"type": kind, "text": None, "image_url": None, "video_url": None}
    part["text" if kind == "text" else kind] = value if kind == "text" else {"url": value}
    return part


class MixItem(NamedTuple):
    """One CoT row to write: its format, its media (``spec`` None for an image) and its tool-marker kind."""

    fmt: str
    is_video: bool
    media: str
    spec: VideoSpec | None
    colour: str
    tool_kind: int | None   # None: a clean row; 0/1/2: which marker family the tool-call row carries


def text_part(text: str) -> dict:
    """A LongVT text part.

    text: its text.
    """
    return longvt_part("text", text)


def longvt_messages(
    media: str, is_video: bool, prompt: str, target: str, tool_kind: int | None, spec: VideoSpec | None
) -> list[dict]:
    """A LongVT-Parquet ``messages`` list: system, user (media then prompt), the tool turns, the target.

    media: the video or image, relative to the media root.
    is_video: whether `media` is a video.
    prompt: the user's question text.
    target: the final assistant text.
    tool_kind: None for a clean row, else the tool-marker family (0: tools declared, 1: a tool call, 2: tool turns).
    spec: the video the tool call crops (a tool row's).
    """
    media_part = longvt_part("video_url" if is_video else "image_url", media)
    system = SYSTEM_TEXT
    if tool_kind == 0:
        system += f"\n# Tools\n<tools>\n{json.dumps(TOOLS_SPEC)}\n</tools>"
    messages = [
        {"role": "system", "content": [text_part(system)]},
        {"role": "user", "content": [media_part, text_part(prompt)]},
    ]
    if tool_kind is not None:
        messages.append({"role": "assistant", "content": [text_part(tool_call_text(spec))]})
        if tool_kind != 1:  # kind 1 keeps only the <tool_call> marker
            messages.append(
                {
                    "role": "tool",
                    "content": [text_part("<tool_response>"), media_part, text_part("</tool_response>")],
                }
            )
    messages.append({"role": "assistant", "content": [text_part(target)]})
    return messages


def sharegpt_row(
    media: str, is_video: bool, prompt: str, target: str, tool_kind: int | None, spec: VideoSpec | None
) -> dict:
    """OpenAI-style sharegpt (role/content) with LLaMA-Factory's turn names; user/observation and
    assistant/function_call turns alternate as its converter requires.

    media: the video or image, relative to the media root.
    is_video: whether `media` is a video.
    prompt: the user's question text.
    target: the final assistant text.
    tool_kind: None for a clean row, else the tool-marker family (0: tools declared, 1: a tool call, 2: tool turns).
    spec: the video the tool call crops (a tool row's).
    """
    tag = "<video>" if is_video else "<image>"
    messages = [{"role": "user", "content": f"{tag}{prompt}"}]
    if tool_kind == 0:
        messages.insert(0, {"role": "system", "content": f"<tools>\n{json.dumps(TOOLS_SPEC)}\n</tools>"})
    elif tool_kind == 1:  # only the <tool_call> marker, in an earlier assistant turn
        messages += [{"role": "assistant", "content": tool_call_text(spec)}, {"role": "user", "content": "Go on."}]
    elif tool_kind == 2:  # tool roles
        call = {"name": "crop_video", "arguments": {"start_time": spec.t_s, "end_time": spec.t_e}}
        messages += [
            {"role": "function_call", "content": json.dumps(call)},
            {"role": "observation", "content": "The clip shows the event."},
        ]
    messages.append({"role": "assistant", "content": target})
    return {
        "messages": messages,
        "videos": [media] if is_video else [],
        "images": [] if is_video else [media],
    }


def conversations_row(
    media: str, is_video: bool, prompt: str, target: str, tool_kind: int | None, spec: VideoSpec | None
) -> dict:
    """LLaMA-Factory sharegpt in the from/value layout (human, gpt, function_call, observation), ``tools`` a JSON
    string.

    media: the video or image, relative to the media root.
    is_video: whether `media` is a video.
    prompt: the user's question text.
    target: the final assistant text.
    tool_kind: None for a clean row, else the tool-marker family (0: tools declared, 1: a tool call, 2: tool turns).
    spec: the video the tool call crops (a tool row's).
    """
    tag = "<video>" if is_video else "<image>"
    turns = [{"from": "human", "value": f"{tag}{prompt}"}]
    tools = ""   # LLaMA-Factory reads tools as a JSON string; "" and "[]" both declare none
    if tool_kind is not None:
        call = {"name": "crop_video", "arguments": {"start_time": spec.t_s, "end_time": spec.t_e}}
        turns += [
            {"from": "function_call", "value": json.dumps(call)},
            {"from": "observation", "value": "The clip shows the event."},
        ]
        tools = json.dumps([TOOLS_SPEC["function"]])
    turns.append({"from": "gpt", "value": target})
    return {
        "conversations": turns,
        "videos": [media] if is_video else [],
        "images": [] if is_video else [media],
        "tools": tools,
    }


def video_r1_row(index: int, item: MixItem, question: str, options: list[str], target: str, numerical: bool) -> dict:
    """A Video-R1-COT row: the colour question, or (`numerical`) how long the shape is visible.

    index: the row's problem_id.
    item: the row's media and tool kind.
    question: the colour question.
    options: the option texts.
    target: the CoT target, split into ``process`` and ``solution``.
    numerical: ask the numerical question instead (a clean video row).
    """
    spec, tool_kind = item.spec, item.tool_kind
    if numerical:
        seconds = int(spec.t_e - spec.t_s)
        problem, opts, solution = (
            "For how many seconds is the coloured shape visible?", [], f"<answer>{seconds}</answer>"
        )
        process = (
            f"<think>The shape appears at {spec.t_s:.0f}s and disappears at {spec.t_e:.0f}s, "
            f"so it is visible for {seconds} seconds.</think>"
        )
    else:
        problem, opts = question, [f"{LETTERS[i]}. {o}" for i, o in enumerate(options)]
        think, answer = target.split("<answer>")
        process, solution = think, f"<answer>{answer}"
    if tool_kind is not None:
        marker = (tool_call_text(spec) if tool_kind != 2
                  else "<think>Checking.</think><tool_response>clip</tool_response>")
        process = marker + process
    return {
        "problem_id": index,
        "problem": problem,
        "data_type": "video" if item.is_video else "image",
        "problem_type": "numerical" if numerical else "multiple choice",
        "options": opts,
        "process": process,
        "solution": solution,
        "path": f"./{item.media}",
        "data_source": "synthetic_colour",
    }


def longvideo_reason_row(
    index: int, item: MixItem, question: str, options: list[str], letter: str, target: str
) -> dict:
    """A LongVideo-Reason row: options inside ``problem``, the CoT's thinking as plain ``reasoning``.

    index: the row's problem_id.
    item: the row's media and tool kind.
    question: the colour question.
    options: the option texts.
    letter: the correct option's letter.
    target: the CoT target whose think block becomes ``reasoning``.
    """
    reasoning = target.split("</think>")[0].removeprefix("<think>")
    if item.tool_kind is not None:
        marker = (tool_call_text(item.spec) if item.tool_kind != 2
                  else "<tool_response>The clip shows the event.</tool_response>")
        reasoning = marker + "\n" + reasoning
    lines = "\n".join(f"{LETTERS[i]}. {o}" for i, o in enumerate(options))
    return {
        "problem_id": index,
        "problem": f"{question}\n{lines}",
        "data_type": "video",
        "problem_type": "temporal",
        "reasoning": reasoning,
        "videos": item.media,
        "answer": f"<answer>{letter}</answer>",
    }
