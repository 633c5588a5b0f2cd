"""Writes the synthetic CoT training mix in the released formats (see ``write_training_mix``).

Each file has the layout of its release (tests/fixtures/<format>/ and their PROVENANCE.md; tests/test_synthetic_data.py
compares the schemas). Under ``<out>/train/`` (media paths in every file are relative to ``<out>/train/``, the media
root, as LongVT's are to the LongVT-Source download):

- the five tool-free LongVT-Parquet files, named as the release names them (``LONGVT_FILES``), written with HF
  `datasets` in the release's ``messages`` schema: a list of ``{"role", "content": [part]}`` where every part carries
  ``type``, ``text``, ``image_url`` and ``video_url`` (``{"url"}``), the absent ones null (``LONGVT_FEATURES``).
  ``longvt_sft.parquet`` holds all their rows in one file for tests that predate the release names.
- ``video_r1_cot.json`` -- Video-R1-COT-165k layout: ``problem_id``, ``problem``, ``data_type`` ("video"|"image"),
  ``problem_type`` ("multiple choice"|"numerical"), ``options`` (["A. red", ...] or []), ``process``
  (``<think>...</think>``), ``solution`` (``<answer>X</answer>``), ``path`` ("./media/..."), ``data_source``.
- ``longvideo_reason.jsonl`` -- LongVideo-Reason layout: ``problem_id``, ``problem`` (question and option lines),
  ``data_type``, ``problem_type``, ``reasoning`` (plain text), ``videos`` (one path), ``answer`` (``<answer>X</answer>``).
- ``sharegpt.json`` (``messages`` with role/content, ``videos``/``images`` lists, ``<video>``/``<image>``
  placeholders) and ``sharegpt_conversations.json`` (``conversations`` with from/value: human, gpt, function_call,
  observation; ``tools`` a JSON string, ``""`` or ``"[]"`` when the row declares none) -- LLaMA-Factory sharegpt.
- ``manifest.json`` -- per source: files, ``total`` rows, ``tool_call`` rows, ``clean`` rows, ``media_root``.

Tool-call rows are mixed into every format, each using one marker family so a filter is exercised on each:
``<tool_call>`` in an assistant/target text, ``<tool_response>`` in a tool turn, ``<tools>`` in a system prompt,
a ``tool``/``function_call``/``observation`` role, or a non-empty ``tools`` column. Clean targets read
``<think>...</think><answer>X</answer>``, except the direct-answer rows below.

Every question lists the six event colours in one fixed order (``canonical_colour_options``), so the letter is a
function of the colour shown. Besides its CoT row, every training video has one *direct-answer* row (LongVT format
for even, sharegpt for odd video indices): the CADER Stage 1 prompt (paper App. C.1, ``stage1_prompt``) and as
target the empty think block that ``enable_thinking=False`` pre-fills followed by the bare letter
(``direct_answer_text``). They emulate the direct-answer ability the real Qwen3-VL-8B-Instruct already has and that
Stage 1 relies on (option-letter logits at the first answer position, thinking off); a tiny random model only gets
it from data. (Video-R1 and LongVideo-Reason cannot hold them: their readers build the target from
``process``/``reasoning`` and an ``<answer>`` tag, so the exact pre-fill cannot be expressed.) Held-out evaluation
videos are never in the mix, so Stage 1 accuracy on them measures colour -> letter read from pixels.

``cader_roles.json`` (LLaMA-Factory sharegpt, ``messages`` with a system turn) holds the other CADER roles, in the
paper's App. C prompt formats (``cader.evaluate.method.prompts``), for every training video (``write_cader_roles``):
the C.2 proposal on the whole video with the scene window as target (``"relevant_windows": [[s, e]]``; every
``REFLECT_EVERY``-th video also as the reflection prompt with wrong tried windows; a video with a decoy scene always,
with the decoy as the window that was tried), the C.3 verifier on a clip of the scene (``Yes``) and on a clip of
another stretch (``No``; the decoy scene where there is one), the C.4 final answer and a C.1 answer on the scene
clip. A real Qwen3-VL-8B-Instruct brings these abilities from pre-training; the tiny random model only gets them
from data. Clips are cut as small videos of their own under ``media/clips/``. Targets start with the empty think
block, so each is the exact token sequence the method reads: after the pre-fill where it calls with thinking off
(C.1, C.3), and the model's own empty thinking where it calls with thinking on (C.2, C.4).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from cader.dev.synthetic.media import (
    COLOUR_QUESTION,
    EMPTY_THINK,
    EVENT_COLOURS,
    IMAGE_QUESTION,
    LETTERS,
    VideoSpec,
    canonical_colour_options,
    clip_spec,
    cot_text,
    direct_answer_text,
    image_cot_text,
    random_cued_spec,
    write_image,
    write_video,
)
from cader.evaluate.method.prompts import final_prompt, proposal_prompt, stage1_prompt, verifier_prompt

FORMATS = ("longvt", "video_r1", "longvideo_reason", "sharegpt")
# The five tool-free SFT files of LongVT-Parquet (LongVT examples/sft/longvt_7b_sft.yaml), in the order rows are
# dealt to them
LONGVT_FILES = (
    "longvt_sft_videor1_165k5.parquet",
    "longvt_sft_longvideoreason_5k2.parquet",
    "longvt_sft_llavacot_54k5.parquet",
    "longvt_sft_openvlthinker_2k8.parquet",
    "longvt_sft_wemath_602.parquet",
)
LONGVT_LEGACY_FILE = "longvt_sft.parquet"   # all LongVT rows in one file, for tests written before the release names
# The files write_training_mix writes, as training sources: (source name, reader format, file under train/).
# configs/train/cot_mix_tiny.yaml lists the same; benches and tests import this instead of repeating it.
SYNTHETIC_MIX = (
    *((f"longvt_{name.split('_')[2]}", "longvt", name) for name in LONGVT_FILES),
    ("video_r1", "video_r1", "video_r1_cot.json"),
    ("longvideo_reason", "longvideo_reason", "longvideo_reason.jsonl"),
    ("sharegpt", "sharegpt", "sharegpt.json"),
    ("sharegpt_conv", "sharegpt", "sharegpt_conversations.json"),
    ("cader_roles", "sharegpt", "cader_roles.json"),
)
CADER_ROLES_FILE = "cader_roles.json"
MIN_CROP = 10.0        # configs/eval/cader_tiny.yaml's min_crop, as the proposal prompt states it
REFLECT_EVERY = 2      # every 2nd training video also gets a reflection-prompt proposal row
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
    lines = "\n".join(f"{letters[i]}. {o}" for i, o in enumerate(options))
    return f"{question}\nOptions:\n{lines}\nAnswer with the option's letter from the given choices."


def tool_call_text(spec: VideoSpec) -> str:
    call = {"name": "crop_video", "arguments": {"start_time": spec.t_s, "end_time": spec.t_e}}
    return f"<think>I need a closer look at the event.</think>\n<tool_call>\n{json.dumps(call)}\n</tool_call>"


def write_json(path: Path, data) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    tmp.replace(path)


def write_jsonl(path: Path, rows: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    tmp.replace(path)


def longvt_features():
    """The LongVT-Parquet `messages` schema as HF `datasets` writes it (every part has every key)."""
    from datasets import Features, List, Value

    part = {"type": Value("string"), "text": Value("string"), "image_url": {"url": Value("string")},
            "video_url": {"url": Value("string")}}
    return Features({"messages": List({"role": Value("string"), "content": List(part)})})


def longvt_part(kind: str, value: str) -> dict:
    """One content part with every key present, the absent ones null."""
    part = {"type": kind, "text": None, "image_url": None, "video_url": None}
    part["text" if kind == "text" else kind] = value if kind == "text" else {"url": value}
    return part


def write_longvt_parquet(path: Path, rows: list[dict]) -> None:
    """Rows of ``{"messages": [...]}`` written through HF `datasets` with the release schema."""
    from datasets import Dataset
    from datasets.utils import logging as ds_logging

    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    bar = ds_logging.is_progress_bar_enabled()
    ds_logging.disable_progress_bar()   # one bar per tiny file is noise
    try:
        Dataset.from_list(rows, features=longvt_features()).to_parquet(str(tmp))
    finally:
        if bar:
            ds_logging.enable_progress_bar()
    tmp.replace(path)


def write_parquet(path: Path, rows: list[dict]) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    pq.write_table(pa.Table.from_pylist(rows), tmp)
    tmp.replace(path)


# ---------------------------------------------------------------- one sample per format


def _parts_text(text: str) -> dict:
    return longvt_part("text", text)


def _longvt_messages(
    media: str, is_video: bool, prompt: str, target: str, tool_kind: int | None, spec: VideoSpec | None
) -> list[dict]:
    media_part = longvt_part("video_url" if is_video else "image_url", media)
    system = SYSTEM_TEXT
    if tool_kind == 0:
        system += f"\n# Tools\n<tools>\n{json.dumps(TOOLS_SPEC)}\n</tools>"
    messages = [
        {"role": "system", "content": [_parts_text(system)]},
        {"role": "user", "content": [media_part, _parts_text(prompt)]},
    ]
    if tool_kind is not None:
        messages.append({"role": "assistant", "content": [_parts_text(tool_call_text(spec))]})
        if tool_kind != 1:  # kind 1 keeps only the <tool_call> marker
            messages.append(
                {
                    "role": "tool",
                    "content": [_parts_text("<tool_response>"), media_part, _parts_text("</tool_response>")],
                }
            )
    messages.append({"role": "assistant", "content": [_parts_text(target)]})
    return messages


def _sharegpt_row(
    media: str, is_video: bool, prompt: str, target: str, tool_kind: int | None, spec: VideoSpec | None
) -> dict:
    """OpenAI-style sharegpt (role/content) with LLaMA-Factory's turn names; user/observation and
    assistant/function_call turns alternate as its converter requires."""
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


def _conversations_row(
    media: str, is_video: bool, prompt: str, target: str, tool_kind: int | None, spec: VideoSpec | None
) -> dict:
    tag = "<video>" if is_video else "<image>"
    turns = [{"from": "human", "value": f"{tag}{prompt}"}]
    row: dict = {}
    if tool_kind is not None:
        call = {"name": "crop_video", "arguments": {"start_time": spec.t_s, "end_time": spec.t_e}}
        turns += [
            {"from": "function_call", "value": json.dumps(call)},
            {"from": "observation", "value": "The clip shows the event."},
        ]
        row["tools"] = json.dumps([TOOLS_SPEC["function"]])
    turns.append({"from": "gpt", "value": target})
    row = {
        "conversations": turns,
        "videos": [media] if is_video else [],
        "images": [] if is_video else [media],
        # LLaMA-Factory reads tools as a JSON string; "" and "[]" both declare none
        "tools": row.get("tools", ""),
    }
    return row


# ---------------------------------------------------------------- the whole mix


def window_text(start: float, end: float) -> str:
    """The C.2 answer format with whole seconds."""
    return f'"relevant_windows": [[{start:.0f}, {end:.0f}]]'


def _roles_row(system: str, user: str, media: str, target: str) -> dict:
    return {
        "messages": [
            {"role": "system", "content": system},
            {"role": "user", "content": f"<video>{user}"},
            {"role": "assistant", "content": EMPTY_THINK + target},
        ],
        "videos": [media],
        "images": [],
    }


def proposal_row(spec: VideoSpec, tried: list[tuple[float, float]] | tuple = ()) -> dict:
    """The C.2 proposal on the whole video (the reflection prompt when ``tried`` names windows), target the scene."""
    if spec.scene_s is None or spec.scene_e is None:
        raise ValueError(f"{spec.name}: a proposal row needs a video with a scene")
    options, _ = canonical_colour_options(spec.colour)
    system, user = proposal_prompt(COLOUR_QUESTION, options, LETTERS[: len(options)], spec.duration, MIN_CROP, tried)
    return _roles_row(system, user, f"media/videos/{spec.name}.mp4", window_text(spec.scene_s, spec.scene_e))


def reflection_windows(rng: np.random.Generator, spec: VideoSpec) -> list[tuple[float, float]]:
    """One or two scene-length windows that miss the scene: the ranges a reflection row says were tried."""
    length = spec.scene_e - spec.scene_s
    others = [k * length for k in range(int(spec.duration // length)) if k * length != spec.scene_s]
    n_tried = 1 + int(rng.integers(2))
    return [(others[j], others[j] + length) for j in rng.permutation(len(others))[:n_tried]]


def write_cader_roles(train_dir: Path, rng: np.random.Generator, specs: list[VideoSpec]) -> tuple[list[dict], dict]:
    """Proposal / reflection / verifier / final-answer / clip-answer rows per cued video (module doc) and their
    clips; returns (rows, counts per role)."""
    rows: list[dict] = []
    counts = {"propose": 0, "reflect": 0, "verify_yes": 0, "verify_no": 0, "answer": 0, "clip_stage1": 0}
    for i, spec in enumerate(specs):
        if spec.scene_s is None or spec.scene_e is None:
            raise ValueError(f"{spec.name}: CADER role rows need a video with a scene")
        options, letter = canonical_colour_options(spec.colour)
        letters = LETTERS[: len(options)]
        scene = (spec.scene_s, spec.scene_e)
        length = scene[1] - scene[0]
        others = [k * length for k in range(int(spec.duration // length)) if k * length != scene[0]]
        neg_s = others[int(rng.integers(len(others)))]
        if spec.decoy_s is not None:   # the hard negative: light like the scene, without the event
            neg_s = spec.decoy_s
        pos_rel, neg_rel = f"media/clips/{spec.name}_pos.mp4", f"media/clips/{spec.name}_neg.mp4"
        write_video(clip_spec(spec, f"{spec.name}_pos", *scene), train_dir / pos_rel)
        write_video(clip_spec(spec, f"{spec.name}_neg", neg_s, neg_s + length), train_dir / neg_rel)
        rows.append(proposal_row(spec))
        counts["propose"] += 1
        if spec.decoy_s is not None:   # the decoy was tried and rejected: the other light scene is the answer
            rows.append(proposal_row(spec, [(spec.decoy_s, spec.decoy_e)]))
            counts["reflect"] += 1
        elif i % REFLECT_EVERY == 0:
            rows.append(proposal_row(spec, reflection_windows(rng, spec)))
            counts["reflect"] += 1
        system, user = verifier_prompt(COLOUR_QUESTION, options, letters)
        rows.append(_roles_row(system, user, pos_rel, "Yes"))
        rows.append(_roles_row(system, user, neg_rel, "No"))
        counts["verify_yes"] += 1
        counts["verify_no"] += 1
        system, user = final_prompt(COLOUR_QUESTION, options, letters, *scene)
        rows.append(_roles_row(system, user, pos_rel, f"<answer>{letter}</answer>"))
        counts["answer"] += 1
        system, user = stage1_prompt(COLOUR_QUESTION, options, letters)
        rows.append(_roles_row(system, user, pos_rel, letter))
        counts["clip_stage1"] += 1
    return rows, counts


def write_training_mix(
    train_dir: Path,
    rng: np.random.Generator,
    n_train: int,
    n_images: int,
    n_tool: int,
    width: int = 96,
    height: int = 64,
    fps: int = 4,
    duration: int = 128,
    scene_len: int = 16,
    event_len: float | tuple[int, int] = 2.0,
    decoy_rate: float = 0.0,
) -> dict:
    """Write videos/images, the four formats and the CADER role rows; return the manifest (also written to
    manifest.json)."""
    media_dir = train_dir / "media"
    specs = [
        random_cued_spec(
            rng, f"train_{i:04d}", (duration, duration), scene_len, event_len, fps=fps, width=width, height=height,
            decoy_rate=decoy_rate,
        )
        for i in range(n_train)
    ]
    for spec in specs:
        write_video(spec, media_dir / "videos" / f"{spec.name}.mp4")
    colours = tuple(EVENT_COLOURS)
    images = []
    for i in range(n_images):
        colour = colours[int(rng.integers(len(colours)))]
        suffix = ".jpg" if i % 4 == 3 else ".png"
        rel = f"media/images/img_{i:04d}{suffix}"
        write_image(colour, train_dir / rel, width, height, index=i)
        images.append((rel, colour))

    rows: dict[str, list] = {f: [] for f in FORMATS}
    longvt_tool_rows: list[dict] = []   # tool rows all go to the first file, so every file keeps trainable rows
    conversation_rows: list[dict] = []
    counts = {f: {"total": 0, "tool_call": 0, "direct_answer": 0} for f in FORMATS}

    def media_items():
        for i, spec in enumerate(specs):
            yield FORMATS[i % len(FORMATS)], True, f"media/videos/{spec.name}.mp4", spec, spec.colour
        image_formats = ("longvt", "video_r1", "sharegpt")
        for i, (rel, colour) in enumerate(images):
            yield image_formats[i % len(image_formats)], False, rel, None, colour

    items = list(media_items())
    tool_items = []
    for fmt in FORMATS:  # tool samples reuse videos of the pool, kinds cycle through the marker families
        for k in range(n_tool):
            spec = specs[int(rng.integers(len(specs)))]
            tool_items.append((fmt, True, f"media/videos/{spec.name}.mp4", spec, spec.colour, k % 3))

    all_items = [(*it, None) for it in items] + tool_items
    for index, (fmt, is_video, media, spec, colour, tool_kind) in enumerate(all_items):
        options, letter = canonical_colour_options(colour)
        question = COLOUR_QUESTION if is_video else IMAGE_QUESTION
        prompt = prompt_with_options(question, options)
        target = cot_text(spec, letter) if is_video else image_cot_text(colour, letter)
        counts[fmt]["total"] += 1
        counts[fmt]["tool_call"] += tool_kind is not None
        if fmt == "longvt":
            row = {"messages": _longvt_messages(media, is_video, prompt, target, tool_kind, spec)}
            (rows[fmt] if tool_kind is None else longvt_tool_rows).append(row)
        elif fmt == "video_r1":
            numerical = is_video and tool_kind is None and counts[fmt]["total"] % 8 == 0
            if numerical:
                seconds = int(spec.t_e - spec.t_s)
                problem, opts, solution = (
                    "For how many seconds is the coloured shape visible?",
                    [],
                    f"<answer>{seconds}</answer>",
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
                process = (
                    tool_call_text(spec)
                    if tool_kind != 2
                    else "<think>Checking.</think><tool_response>clip</tool_response>"
                ) + process
            rows[fmt].append(
                {
                    "problem_id": index,
                    "problem": problem,
                    "data_type": "video" if is_video else "image",
                    "problem_type": "numerical" if numerical else "multiple choice",
                    "options": opts,
                    "process": process,
                    "solution": solution,
                    "path": f"./{media}",
                    "data_source": "synthetic_colour",
                }
            )
        elif fmt == "longvideo_reason":
            reasoning = target.split("</think>")[0].removeprefix("<think>")
            if tool_kind is not None:
                reasoning = (
                    (
                        tool_call_text(spec)
                        if tool_kind != 2
                        else "<tool_response>The clip shows the event.</tool_response>"
                    )
                    + "\n"
                    + reasoning
                )
            lines = "\n".join(f"{LETTERS[i]}. {o}" for i, o in enumerate(options))
            rows[fmt].append(
                {
                    "problem_id": index,
                    "problem": f"{question}\n{lines}",
                    "data_type": "video",
                    "problem_type": "temporal",
                    "reasoning": reasoning,
                    "videos": media,
                    "answer": f"<answer>{letter}</answer>",
                }
            )
        else:
            maker = _conversations_row if counts[fmt]["total"] % 2 == 0 else _sharegpt_row
            row = maker(media, is_video, prompt, target, tool_kind, spec)
            if maker is _conversations_row and tool_kind is None and len(conversation_rows) % 2:
                row["tools"] = "[]"   # the other way to declare no tools
            (conversation_rows if maker is _conversations_row else rows[fmt]).append(row)

    # one direct-answer row per training video (module doc): Stage 1's prompt, target = pre-filled empty think + letter
    for i, spec in enumerate(specs):
        options, letter = canonical_colour_options(spec.colour)
        system, user = stage1_prompt(COLOUR_QUESTION, options, LETTERS[: len(options)])
        media, target = f"media/videos/{spec.name}.mp4", direct_answer_text(letter)
        fmt = "longvt" if i % 2 == 0 else "sharegpt"
        counts[fmt]["total"] += 1
        counts[fmt]["direct_answer"] += 1
        if fmt == "longvt":
            messages = _longvt_messages(media, True, user, target, None, spec)
            messages[0] = {"role": "system", "content": [_parts_text(system)]}
            rows[fmt].append({"messages": messages})
        else:
            row = _sharegpt_row(media, True, user, target, None, spec)
            row["messages"].insert(0, {"role": "system", "content": system})
            rows[fmt].append(row)

    # deal the clean LongVT rows over the five release files (tool rows into the first) so each has trainable rows
    if len(rows["longvt"]) < len(LONGVT_FILES):
        raise ValueError(
            f"{len(rows['longvt'])} clean LongVT rows cannot fill its {len(LONGVT_FILES)} release files; "
            "raise n_train or n_images"
        )
    dealt = {name: [] for name in LONGVT_FILES}
    for k, row in enumerate(rows["longvt"]):
        dealt[LONGVT_FILES[k % len(LONGVT_FILES)]].append(row)
    dealt[LONGVT_FILES[0]] += longvt_tool_rows
    for name, file_rows in dealt.items():
        write_longvt_parquet(train_dir / name, file_rows)
    write_longvt_parquet(train_dir / LONGVT_LEGACY_FILE, [r for name in LONGVT_FILES for r in dealt[name]])
    write_json(train_dir / "video_r1_cot.json", rows["video_r1"])
    write_jsonl(train_dir / "longvideo_reason.jsonl", rows["longvideo_reason"])
    write_json(train_dir / "sharegpt.json", rows["sharegpt"])
    write_json(train_dir / "sharegpt_conversations.json", conversation_rows)
    role_rows, role_counts = write_cader_roles(train_dir, rng, specs)
    write_json(train_dir / CADER_ROLES_FILE, role_rows)

    files = {
        "longvt": list(LONGVT_FILES),
        "video_r1": ["video_r1_cot.json"],
        "longvideo_reason": ["longvideo_reason.jsonl"],
        "sharegpt": ["sharegpt.json", "sharegpt_conversations.json"],
    }
    formats = {
        "longvt": "longvt_parquet",
        "video_r1": "video_r1_json",
        "longvideo_reason": "longvideo_reason_jsonl",
        "sharegpt": "sharegpt",
    }
    manifest = {
        "media_root": ".",
        "target_format": "<think>...</think><answer>X</answer>",
        "direct_answer_format": direct_answer_text("X"),
        "sources": {
            name: {
                "format": formats[name],
                "files": files[name],
                "total": counts[name]["total"],
                "tool_call": counts[name]["tool_call"],
                "direct_answer": counts[name]["direct_answer"],
                "clean": counts[name]["total"] - counts[name]["tool_call"],
            }
            for name in FORMATS
        },
    }
    manifest["sources"]["cader_roles"] = {
        "format": "sharegpt",
        "files": [CADER_ROLES_FILE],
        "total": len(role_rows),
        "tool_call": 0,
        "direct_answer": 0,
        "clean": len(role_rows),
        "roles": role_counts,
    }
    write_json(train_dir / "manifest.json", manifest)
    return manifest
