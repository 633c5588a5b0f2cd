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
it from data. The same holds for knowing what it cannot see: ``n_unseen`` further videos hold the light scene
without any event, each with six direct-answer rows, one per option letter, so the likeliest reading of such frames
is every letter alike (``add_unseen_rows``). Without them the model never meets a video whose frames miss the
answer, which is what Stage 1's sparse pass gives it on a brief evaluation event, and its confidence there is
whatever the weights extrapolate: on one seed of the miniature the wrong answers had the *largest* margins (AUROC
0.08), so no early exit could be certified. (Video-R1 and LongVideo-Reason cannot hold them: their readers build the target from
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
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
from cader.dev.synthetic.format_rows import (
    MixItem,
    conversations_row,
    longvideo_reason_row,
    longvt_messages,
    longvt_part,  # noqa: F401 - tests and benches import it from here
    prompt_with_options,
    sharegpt_row,
    text_part,
    video_r1_row,
)
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
from cader.vlm.files import write_atomic

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


def write_json(path: Path, data) -> None:
    write_atomic(path, json.dumps(data, indent=1, ensure_ascii=False) + "\n", durable=False)


def write_jsonl(path: Path, rows: list[dict]) -> None:
    write_atomic(path, [json.dumps(r, ensure_ascii=False) + "\n" for r in rows], durable=False)


def longvt_features():
    """The LongVT-Parquet `messages` schema as HF `datasets` writes it (every part has every key)."""
    from datasets import Features, List, Value

    part = {"type": Value("string"), "text": Value("string"), "image_url": {"url": Value("string")},
            "video_url": {"url": Value("string")}}
    return Features({"messages": List({"role": Value("string"), "content": List(part)})})


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


# ---------------------------------------------------------------- the whole mix


def window_text(start: float, end: float) -> str:
    """The C.2 answer format with whole seconds."""
    return f'"relevant_windows": [[{start:.0f}, {end:.0f}]]'


def _roles_row(system: str, user: str, media: str, target: str) -> dict:
    return {"messages": [{"role": "system", "content": system}, {"role": "user", "content": f"<video>{user}"},
                         {"role": "assistant", "content": EMPTY_THINK + target}], "videos": [media], "images": []}


def proposal_row(spec: VideoSpec, tried: list[tuple[float, float]] | tuple = ()) -> dict:
    """The C.2 proposal on the whole video (the reflection prompt when ``tried`` names windows), target the scene."""
    options, _ = canonical_colour_options(spec.colour)
    system, user = proposal_prompt(COLOUR_QUESTION, options, LETTERS[: len(options)], spec.duration, MIN_CROP, tried)
    return _roles_row(system, user, f"media/videos/{spec.name}.mp4", window_text(spec.scene_s, spec.scene_e))


def other_slots(spec: VideoSpec) -> list[float]:
    """The starts of the scene-length slots of the video other than its scene's."""
    length = spec.scene_e - spec.scene_s
    return [k * length for k in range(int(spec.duration // length)) if k * length != spec.scene_s]


def reflection_windows(rng: np.random.Generator, spec: VideoSpec) -> list[tuple[float, float]]:
    """One or two scene-length windows that miss the scene: the ranges a reflection row says were tried."""
    length, others = spec.scene_e - spec.scene_s, other_slots(spec)
    n_tried = 1 + int(rng.integers(2))
    return [(others[j], others[j] + length) for j in rng.permutation(len(others))[:n_tried]]


def write_cader_roles(train_dir: Path, rng: np.random.Generator, specs: list[VideoSpec]) -> tuple[list[dict], dict]:
    """Proposal / reflection / verifier / final-answer / clip-answer rows per cued video (module doc) and their
    clips; returns (rows, counts per role)."""
    rows: list[dict] = []
    counts = dict.fromkeys(("propose", "reflect", "verify_yes", "verify_no", "answer", "clip_stage1"), 0)

    def add(role: str, row: dict) -> None:
        rows.append(row)
        counts[role] += 1

    for i, spec in enumerate(specs):
        if spec.scene_s is None or spec.scene_e is None:
            raise ValueError(f"{spec.name}: CADER role rows need a video with a scene")
        options, letter = canonical_colour_options(spec.colour)
        letters = LETTERS[: len(options)]
        scene = (spec.scene_s, spec.scene_e)
        others = other_slots(spec)
        neg_s = others[int(rng.integers(len(others)))]
        if spec.decoy_s is not None:   # the hard negative: light like the scene, without the event
            neg_s = spec.decoy_s
        pos_rel, neg_rel = f"media/clips/{spec.name}_pos.mp4", f"media/clips/{spec.name}_neg.mp4"
        write_video(clip_spec(spec, f"{spec.name}_pos", *scene), train_dir / pos_rel)
        write_video(clip_spec(spec, f"{spec.name}_neg", neg_s, neg_s + scene[1] - scene[0]), train_dir / neg_rel)
        add("propose", proposal_row(spec))
        if spec.decoy_s is not None:   # the decoy was tried and rejected: the other light scene is the answer
            add("reflect", proposal_row(spec, [(spec.decoy_s, spec.decoy_e)]))
        elif i % REFLECT_EVERY == 0:
            add("reflect", proposal_row(spec, reflection_windows(rng, spec)))
        system, user = verifier_prompt(COLOUR_QUESTION, options, letters)
        add("verify_yes", _roles_row(system, user, pos_rel, "Yes"))
        add("verify_no", _roles_row(system, user, neg_rel, "No"))
        add("answer", _roles_row(*final_prompt(COLOUR_QUESTION, options, letters, *scene), pos_rel,
                                 f"<answer>{letter}</answer>"))
        add("clip_stage1", _roles_row(*stage1_prompt(COLOUR_QUESTION, options, letters), pos_rel, letter))
    return rows, counts


@dataclass
class MixRows:
    """The rows of every format as they are built, and their counts for the manifest."""

    rows: dict[str, list] = field(default_factory=lambda: {f: [] for f in FORMATS})
    longvt_tool_rows: list[dict] = field(default_factory=list)   # all go to the first LongVT file (see deal)
    conversation_rows: list[dict] = field(default_factory=list)  # sharegpt_conversations.json
    counts: dict = field(default_factory=lambda: {f: {"total": 0, "tool_call": 0, "direct_answer": 0}
                                                  for f in FORMATS})

    def count(self, fmt: str, tool_call: bool = False, direct_answer: bool = False) -> int:
        """Count one more row of `fmt` (one of FORMATS; a tool-call or a direct-answer row when said); return the
        format's running total, which some row choices cycle on."""
        counts = self.counts[fmt]
        counts["total"] += 1
        counts["tool_call"] += tool_call
        counts["direct_answer"] += direct_answer
        return counts["total"]


def write_training_media(train_dir: Path, rng: np.random.Generator, n_train: int, n_images: int,
                         video: dict) -> tuple[list[VideoSpec], list[tuple[str, str]]]:
    """Draw (`rng`: the videos' cues, then the images' colours) and write the training videos (media/videos/) and
    images (media/images/, every 4th a JPEG, at the videos' frame size); returns (video specs, [(image path under
    train/, its colour)])."""
    specs = [random_cued_spec(rng, f"train_{i:04d}", **video) for i in range(n_train)]
    for spec in specs:
        write_video(spec, train_dir / "media" / "videos" / f"{spec.name}.mp4")
    colours = tuple(EVENT_COLOURS)
    images = []
    for i in range(n_images):
        colour = colours[int(rng.integers(len(colours)))]
        rel = f"media/images/img_{i:04d}{'.jpg' if i % 4 == 3 else '.png'}"
        write_image(colour, train_dir / rel, video.get("width", 96), video.get("height", 64), index=i)
        images.append((rel, colour))
    return specs, images


def mix_items(specs: list[VideoSpec], images: list[tuple[str, str]], rng: np.random.Generator,
              n_tool: int) -> list[MixItem]:
    """The CoT rows in writing order: each video and image ((path under train/, colour)) once (formats dealt in
    turn; images have no LongVideo-Reason format), then `n_tool` tool-call rows per format on videos `rng` draws
    from the pool, their marker kinds cycling."""
    items = [MixItem(FORMATS[i % len(FORMATS)], True, f"media/videos/{spec.name}.mp4", spec, spec.colour, None)
             for i, spec in enumerate(specs)]
    image_formats = ("longvt", "video_r1", "sharegpt")
    items += [MixItem(image_formats[i % len(image_formats)], False, rel, None, colour, None)
              for i, (rel, colour) in enumerate(images)]
    for fmt in FORMATS:
        for k in range(n_tool):
            spec = specs[int(rng.integers(len(specs)))]
            items.append(MixItem(fmt, True, f"media/videos/{spec.name}.mp4", spec, spec.colour, k % 3))
    return items


def add_cot_row(mix: MixRows, index: int, item: MixItem) -> None:
    """Build `item`'s CoT row in its format and add it to `mix`; `index`, the row's position among all CoT rows,
    is the problem_id of Video-R1 and LongVideo-Reason rows."""
    options, letter = canonical_colour_options(item.colour)
    question = COLOUR_QUESTION if item.is_video else IMAGE_QUESTION
    prompt = prompt_with_options(question, options)
    target = cot_text(item.spec, letter) if item.is_video else image_cot_text(item.colour, letter)
    fmt, tool_kind = item.fmt, item.tool_kind
    total = mix.count(fmt, tool_call=tool_kind is not None)
    row_args = (item.media, item.is_video, prompt, target, tool_kind, item.spec)
    if fmt == "longvt":
        row = {"messages": longvt_messages(*row_args)}
        (mix.rows[fmt] if tool_kind is None else mix.longvt_tool_rows).append(row)
    elif fmt == "video_r1":
        numerical = item.is_video and tool_kind is None and total % 8 == 0   # every 8th row, when a clean video
        mix.rows[fmt].append(video_r1_row(index, item, question, options, target, numerical))
    elif fmt == "longvideo_reason":
        mix.rows[fmt].append(longvideo_reason_row(index, item, question, options, letter, target))
    elif total % 2 == 0:   # sharegpt: alternate rows in the from/value layout
        row = conversations_row(*row_args)
        if tool_kind is None and len(mix.conversation_rows) % 2:
            row["tools"] = "[]"   # the other way to declare no tools
        mix.conversation_rows.append(row)
    else:
        mix.rows[fmt].append(sharegpt_row(*row_args))


def add_direct_answer_row(mix: MixRows, video_index: int, spec: VideoSpec, letter: str | None = None) -> None:
    """Add the video's direct-answer row (module doc): Stage 1's prompt, target the pre-filled empty think block and
    the letter (the colour's, unless given); LongVT format for even, sharegpt for odd video indices."""
    options, colour_letter = canonical_colour_options(spec.colour)
    letter = letter or colour_letter
    system, user = stage1_prompt(COLOUR_QUESTION, options, LETTERS[: len(options)])
    media, target = f"media/videos/{spec.name}.mp4", direct_answer_text(letter)
    fmt = "longvt" if video_index % 2 == 0 else "sharegpt"
    mix.count(fmt, direct_answer=True)
    if fmt == "longvt":
        messages = longvt_messages(media, True, user, target, None, spec)
        messages[0] = {"role": "system", "content": [text_part(system)]}
        mix.rows[fmt].append({"messages": messages})
    else:
        row = sharegpt_row(media, True, user, target, None, spec)
        row["messages"].insert(0, {"role": "system", "content": system})
        mix.rows[fmt].append(row)


def add_unseen_rows(mix: MixRows, video_index: int, spec: VideoSpec) -> None:
    """Add six direct-answer rows for an event-less video (module doc), one per letter of the canonical options:
    nothing in the frames tells the letters apart, so the loss is lowest with all six alike, which the model
    cannot memorise per video. Formats alternate as ``add_direct_answer_row``'s."""
    options, _ = canonical_colour_options(spec.colour)
    for letter in LETTERS[: len(options)]:
        add_direct_answer_row(mix, video_index, spec, letter)


def deal_longvt_rows(clean_rows: list[dict], tool_rows: list[dict]) -> dict[str, list[dict]]:
    """The clean LongVT rows dealt in turn over the five release files, the tool rows all into the first, so every
    file keeps trainable rows once tool rows are filtered out. ValueError when there are fewer clean rows than files.
    """
    if len(clean_rows) < len(LONGVT_FILES):
        raise ValueError(f"{len(clean_rows)} clean LongVT rows cannot fill its {len(LONGVT_FILES)} release files; "
                         "raise n_train or n_images")
    dealt = {name: [] for name in LONGVT_FILES}
    for k, row in enumerate(clean_rows):
        dealt[LONGVT_FILES[k % len(LONGVT_FILES)]].append(row)
    dealt[LONGVT_FILES[0]] += tool_rows
    return dealt


def write_format_files(train_dir: Path, mix: MixRows) -> None:
    """Write the four formats' files of `mix` under `train_dir` (module doc), LongVT's also as the one legacy
    file."""
    dealt = deal_longvt_rows(mix.rows["longvt"], mix.longvt_tool_rows)
    for name, file_rows in dealt.items():
        write_longvt_parquet(train_dir / name, file_rows)
    write_longvt_parquet(train_dir / LONGVT_LEGACY_FILE, [r for name in LONGVT_FILES for r in dealt[name]])
    write_json(train_dir / "video_r1_cot.json", mix.rows["video_r1"])
    write_jsonl(train_dir / "longvideo_reason.jsonl", mix.rows["longvideo_reason"])
    write_json(train_dir / "sharegpt.json", mix.rows["sharegpt"])
    write_json(train_dir / "sharegpt_conversations.json", mix.conversation_rows)


# Per format: the format name the manifest gives, and the files write_format_files writes
FORMAT_FILES = {"longvt": ("longvt_parquet", list(LONGVT_FILES)),
                "video_r1": ("video_r1_json", ["video_r1_cot.json"]),
                "longvideo_reason": ("longvideo_reason_jsonl", ["longvideo_reason.jsonl"]),
                "sharegpt": ("sharegpt", ["sharegpt.json", "sharegpt_conversations.json"])}


def mix_manifest(counts: dict, n_role_rows: int, role_counts: dict) -> dict:
    """manifest.json: per source its format, files and row counts (total, tool_call, direct_answer, clean).

    counts: per format, its rows' counts (MixRows.counts).
    n_role_rows: rows of cader_roles.json.
    role_counts: those rows per CADER role.
    """
    sources = {name: {"format": FORMAT_FILES[name][0], "files": list(FORMAT_FILES[name][1]), **counts[name],
                      "clean": counts[name]["total"] - counts[name]["tool_call"]} for name in FORMATS}
    sources["cader_roles"] = {"format": "sharegpt", "files": [CADER_ROLES_FILE], "total": n_role_rows,
                              "tool_call": 0, "direct_answer": 0, "clean": n_role_rows, "roles": role_counts}
    return {"media_root": ".", "target_format": "<think>...</think><answer>X</answer>",
            "direct_answer_format": direct_answer_text("X"), "sources": sources}


def write_training_mix(train_dir: Path, rng: np.random.Generator, n_train: int, n_images: int, n_tool: int,
                       video: dict | None = None, n_unseen: int = 0) -> dict:
    """Write videos/images, the four formats and the CADER role rows; return the manifest (also written to
    manifest.json). The same `rng` state gives the same files.

    train_dir: the media root, ``<out>/train``.
    rng: every random draw, in a fixed order (videos, images, tool rows, CADER role rows).
    n_train: training videos (each gets a CoT row, a direct-answer row and the CADER role rows).
    n_images: training images (a CoT row each).
    n_tool: tool-call rows per format (filtered out by the training readers).
    video: ``random_cued_spec``'s keyword arguments for every training video (default: its defaults).
    n_unseen: event-less videos with six direct-answer rows each (``add_unseen_rows``), drawn last so the rest of
        the mix is the same with any count.
    """
    specs, images = write_training_media(train_dir, rng, n_train, n_images, video or {})
    mix = MixRows()
    for index, item in enumerate(mix_items(specs, images, rng, n_tool)):
        add_cot_row(mix, index, item)
    for video_index, spec in enumerate(specs):
        add_direct_answer_row(mix, video_index, spec)
    role_rows, role_counts = write_cader_roles(train_dir, rng, specs)
    for index in range(n_unseen):
        spec = random_cued_spec(rng, f"unseen_{index:04d}", **(video or {}))
        spec = replace(spec, t_e=spec.t_s)   # the scene (and any decoy) as drawn, without the event
        write_video(spec, train_dir / "media" / "videos" / f"{spec.name}.mp4")
        add_unseen_rows(mix, index, spec)
    write_format_files(train_dir, mix)
    write_json(train_dir / CADER_ROLES_FILE, role_rows)
    manifest = mix_manifest(mix.counts, len(role_rows), role_counts)
    write_json(train_dir / "manifest.json", manifest)
    return manifest
