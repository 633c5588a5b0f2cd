"""Readers for the released SFT formats -> one common `Sample` (chat turns with ordered media parts).

Each reader follows the official loader of its release (tests/fixtures/<format>/PROVENANCE.md names file and commit):

- ``longvt``        LongVT-Parquet (`longvt_sft_*.parquet`), read as lmms-engine's vision iterable dataset reads it:
                    column ``messages`` = list of ``{"role", "content": [part, ...]}``; a part's ``type`` decides
                    what it is: ``"image_url"`` -> ``part["image_url"]["url"]``, ``"video_url"`` ->
                    ``part["video_url"]["url"]``, anything else is text ``part["text"]``. The files are written by HF
                    `datasets`, so every part carries every key (absent ones null). Media are relative to the
                    LongVT-Source download (lmms-engine joins them to the dataset's ``data_folder``).
                    Also accepted (not in the release): content as a plain string, ``messages`` as a JSON string.
- ``video_r1``      Video-R1 JSON list (`Video-R1-COT-165k.json`): ``problem``, ``problem_type``, ``options``,
                    ``process``, ``solution``, ``path`` ("./<folder>/..."), ``data_type``. As Video-R1's SFT script:
                    question = problem + "Options:\\n" + one line per option (multiple choice only), target =
                    process + "\\n" + solution, media = path without its leading "." under the data root.
- ``longvideo_reason`` LongVideo-Reason JSONL: ``problem`` (options inside), ``reasoning`` (plain text), ``videos``
                    (one path under the video folder), ``answer`` (``<answer>X</answer>``); target =
                    ``<think>reasoning</think>`` + answer. Chat-style rows (``messages``/``conversations``) are read
                    as the chat formats.
- ``sharegpt``      LLaMA-Factory sharegpt JSON/JSONL (its data/README and converter): ``conversations``
                    (``from``/``value``: human, gpt, function_call, observation, system) or ``messages``
                    (``role``/``content``), ``<image>``/``<video>`` placeholders matched in order by ``images``/
                    ``videos``, optional ``system`` and ``tools`` (a JSON string; ``""`` or ``"[]"`` = no tools).
                    As the converter: a leading system turn becomes the system prompt, user/observation turns sit
                    at even positions and assistant/function_call turns at odd ones, and the turn count is even.
                    Rows with audio (``audios`` or ``<audio>``) are skipped with their own count.

A malformed row never raises out of a reader: it comes back as a `FormatError` naming file, row and a `kind`
(the counter it goes to), so the caller can count it (bad input is never dropped silently).
"""
from __future__ import annotations

import json
import os
import posixpath
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cader.train.dataset_info import SharegptAttr, aligned_turns

# sharegpt speaker names -> chat roles. function_call/observation are tool traffic and map to "tool" so the
# tool-free filter sees them.
_SHAREGPT_ROLES = {"human": "user", "user": "user", "gpt": "assistant", "assistant": "assistant",
                   "system": "system", "function_call": "tool", "observation": "tool", "tool": "tool",
                   "function": "tool"}
# LLaMA-Factory's converter: even positions (0, 2, ...) hold user/observation, odd ones assistant/function_call
_SHAREGPT_EVEN = {"human", "user", "observation", "tool"}
_SHAREGPT_ODD = {"gpt", "assistant", "function_call", "function"}
_PLACEHOLDER = re.compile(r"(<video>|<image>)")
# Video-R1's SFT script has one answer instruction per problem_type; a type outside these fails its lookup
VIDEO_R1_PROBLEM_TYPES = ("multiple choice", "numerical", "OCR", "free-form", "regression")
_ANSWER_HINT = {   # our wording of what the <answer> tag holds, per Video-R1 problem type
    "multiple choice": "the option's letter",
    "numerical": "the number",
    "OCR": "the transcribed text",
    "free-form": "a short text answer",
    "regression": "the number",
}


@dataclass
class Turn:
    role: str                       # system | user | assistant | tool
    parts: list[dict]               # ordered: {"type": "text", "text": s} | {"type": "video"|"image", "path": p}

    @property
    def text(self) -> str:
        return "".join(p["text"] for p in self.parts if p["type"] == "text")

    @property
    def media(self) -> list[dict]:
        return [p for p in self.parts if p["type"] in ("video", "image")]


@dataclass
class Sample:
    source: str                     # name of the mix source it came from
    sample_id: str                  # stable id: "<source>:<row>" unless the row carries its own id
    turns: list[Turn]
    meta: dict = field(default_factory=dict)   # e.g. {"tools": [...]} from sharegpt, problem_type, ...

    @property
    def media(self) -> list[dict]:
        return [m for t in self.turns for m in t.media]


class FormatError(ValueError):
    """A row that cannot be turned into a Sample; the message names file and row.

    `kind` is the counter the row goes to: "format" (schema), "audio" (audio input, not trained),
    "media_outside_root" (a media path that is absolute, a URL, or climbs out of the media root).
    """

    def __init__(self, file: str | Path, row: int, reason: str, kind: str = "format"):
        super().__init__(f"{file} row {row}: {reason}")
        self.file, self.row, self.reason, self.kind = str(file), row, reason, kind


class _AudioRow(ValueError):
    """A row with audio input: skipped and counted apart from schema errors."""


FORMATS = ("longvt", "video_r1", "longvideo_reason", "sharegpt")


def read_source(fmt: str, path: str | Path, source: str | None = None) -> Iterator[Sample | FormatError]:
    """Yield a Sample or a FormatError for every row of ``path`` in format ``fmt``."""
    if fmt not in FORMATS:
        raise ValueError(f"unknown format {fmt!r}; expected one of {FORMATS}")
    path = Path(path)
    source = source or fmt
    for i, row in enumerate(_read_rows(path)):
        yield parse_row(fmt, row, i, source, path)


def parse_row(fmt: str, row: Any, index: int, source: str, path: str | Path,
              attr: SharegptAttr | None = None) -> Sample | FormatError:
    """One row of a file in format ``fmt`` as a Sample, or the FormatError naming file, row and reason. `attr`:
    the columns and tags of a sharegpt file's LLaMA-Factory dataset_info entry (cader.train.dataset_info)."""
    try:
        if not isinstance(row, dict):
            raise TypeError(f"expected an object, got {type(row).__name__}")
        if attr is not None and fmt == "sharegpt":
            sample = _from_sharegpt_attr(row, source, index, attr)
        else:
            sample = _CONVERTERS[fmt](row, source, index)
        _check_sample(sample)
        return sample
    except _AudioRow as err:
        return FormatError(path, index, str(err), kind="audio")
    except (ValueError, KeyError, TypeError, AttributeError) as err:   # json errors are ValueError
        return FormatError(path, index, f"{type(err).__name__}: {err}")


def _read_rows(path: Path) -> list[Any]:
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq
        return pq.read_table(path).to_pylist()   # the rows HF datasets' Dataset.from_parquet yields
    if path.suffix == ".jsonl":
        return [decode_row_text(line) for line in _jsonl_lines(path)]
    return _json_list(path)


def row_texts(path: str | Path) -> Iterator[str]:
    """The JSON text of every row of a JSON list or JSONL file, in order: a JSONL line as written, a JSON list's
    elements re-serialised one by one. Raises for a file that is not a list of rows."""
    path = Path(path)
    if path.suffix == ".jsonl":
        yield from _jsonl_lines(path)
    else:
        yield from (json.dumps(row, ensure_ascii=False) for row in _json_list(path))


def _jsonl_lines(path: Path) -> Iterator[str]:
    # rows are separated by newlines only (a U+2028 inside a JSON string is no row break); blank lines are no rows
    with open(path, encoding="utf-8") as handle:
        yield from (line for line in handle if line.strip())


def _json_list(path: Path) -> list[Any]:
    data = json.loads(path.read_text(encoding="utf-8"))
    if isinstance(data, dict) and "data" in data:
        data = data["data"]
    if not isinstance(data, list):
        raise TypeError(f"{path}: expected a JSON list of rows")
    return data


def decode_row_text(text: str) -> Any:
    """A row's JSON text as the row; a line that is not JSON stays a string, which `parse_row` counts as a
    malformed row (the file keeps its row count)."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def sample_to_json(sample: Sample) -> str:
    """The Sample as one JSON text (stored per row in the mix's Arrow tables; `sample_from_json` inverts it)."""
    turns = [{"role": t.role, "parts": t.parts} for t in sample.turns]
    return json.dumps({"source": sample.source, "sample_id": sample.sample_id, "turns": turns, "meta": sample.meta},
                      ensure_ascii=False, default=str)


def sample_from_json(text: str) -> Sample:
    data = json.loads(text)
    return Sample(data["source"], data["sample_id"], [Turn(t["role"], t["parts"]) for t in data["turns"]],
                  data["meta"])


def _check_sample(sample: Sample) -> None:
    roles = [t.role for t in sample.turns]
    if "assistant" not in roles:
        raise ValueError("no assistant turn")
    for t in sample.turns:
        if t.role not in ("system", "user", "assistant", "tool"):
            raise ValueError(f"unknown role {t.role!r}")
        if t.role == "assistant" and not t.text.strip():
            raise ValueError("empty assistant turn")


def _row_id(row: dict, source: str, index: int) -> str:
    for key in ("id", "sample_id", "problem_id", "question_id", "uid"):
        if row.get(key) is not None:
            return f"{source}:{row[key]}"
    return f"{source}:{index}"


# ---- media paths ----

class MediaPathError(ValueError):
    """A media path that does not stay inside its media root."""


def confined_media_path(path: str) -> str:
    """``path`` normalised relative to its media root; raises MediaPathError when it would leave the root.

    Lexical (no symlink resolution), so a media folder that is a symlink into another disk stays usable, while an
    absolute path, a URL or a path climbing out with ``..`` is refused whatever exists on this machine.
    """
    if not isinstance(path, str) or not path.strip():
        raise MediaPathError(f"empty media path {path!r}")
    if re.match(r"^[A-Za-z][A-Za-z0-9+.-]*://", path):
        raise MediaPathError(f"media path {path!r} is a URL, not a file under the media root")
    unixy = path.replace("\\", "/")
    if unixy.startswith(("/", "~")) or re.match(r"^[A-Za-z]:/", unixy) or os.path.isabs(path):
        raise MediaPathError(f"media path {path!r} is absolute; rows must name media relative to the media root")
    norm = posixpath.normpath(unixy)
    if norm == ".." or norm.startswith("../"):
        raise MediaPathError(f"media path {path!r} climbs out of the media root")
    return norm


def confine_sample(sample: Sample) -> None:
    """Rewrite every media path of ``sample`` to its normalised form; raises MediaPathError for one that leaves
    the media root."""
    for turn in sample.turns:
        for part in turn.media:
            part["path"] = confined_media_path(part["path"])


# ---- OpenAI-style messages (LongVT parquet, and chat-style rows of the other formats) ----

def _media_url(part: dict, key: str) -> str:
    value = part.get(key)
    if isinstance(value, dict):
        value = value.get("url") or value.get("path")
    if not isinstance(value, str) or not value:
        raise ValueError(f"{key} part without a url: {part}")
    return value.removeprefix("file://")


def _openai_parts(content: Any) -> list[dict]:
    if content is None:
        return []
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    if not isinstance(content, list):
        raise TypeError(f"message content must be a string or a list of parts, got {type(content).__name__}")
    parts = []
    for part in content:
        if isinstance(part, str):
            parts.append({"type": "text", "text": part})
            continue
        if not isinstance(part, dict):
            raise TypeError(f"content part must be an object, got {type(part).__name__}")
        kind = part.get("type")
        # the type field decides (lmms-engine's convert_open_to_hf); the other keys of a part are null
        if kind in ("image_url", "image"):
            parts.append({"type": "image", "path": _media_url(part, kind if part.get(kind) is not None else "image_url")})
        elif kind in ("video_url", "video"):
            parts.append({"type": "video", "path": _media_url(part, kind if part.get(kind) is not None else "video_url")})
        elif kind in ("audio_url", "audio", "input_audio"):
            raise _AudioRow(f"audio part ({kind}): audio input is not trained")
        elif kind == "text" or isinstance(part.get("text"), str):
            # lmms-engine reads every other part as text; one without a string text has nothing to read
            text = part.get("text")
            if text is not None and not isinstance(text, str):
                raise TypeError(f"text part with a {type(text).__name__} text")
            parts.append({"type": "text", "text": text or ""})
        else:
            raise ValueError(f"unknown content part type {kind!r} without a text")
    return parts


def _from_openai_messages(messages: Any) -> list[Turn]:
    if isinstance(messages, str):
        messages = json.loads(messages)
    if not isinstance(messages, list) or not messages:
        raise ValueError("messages must be a non-empty list")
    turns = []
    for m in messages:
        if isinstance(m, str):
            m = json.loads(m)
        role = m.get("role")
        parts = _openai_parts(m.get("content"))
        if m.get("tool_calls"):
            role = "tool"        # an assistant turn that calls tools is tool traffic for the filter
        turns.append(Turn(role=role, parts=parts))
    return turns


def _from_openai_row(row: dict, source: str, index: int) -> Sample:
    if "messages" not in row:
        raise KeyError(f"missing 'messages' column (row keys: {sorted(row)})")
    return Sample(source, _row_id(row, source, index), _from_openai_messages(row["messages"]))


# ---- Video-R1 ----

def video_r1_question(problem: str, problem_type: str, options: Any) -> str:
    """The question as Video-R1's SFT script builds it: for multiple choice, the problem then "Options:" and one
    line per option, each ending in a newline; otherwise the problem alone."""
    if problem_type != "multiple choice":
        return problem
    if not isinstance(options, list) or not options or not all(isinstance(o, str) for o in options):
        raise ValueError(f"multiple-choice row needs a non-empty list of option strings, got {options!r}")
    return problem + "Options:\n" + "".join(o + "\n" for o in options)


def video_r1_prompt(problem: str, problem_type: str, options: Any) -> str:
    # The answer instruction is ours (the target teaches <think>…</think><answer>…</answer>, supplementary A)
    return (video_r1_question(problem, problem_type, options)
            + "\nThink step by step inside <think></think>, then give "
            + f"{_ANSWER_HINT[problem_type]} inside <answer></answer>.")


def _from_video_r1(row: dict, source: str, index: int) -> Sample:
    missing = [k for k in ("problem", "problem_type", "process", "solution", "path", "data_type") if k not in row]
    if missing:
        raise KeyError(f"missing Video-R1 fields {missing} (row keys: {sorted(row)})")
    data_type, problem_type = row["data_type"], row["problem_type"]
    if data_type not in ("video", "image"):
        raise ValueError(f"unknown data_type {data_type!r}")
    if problem_type not in VIDEO_R1_PROBLEM_TYPES:
        raise ValueError(f"unknown problem_type {problem_type!r}; Video-R1 has {VIDEO_R1_PROBLEM_TYPES}")
    for key in ("problem", "process", "solution", "path"):
        if not isinstance(row[key], str) or not row[key].strip():
            raise ValueError(f"empty or non-string {key!r}")
    path = row["path"]
    # Video-R1 joins path[1:] ("./X/y.mp4" -> "/X/y.mp4") to its data folder: the path is relative to that folder
    media = path.removeprefix("./")
    parts = [{"type": data_type, "path": media},
             {"type": "text", "text": video_r1_prompt(row["problem"], problem_type, row.get("options"))}]
    target = row["process"] + "\n" + row["solution"]
    meta = {"problem_type": problem_type, "data_source": row.get("data_source")}
    return Sample(source, _row_id(row, source, index),
                  [Turn("user", parts), Turn("assistant", [{"type": "text", "text": target}])], meta)


# ---- LongVideo-Reason ----

def _from_longvideo_reason(row: dict, source: str, index: int) -> Sample:
    if "messages" in row:
        return _from_openai_row(row, source, index)
    if "conversations" in row:
        return _from_sharegpt(row, source, index)
    video = row.get("videos", row.get("video"))
    if isinstance(video, list):
        if len(video) != 1:
            raise ValueError(f"expected one video, got {len(video)}")
        video = video[0]
    question = row.get("problem", row.get("question"))
    reasoning = row.get("reasoning")
    answer = row.get("answer")
    missing = [k for k, v in (("videos", video), ("problem", question), ("answer", answer)) if v is None]
    if missing:
        raise KeyError(f"missing LongVideo-Reason fields {missing} (row keys: {sorted(row)})")
    for key, value in (("videos", video), ("problem", question), ("answer", answer)):
        if not isinstance(value, str) or not value.strip():
            raise ValueError(f"empty or non-string {key!r}")
    if reasoning is not None and not isinstance(reasoning, str):
        raise ValueError("non-string 'reasoning'")
    answer = answer.strip()
    if not answer.startswith("<answer>"):
        answer = f"<answer>{answer}</answer>"
    think = (reasoning or "").strip()
    if think and not think.startswith("<think>"):
        think = f"<think>{think}</think>"
    # the options are part of `problem` in this release; the answer instruction is ours
    prompt = question + "\nThink step by step inside <think></think>, then give the option's letter inside " \
                        "<answer></answer>."
    parts = [{"type": "video", "path": video}, {"type": "text", "text": prompt}]
    meta = {"problem_type": row.get("problem_type")}
    return Sample(source, _row_id(row, source, index),
                  [Turn("user", parts), Turn("assistant", [{"type": "text", "text": think + answer}])], meta)


# ---- LLaMA-Factory sharegpt ----

def declared_tools(tools: Any) -> list:
    """The tools a sharegpt row declares: its ``tools`` column is a JSON string (LLaMA-Factory's ToolFormatter
    json-loads it and treats an empty list as none), so ``""``, ``"[]"``, ``[]`` and null declare no tools."""
    if tools is None:
        return []
    if isinstance(tools, str):
        if not tools.strip():
            return []
        try:
            tools = json.loads(tools)
        except json.JSONDecodeError as err:
            raise ValueError(f"'tools' is not valid JSON: {err}") from None
    if isinstance(tools, dict):
        tools = [tools]
    if not isinstance(tools, list):
        raise TypeError(f"'tools' must be a JSON list, got {type(tools).__name__}")
    return tools


def _split_placeholders(text: str, queues: dict[str, list[str]]) -> list[dict]:
    parts = []
    for piece in _PLACEHOLDER.split(text):
        if piece in ("<video>", "<image>"):
            kind = piece[1:-1]
            if not queues[kind]:
                raise ValueError(f"more {piece} placeholders than entries in '{kind}s'")
            parts.append({"type": kind, "path": queues[kind].pop(0)})
        elif piece:
            parts.append({"type": "text", "text": piece})
    return parts


def _media_list(row: dict, key: str) -> list:
    return _paths(row.get(key), key)


def _from_sharegpt(row: dict, source: str, index: int) -> Sample:
    convo = row.get("conversations", row.get("messages"))
    if convo is None:
        raise KeyError(f"missing 'conversations'/'messages' (row keys: {sorted(row)})")
    if isinstance(convo, str):
        convo = json.loads(convo)
    if not isinstance(convo, list):
        raise TypeError("'conversations' must be a list")
    if row.get("audios") or "<audio>" in json.dumps(convo):
        raise _AudioRow("row has audio input (audios / <audio>), which is not trained")
    queues = {"video": _media_list(row, "videos"), "image": _media_list(row, "images")}
    speakers = [m.get("from", m.get("role")) for m in convo]
    values = [m.get("value", m.get("content")) for m in convo]
    system = row.get("system") or ""
    if speakers and speakers[0] == "system":      # a leading system turn overrides the system column
        system, speakers, values = values[0], speakers[1:], values[1:]
    turns = [Turn("system", [{"type": "text", "text": system}])] if system else []
    for pos, (speaker, value) in enumerate(zip(speakers, values)):
        if speaker not in _SHAREGPT_ROLES:
            raise ValueError(f"unknown speaker {speaker!r}")
        allowed = _SHAREGPT_EVEN if pos % 2 == 0 else _SHAREGPT_ODD
        if speaker not in allowed:
            raise ValueError(f"turn {pos} is {speaker!r}: user/observation turns must alternate with "
                             "assistant/function_call turns, starting with the user")
        if not isinstance(value, str):
            raise TypeError(f"turn value must be a string, got {type(value).__name__}")
        turns.append(Turn(_SHAREGPT_ROLES[speaker], _split_placeholders(value, queues)))
    if len(speakers) % 2:
        raise ValueError(f"{len(speakers)} turns: a conversation ends with an assistant turn (even turn count)")
    left = {k: len(v) for k, v in queues.items() if v}
    if left:
        raise ValueError(f"media without placeholders: {left}")
    tools = declared_tools(row.get("tools"))
    meta = {"tools": tools} if tools else {}
    return Sample(source, _row_id(row, source, index), turns, meta)


def _paths(value: Any, column: str) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ValueError(f"'{column}' must be a list of paths")
    return list(value)


def _from_sharegpt_attr(row: dict, source: str, index: int, attr: SharegptAttr) -> Sample:
    """A sharegpt row read with the columns and tags of its dataset_info entry (LLaMA-Factory's converter)."""
    system, turns, tools, images, videos, audios = aligned_turns(row, attr)
    if audios or any("<audio>" in str(content) for _, content in turns):
        raise _AudioRow("row has audio input (audios / <audio>), which is not trained")
    queues = {"video": _paths(videos, str(attr.videos)), "image": _paths(images, str(attr.images))}
    out = [Turn("system", [{"type": "text", "text": system}])] if system else []
    for role, content in turns:
        if not isinstance(content, str):
            raise TypeError(f"turn content must be a string, got {type(content).__name__}")
        out.append(Turn("tool" if role in ("observation", "function") else role,
                        _split_placeholders(content, queues)))
    left = {k: len(v) for k, v in queues.items() if v}
    if left:
        raise ValueError(f"media without placeholders: {left}")
    declared = declared_tools(tools)
    return Sample(source, _row_id(row, source, index), out, {"tools": declared} if declared else {})


_CONVERTERS = {"longvt": _from_openai_row, "video_r1": _from_video_r1, "longvideo_reason": _from_longvideo_reason,
               "sharegpt": _from_sharegpt}
