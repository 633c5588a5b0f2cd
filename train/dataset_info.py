"""LLaMA-Factory's `dataset_info.json`: the entry that names a sharegpt file's columns and role tags.

A LLaMA-Factory `data/` folder describes each data set by an entry of `dataset_info.json` (its data/README.md):
`file_name`, `formatting`, `columns` (messages, system, tools, images, videos, audios) and, for sharegpt, `tags`
(role_tag, content_tag, user_tag, assistant_tag, observation_tag, function_tag, system_tag). The rules below are
its `DatasetAttr` (src/llamafactory/data/parser.py) and `SharegptDatasetConverter`
(src/llamafactory/data/converter.py); tests/fixtures/llamafactory_sharegpt/PROVENANCE.md names the commits:

- without `columns`, messages are read from "conversations" and no system/tools/images/videos/audios column is
  read; with `columns`, each of those is the column it names, and one it does not name is not read (messages
  included: an entry with `columns` but no `messages` has no conversation column);
- without `tags`, the tags are from/value/human/gpt/observation/function_call/system; with `tags`, a tag it does
  not name is unset (matches no turn): e.g. an entry naming only role/content/user/assistant has no system tag, so
  a leading system turn makes the row abnormal (skipped) rather than becoming the system prompt;
- a leading turn with the system tag is the system prompt (else the system column); then even positions hold the
  user/observation tags and odd ones the assistant/function tags, and the count is even, or the row is skipped.

A source without a dataset_info entry keeps the reader's own lenient defaults (cader.train.formats).
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

COLUMNS = ("messages", "system", "tools", "images", "videos", "audios")
TAGS = ("role_tag", "content_tag", "user_tag", "assistant_tag", "observation_tag", "function_tag", "system_tag")
# entry keys that change what a row means in ways this reader does not do: refused rather than ignored
_UNSUPPORTED = ("ranking", "num_samples", "subset", "folder", "hf_hub_url", "ms_hub_url", "om_hub_url",
                "script_url", "cloud_file_name")


@dataclass(frozen=True)
class SharegptAttr:
    """The columns and tags of one sharegpt data set (LLaMA-Factory's defaults when the entry says nothing)."""

    messages: str | None = "conversations"
    system: str | None = None
    tools: str | None = None
    images: str | None = None
    videos: str | None = None
    audios: str | None = None
    role_tag: str | None = "from"
    content_tag: str | None = "value"
    user_tag: str | None = "human"
    assistant_tag: str | None = "gpt"
    observation_tag: str | None = "observation"
    function_tag: str | None = "function_call"
    system_tag: str | None = "system"

    def as_dict(self) -> dict:
        return asdict(self)


class DatasetInfoError(ValueError):
    """A dataset_info.json entry that cannot be used (missing, not sharegpt, not a local file)."""


def attr_from_entry(entry: dict, where: str = "entry") -> SharegptAttr:
    """The SharegptAttr of one dataset_info.json entry, as LLaMA-Factory's DatasetAttr.join reads it."""
    formatting = entry.get("formatting", "alpaca")   # LLaMA-Factory's default formatting is alpaca
    if formatting != "sharegpt":
        raise DatasetInfoError(f"{where}: formatting {formatting!r}; only 'sharegpt' is read here")
    bad = [key for key in _UNSUPPORTED if entry.get(key)]
    chosen = {k for k in ("chosen", "rejected", "kto_tag") if (entry.get("columns") or {}).get(k)}
    if bad or chosen:
        raise DatasetInfoError(f"{where}: {sorted(bad) + sorted(chosen)} not supported (SFT from a local file "
                               "only: set file_name, and the source's ratio instead of num_samples)")
    fields = {}
    if "columns" in entry:
        fields.update({name: entry["columns"].get(name) for name in COLUMNS})
    if "tags" in entry:
        fields.update({name: entry["tags"].get(name) for name in TAGS})
    return SharegptAttr(**fields)


def load_entry(dataset_info: str | Path, dataset: str) -> tuple[Path, SharegptAttr]:
    """(the data file, its columns and tags) of entry `dataset` in `dataset_info` (the file, or its folder).
    The file is `file_name` under the folder of dataset_info.json, as LLaMA-Factory's dataset_dir."""
    path = Path(dataset_info)
    if path.is_dir():
        path = path / "dataset_info.json"
    try:
        info = json.loads(path.read_text())
    except (OSError, ValueError) as err:
        raise DatasetInfoError(f"cannot read {path}: {err}") from None
    if not isinstance(info, dict) or dataset not in info:
        names = sorted(info) if isinstance(info, dict) else []
        raise DatasetInfoError(f"{path}: no data set {dataset!r} (it has {names})")
    entry, where = info[dataset], f"{path} entry {dataset!r}"
    if not isinstance(entry, dict):
        raise DatasetInfoError(f"{where}: not an object")
    attr = attr_from_entry(entry, where)   # a hub or script entry is refused here, naming its key
    if not entry.get("file_name"):
        raise DatasetInfoError(f"{where}: no file_name")
    return path.parent / entry["file_name"], attr


def aligned_turns(row: dict, attr: SharegptAttr) -> tuple[str, list[tuple[str, str]], str, list, list, list]:
    """(system, [(role, content)], tools, images, videos, audios) of a row, as SharegptDatasetConverter aligns it;
    role is user | assistant | observation | function. Raises ValueError/KeyError for an abnormal row."""
    if not attr.messages:
        raise KeyError("the dataset_info entry names no messages column")
    messages = row[attr.messages]
    if isinstance(messages, str):
        messages = json.loads(messages)
    if not isinstance(messages, list):
        raise TypeError(f"{attr.messages!r} must be a list")
    if not all(isinstance(m, dict) for m in messages):
        raise TypeError(f"every turn of {attr.messages!r} must be an object")
    if attr.system_tag and messages and messages[0].get(attr.role_tag) == attr.system_tag:
        system, messages = messages[0][attr.content_tag], messages[1:]
    else:
        system = row.get(attr.system) if attr.system else ""
    roles = {attr.user_tag: "user", attr.assistant_tag: "assistant", attr.observation_tag: "observation",
             attr.function_tag: "function"}
    accepted = ((attr.user_tag, attr.observation_tag), (attr.assistant_tag, attr.function_tag))
    turns = []
    for pos, message in enumerate(messages):
        tag = message.get(attr.role_tag)
        if tag is None or tag not in accepted[pos % 2]:
            want = " or ".join(repr(t) for t in accepted[pos % 2] if t)
            raise ValueError(f"turn {pos} has {attr.role_tag}={tag!r}; expected {want} (dataset_info tags)")
        turns.append((roles[tag], message[attr.content_tag]))
    if len(turns) % 2:
        raise ValueError(f"{len(turns)} turns: a conversation ends with an assistant turn (even turn count)")
    tools = row.get(attr.tools) if attr.tools else ""
    media = [row.get(col) if col else None for col in (attr.images, attr.videos, attr.audios)]
    return system or "", turns, tools, *media
