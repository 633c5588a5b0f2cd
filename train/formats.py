"""Readers for the released SFT formats -> one common `Sample` (chat turns with ordered media parts).

Formats (LongVT SFT data and its sources, paper supplementary A "Training Data"):
- ``longvt``        parquet with a ``messages`` column: OpenAI-style turns whose content is a string or a list of
                    parts ``{"type": "text"|"image_url"|"video_url"|"image"|"video", ...}``; the whole column value
                    may also be a JSON string.
- ``video_r1``      Video-R1 JSON list: ``problem``, ``problem_type``, ``options``, ``process``, ``solution``, ``path``,
                    ``data_type``; prompt = problem + options, target = process + solution.
- ``longvideo_reason`` JSONL; rows either carry ``messages``/``conversations`` (handled like the chat formats) or
                    the flat fields ``video``/``videos``/``path``, ``question``/``problem``, ``options``, ``reasoning``, ``answer``.
- ``sharegpt``      LLaMA-Factory sharegpt JSON/JSONL: ``conversations`` (``from``/``value``) or ``messages``
                    (``role``/``content``) with ``<video>``/``<image>`` placeholders, plus ``videos``/``images`` lists,
                    optional ``system`` and ``tools``.

A malformed row never raises out of a reader: it comes back as a `FormatError` naming file and row, so the caller can
count it (bad input is never dropped silently).
"""
from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# sharegpt speaker names -> chat roles. function_call/observation are tool traffic and map to "tool" so the
# tool-free filter sees them.
_SHAREGPT_ROLES = {"human": "user", "user": "user", "gpt": "assistant", "assistant": "assistant",
                   "system": "system", "function_call": "tool", "observation": "tool", "tool": "tool",
                   "function": "tool"}
_PLACEHOLDER = re.compile(r"(<video>|<image>)")


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
    """A row that cannot be turned into a Sample; the message names file and row."""

    def __init__(self, file: str | Path, row: int, reason: str):
        super().__init__(f"{file} row {row}: {reason}")
        self.file, self.row, self.reason = str(file), row, reason


FORMATS = ("longvt", "video_r1", "longvideo_reason", "sharegpt")


def read_source(fmt: str, path: str | Path, source: str | None = None) -> Iterator[Sample | FormatError]:
    """Yield a Sample or a FormatError for every row of ``path`` in format ``fmt``."""
    if fmt not in FORMATS:
        raise ValueError(f"unknown format {fmt!r}; expected one of {FORMATS}")
    path = Path(path)
    source = source or fmt
    rows = _read_rows(path)
    convert = {"longvt": _from_openai_row, "video_r1": _from_video_r1, "longvideo_reason": _from_longvideo_reason,
               "sharegpt": _from_sharegpt}[fmt]
    for i, row in enumerate(rows):
        try:
            if not isinstance(row, dict):
                raise ValueError(f"expected an object, got {type(row).__name__}")
            sample = convert(row, source, i)
            _check_sample(sample)
            yield sample
        except (ValueError, KeyError, TypeError) as err:   # json errors are ValueError
            yield FormatError(path, i, f"{type(err).__name__}: {err}")


def _read_rows(path: Path) -> list[Any]:
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq
        return pq.read_table(path).to_pylist()
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".jsonl":
        rows = []
        for line_no, line in enumerate(text.splitlines()):
            if not line.strip():
                continue
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as err:
                rows.append(f"<unparseable line {line_no + 1}: {err}>")   # becomes a FormatError, keeps row count
        return rows
    data = json.loads(text)
    if isinstance(data, dict) and "data" in data:
        data = data["data"]
    if not isinstance(data, list):
        raise ValueError(f"{path}: expected a JSON list of rows")
    return data


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
        raise ValueError(f"message content must be a string or a list of parts, got {type(content).__name__}")
    parts = []
    for part in content:
        if isinstance(part, str):
            parts.append({"type": "text", "text": part})
            continue
        kind = part.get("type")
        if kind == "text":
            parts.append({"type": "text", "text": part.get("text") or ""})
        elif kind in ("image_url", "image"):
            parts.append({"type": "image", "path": _media_url(part, kind if kind in part else "image_url")})
        elif kind in ("video_url", "video"):
            parts.append({"type": "video", "path": _media_url(part, kind if kind in part else "video_url")})
        else:
            raise ValueError(f"unknown content part type {kind!r}")
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

def _option_lines(options: Any) -> str:
    if isinstance(options, str):
        options = json.loads(options) if options.strip().startswith("[") else [options]
    return "\n".join(str(o) for o in options or [])


def _question_text(problem: str, options: Any) -> str:
    text = problem.strip()
    lines = _option_lines(options)
    if lines:
        text += "\nOptions:\n" + lines
    # The target teaches the <think>…</think><answer>…</answer> shape (supplementary A); the prompt asks for it.
    return text + "\nThink step by step inside <think></think>, then give the final answer inside <answer></answer>."


def _from_video_r1(row: dict, source: str, index: int) -> Sample:
    missing = [k for k in ("problem", "process", "solution") if k not in row]
    if missing:
        raise KeyError(f"missing Video-R1 fields {missing} (row keys: {sorted(row)})")
    data_type = row.get("data_type", "video")
    if data_type not in ("video", "image"):
        raise ValueError(f"unknown data_type {data_type!r}")
    parts = []
    if row.get("path"):
        parts.append({"type": data_type, "path": row["path"]})
    parts.append({"type": "text", "text": _question_text(row["problem"], row.get("options"))})
    target = f"{row['process'].strip()}{row['solution'].strip()}"
    meta = {"problem_type": row.get("problem_type")}
    return Sample(source, _row_id(row, source, index),
                  [Turn("user", parts), Turn("assistant", [{"type": "text", "text": target}])], meta)


# ---- LongVideo-Reason ----

def _from_longvideo_reason(row: dict, source: str, index: int) -> Sample:
    if "messages" in row:
        return _from_openai_row(row, source, index)
    if "conversations" in row:
        return _from_sharegpt(row, source, index)
    video = row.get("video") or row.get("videos") or row.get("path") or row.get("video_path")
    if isinstance(video, list):
        if len(video) != 1:
            raise ValueError(f"expected one video, got {len(video)}")
        video = video[0]
    question = row.get("question") or row.get("problem")
    reasoning = row.get("reasoning") or row.get("process") or row.get("cot")
    answer = row.get("answer") if row.get("answer") is not None else row.get("solution")
    if not video or not question or answer is None:
        raise KeyError(f"expected video/question/answer fields (row keys: {sorted(row)})")
    answer = str(answer).strip()
    if not answer.startswith("<answer>"):
        answer = f"<answer>{answer}</answer>"
    think = (reasoning or "").strip()
    if think and not think.startswith("<think>"):
        think = f"<think>{think}</think>"
    parts = [{"type": "video", "path": video}, {"type": "text", "text": _question_text(question, row.get("options"))}]
    return Sample(source, _row_id(row, source, index),
                  [Turn("user", parts), Turn("assistant", [{"type": "text", "text": think + answer}])])


# ---- LLaMA-Factory sharegpt ----

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


def _from_sharegpt(row: dict, source: str, index: int) -> Sample:
    convo = row.get("conversations", row.get("messages"))
    if convo is None:
        raise KeyError(f"missing 'conversations'/'messages' (row keys: {sorted(row)})")
    if isinstance(convo, str):
        convo = json.loads(convo)
    queues = {"video": list(row.get("videos") or []), "image": list(row.get("images") or [])}
    turns = []
    if row.get("system"):
        turns.append(Turn("system", [{"type": "text", "text": row["system"]}]))
    for m in convo:
        speaker = m.get("from", m.get("role"))
        if speaker not in _SHAREGPT_ROLES:
            raise ValueError(f"unknown speaker {speaker!r}")
        value = m.get("value", m.get("content"))
        if not isinstance(value, str):
            raise ValueError(f"turn value must be a string, got {type(value).__name__}")
        turns.append(Turn(_SHAREGPT_ROLES[speaker], _split_placeholders(value, queues)))
    left = {k: len(v) for k, v in queues.items() if v}
    if left:
        raise ValueError(f"media without placeholders: {left}")
    meta = {"tools": row["tools"]} if row.get("tools") else {}
    return Sample(source, _row_id(row, source, index), turns, meta)

