"""One row of the synthetic training mix in each released format (the layouts ``train_mix``'s module doc describes),
with the tool-call marker family the row carries (``MixItem.tool_kind``).

The three chat layouts (``longvt_messages``, ``sharegpt_row``, ``conversations_row``) take the same arguments:
``media`` (the video or image, relative to the media root), ``is_video``, ``prompt`` (the user's question text),
``target`` (the final assistant text), ``tool_kind`` (None for a clean row, else the tool-marker family: 0 tools
declared, 1 a tool call, 2 tool turns) and ``spec`` (the video a tool row's call crops).
"""

from __future__ import annotations

import json
from typing import NamedTuple

from cader.dev.synthetic.media import LETTERS, VideoSpec

SYSTEM_TEXT = "You are a helpful assistant."
TOOLS_SPEC = {"type": "function", "function": {
    "name": "crop_video", "description": "Return the clip of the video between two times (seconds).",
    "parameters": {"type": "object", "properties": {"start_time": {"type": "number"}, "end_time": {"type": "number"}},
                   "required": ["start_time", "end_time"]}}}


def prompt_with_options(question: str, options: list[str], letters: str = LETTERS) -> str:
    """The question, its option lines and the instruction to answer with a letter."""
    lines = "\n".join(f"{letters[i]}. {o}" for i, o in enumerate(options))
    return f"{question}\nOptions:\n{lines}\nAnswer with the option's letter from the given choices."


def crop_call(spec: VideoSpec) -> str:
    """The crop_video call on the event's window, as JSON."""
    return json.dumps({"name": "crop_video", "arguments": {"start_time": spec.t_s, "end_time": spec.t_e}})


def tool_call_text(spec: VideoSpec) -> str:
    """An assistant turn that calls crop_video on the event's window."""
    return f"<think>I need a closer look at the event.</think>\n<tool_call>\n{crop_call(spec)}\n</tool_call>"


def longvt_part(kind: str, value: str) -> dict:
    """One content part (kind: text, image_url or video_url) with every key present, the absent ones null."""
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
    return longvt_part("text", text)


def longvt_messages(media: str, is_video: bool, prompt: str, target: str, tool_kind: int | None,
                    spec: VideoSpec | None) -> list[dict]:
    """A LongVT-Parquet ``messages`` list: system, user (media then prompt), the tool turns, the target."""
    media_part = longvt_part("video_url" if is_video else "image_url", media)
    system = SYSTEM_TEXT
    if tool_kind == 0:
        system += f"\n# Tools\n<tools>\n{json.dumps(TOOLS_SPEC)}\n</tools>"
    messages = [{"role": "system", "content": [text_part(system)]},
                {"role": "user", "content": [media_part, text_part(prompt)]}]
    if tool_kind is not None:
        messages.append({"role": "assistant", "content": [text_part(tool_call_text(spec))]})
        if tool_kind != 1:  # kind 1 keeps only the <tool_call> marker
            messages.append({"role": "tool", "content": [text_part("<tool_response>"), media_part,
                                                         text_part("</tool_response>")]})
    messages.append({"role": "assistant", "content": [text_part(target)]})
    return messages


def _media_lists(media: str, is_video: bool) -> dict:
    return {"videos": [media] if is_video else [], "images": [] if is_video else [media]}


def sharegpt_row(media: str, is_video: bool, prompt: str, target: str, tool_kind: int | None,
                 spec: VideoSpec | None) -> dict:
    """OpenAI-style sharegpt (role/content) with LLaMA-Factory's turn names; user/observation and
    assistant/function_call turns alternate as its converter requires."""
    messages = [{"role": "user", "content": f"{'<video>' if is_video else '<image>'}{prompt}"}]
    if tool_kind == 0:
        messages.insert(0, {"role": "system", "content": f"<tools>\n{json.dumps(TOOLS_SPEC)}\n</tools>"})
    elif tool_kind == 1:  # only the <tool_call> marker, in an earlier assistant turn
        messages += [{"role": "assistant", "content": tool_call_text(spec)}, {"role": "user", "content": "Go on."}]
    elif tool_kind == 2:  # tool roles
        messages += [{"role": "function_call", "content": crop_call(spec)},
                     {"role": "observation", "content": "The clip shows the event."}]
    messages.append({"role": "assistant", "content": target})
    return {"messages": messages, **_media_lists(media, is_video)}


def conversations_row(media: str, is_video: bool, prompt: str, target: str, tool_kind: int | None,
                      spec: VideoSpec | None) -> dict:
    """LLaMA-Factory sharegpt in the from/value layout (human, gpt, function_call, observation), ``tools`` a JSON
    string."""
    turns = [{"from": "human", "value": f"{'<video>' if is_video else '<image>'}{prompt}"}]
    tools = ""   # LLaMA-Factory reads tools as a JSON string; "" and "[]" both declare none
    if tool_kind is not None:
        turns += [{"from": "function_call", "value": crop_call(spec)},
                  {"from": "observation", "value": "The clip shows the event."}]
        tools = json.dumps([TOOLS_SPEC["function"]])
    turns.append({"from": "gpt", "value": target})
    return {"conversations": turns, **_media_lists(media, is_video), "tools": tools}


def video_r1_row(index: int, item: MixItem, question: str, options: list[str], target: str, numerical: bool) -> dict:
    """A Video-R1-COT row (problem_id `index`): the colour question, its CoT `target` split into ``process`` and
    ``solution``, or (`numerical`, a clean video row) how long the shape is visible."""
    spec, tool_kind = item.spec, item.tool_kind
    if numerical:
        seconds = int(spec.t_e - spec.t_s)
        problem, opts = "For how many seconds is the coloured shape visible?", []
        solution = f"<answer>{seconds}</answer>"
        process = (f"<think>The shape appears at {spec.t_s:.0f}s and disappears at {spec.t_e:.0f}s, "
                   f"so it is visible for {seconds} seconds.</think>")
    else:
        problem, opts = question, [f"{LETTERS[i]}. {o}" for i, o in enumerate(options)]
        process, answer = target.split("<answer>")
        solution = f"<answer>{answer}"
    if tool_kind is not None:
        process = (tool_call_text(spec) if tool_kind != 2
                   else "<think>Checking.</think><tool_response>clip</tool_response>") + process
    return {"problem_id": index, "problem": problem, "data_type": "video" if item.is_video else "image",
            "problem_type": "numerical" if numerical else "multiple choice", "options": opts, "process": process,
            "solution": solution, "path": f"./{item.media}", "data_source": "synthetic_colour"}


def longvideo_reason_row(index: int, item: MixItem, question: str, options: list[str], letter: str,
                         target: str) -> dict:
    """A LongVideo-Reason row (problem_id `index`): options inside ``problem``, the think block of the CoT `target`
    as plain ``reasoning``."""
    reasoning = target.split("</think>")[0].removeprefix("<think>")
    if item.tool_kind is not None:
        marker = (tool_call_text(item.spec) if item.tool_kind != 2
                  else "<tool_response>The clip shows the event.</tool_response>")
        reasoning = marker + "\n" + reasoning
    lines = "\n".join(f"{LETTERS[i]}. {o}" for i, o in enumerate(options))
    return {"problem_id": index, "problem": f"{question}\n{lines}", "data_type": "video", "problem_type": "temporal",
            "reasoning": reasoning, "videos": item.media, "answer": f"<answer>{letter}</answer>"}
