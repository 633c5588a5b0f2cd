"""scripts/make_synthetic_data.py and cader.dev.synthetic: files parse, counts, videos, determinism."""

import json
import re
import subprocess
import sys
from pathlib import Path

import av
import numpy as np
import pytest
from cader.dev.synthetic.dataset import Counts, Frames, Timeline, make_synthetic_data
from cader.dev.synthetic.media import (
    BACKGROUND,
    EVENT_COLOURS,
    SCENE,
    VideoSpec,
    canonical_colour_options,
    clip_spec,
    colour_options,
    direct_answer_text,
    random_cued_spec,
    write_video,
)
from datasets import load_dataset
from PIL import Image

REPO = Path(__file__).resolve().parents[1]
SMALL = {
    "n_train": 8,
    "n_images": 4,
    "n_tool": 3,
    "n_eval": 7,
    "n_heldout": 6,
    "n_test": 7,
    # short videos with a 4 s scene and 1-2 s events keep the tests fast; the defaults are 128 / 16 / 1-6 s
    "eval_min_s": 8,
    "eval_max_s": 16,
    "train_s": 16,
    "scene_s": 4,
    "event_min_s": 1,
    "event_max_s": 2,
    "train_event_min_s": 1,
    "train_event_max_s": 2,
}
LIB = {
    "counts": Counts(**{k: v for k, v in SMALL.items()
                        if k in ("n_train", "n_images", "n_tool", "n_eval", "n_heldout", "n_test")}),
    "timeline": Timeline(eval_duration=(8, 16), train_duration=16, scene_len=4, event_len=(1, 2),
                         train_event_len=(1, 2)),
}
TOOL_MARKERS = re.compile(r"<tool_call>|<tool_response>|<tools>")


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    out = tmp_path_factory.mktemp("synthetic")
    make_synthetic_data(out, seed=3, **LIB)
    return out


def _load(path: Path, cache: Path):
    kind = "parquet" if path.suffix == ".parquet" else "json"
    return load_dataset(kind, data_files=str(path), split="train", cache_dir=str(cache))


def test_every_generated_table_parses_with_datasets(data, tmp_path):
    tables = [
        p
        for p in data.rglob("*")
        if p.suffix in (".json", ".jsonl", ".parquet") and p.name not in ("manifest.json", "summary.json")
    ]
    assert len(tables) >= 20
    for path in tables:
        assert len(_load(path, tmp_path)) >= 1, path


def _is_tool_row(row: dict) -> bool:
    """Independent re-implementation of the tool-call criterion the training loader must apply."""
    text = json.dumps(row)
    roles = re.findall(r'"(?:role|from)": "(\w+)"', text)
    tools = row.get("tools")
    # LLaMA-Factory's `tools` is a JSON string: "" and "[]" declare none
    declared = bool(json.loads(tools)) if isinstance(tools, str) and tools.strip() else bool(tools)
    return (
        bool(TOOL_MARKERS.search(text))
        or bool({"tool", "function_call", "observation"} & set(roles))
        or declared
    )


def test_training_manifest_counts_match_files_and_tool_rows(data, tmp_path):
    train = data / "train"
    manifest = json.loads((train / "manifest.json").read_text())
    assert set(manifest["sources"]) == {"longvt", "video_r1", "longvideo_reason", "sharegpt", "cader_roles"}
    for name, source in manifest["sources"].items():
        rows = [r for f in source["files"] for r in _load(train / f, tmp_path)]
        assert len(rows) == source["total"], name
        n_tool = 0 if name == "cader_roles" else SMALL["n_tool"]
        assert sum(_is_tool_row(r) for r in rows) == source["tool_call"] == n_tool, name
        assert source["clean"] == source["total"] - source["tool_call"] > 0
        direct = sum(_is_direct_row(r) for r in rows)
        if name == "cader_roles":   # its C.1 rows are on the scene clips, counted as a role
            assert direct == source["roles"]["clip_stage1"] == SMALL["n_train"]
            continue
        assert direct == source["direct_answer"], name
        # one per training video, in the formats that keep assistant text verbatim
        assert (direct > 0) == (name in ("longvt", "sharegpt")), name
    n_direct = sum(s["direct_answer"] for s in manifest["sources"].values())
    # one per training video, and six (one per letter) per event-less video: n_train // 12 (at least 1) by default
    assert n_direct == SMALL["n_train"] + 6 * max(1, SMALL["n_train"] // 12)


DIRECT_TARGET = re.compile(r"<think>\n\n</think>\n\n[A-F]")


def _is_direct_row(row: dict) -> bool:
    messages = row.get("messages") or row.get("conversations")
    if messages is None:
        return False
    if isinstance(messages, str):
        messages = json.loads(messages)
    final = messages[-1]
    text = final.get("value") or final.get("content")
    text = text if isinstance(text, str) else text[0]["text"]
    return bool(DIRECT_TARGET.fullmatch(text))


FIXTURES = REPO / "tests" / "fixtures"


def test_longvt_files_have_the_release_names_and_schema(data, tmp_path):
    """The synthetic LongVT files carry the release's names and exactly the fixture's `datasets` schema."""
    from cader.dev.synthetic.train_mix import LONGVT_FILES

    fixture = FIXTURES / "longvt_parquet"
    assert sorted(LONGVT_FILES) == sorted(p.name for p in fixture.glob("*.parquet"))
    for name in LONGVT_FILES:
        ds = _load(data / "train" / name, tmp_path)
        assert ds.features == _load(fixture / name, tmp_path).features, name
        assert len(ds) >= 1
        for row in ds:
            for m in row["messages"]:
                for part in m["content"]:
                    assert set(part) == {"type", "text", "image_url", "video_url"}
                    if part["type"] in ("video_url", "image_url"):
                        assert (data / "train" / part[part["type"]]["url"]).exists()
            if not _is_tool_row(row):
                final = row["messages"][-1]
                assert final["role"] == "assistant"
                assert re.fullmatch(
                    r"<think>.+</think><answer>[A-F]</answer>", final["content"][0]["text"], re.DOTALL
                ) or DIRECT_TARGET.fullmatch(final["content"][0]["text"])


def _json_rows(path: Path) -> list[dict]:
    text = path.read_text(encoding="utf-8")
    return [json.loads(x) for x in text.splitlines() if x.strip()] if path.suffix == ".jsonl" else json.loads(text)


def _field_types(rows: list[dict]) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for row in rows:
        for key, value in row.items():
            out.setdefault(key, set()).add(type(value).__name__)
    return out


@pytest.mark.parametrize(
    "synthetic, fixture",
    [
        ("video_r1_cot.json", "video_r1_cot/Video-R1-COT-165k.json"),
        ("longvideo_reason.jsonl", "longvideo_reason/train.jsonl"),
        ("sharegpt_conversations.json", "llamafactory_sharegpt/glaive_toolcall_en_demo.json"),
    ],
)
def test_json_layouts_match_the_release_fixtures(data, synthetic, fixture):
    """Same fields with the same JSON types as the fixture laid out like the release (extra media columns of
    sharegpt aside: the fixture file is text-only)."""
    mine, release = _field_types(_json_rows(data / "train" / synthetic)), _field_types(_json_rows(FIXTURES / fixture))
    extra = {"videos", "images"} if "sharegpt" in synthetic else set()
    assert set(mine) - extra == set(release)
    for key in release:
        assert mine[key] == release[key], key


def test_video_r1_and_longvideo_reason_fields(data, tmp_path):
    r1 = _load(data / "train" / "video_r1_cot.json", tmp_path)
    assert {"problem", "problem_type", "options", "process", "solution", "path", "data_type"} <= set(
        r1.column_names
    )
    assert {"video", "image"} == set(r1["data_type"])
    for row in r1:
        assert row["path"].startswith("./") and (data / "train" / row["path"]).exists()
        assert re.fullmatch(r"<answer>.+</answer>", row["solution"])
        assert "<think>" in row["process"]
        if row["problem_type"] == "multiple choice":
            letter = re.search(r"<answer>(.)</answer>", row["solution"]).group(1)
            assert letter in "ABCDEF"[: len(row["options"])]
            assert [o.split(". ", 1)[1] for o in row["options"]] == list(EVENT_COLOURS)  # fixed order
    reason = _load(data / "train" / "longvideo_reason.jsonl", tmp_path)
    for row in reason:
        assert isinstance(row["videos"], str) and (data / "train" / row["videos"]).exists()
        letter = re.fullmatch(r"<answer>([A-F])</answer>", row["answer"]).group(1)
        assert f"\n{letter}. " in row["problem"]


def test_sharegpt_placeholders_match_media(data, tmp_path):
    for name, key in (("sharegpt.json", "messages"), ("sharegpt_conversations.json", "conversations")):
        for row in _load(data / "train" / name, tmp_path):
            text = json.dumps(row[key])
            assert text.count("<video>") == len(row["videos"]) and text.count("<image>") == len(row["images"])
            for media in row["videos"] + row["images"]:
                assert (data / "train" / media).exists()


def _decode(path: Path) -> list[tuple[float, np.ndarray]]:
    with av.open(str(path)) as container:
        return [(float(f.time), f.to_ndarray(format="rgb24")) for f in container.decode(video=0)]


def _centre(frame: np.ndarray) -> np.ndarray:
    h, w, _ = frame.shape
    return frame[h // 2, w // 2].astype(int)


def test_videos_show_the_colour_only_inside_the_evidence_window(data):
    manifest = json.loads((data / "eval" / "manifest.json").read_text())
    checked = 0
    for bench in ("synthetic", "lvbench", "agentvidbench"):
        for truth in manifest["benchmarks"][bench]["samples"].values():
            frames = _decode(data / "eval" / truth["video"])
            assert len(frames) == round(truth["duration"] * truth["fps"])
            assert frames[-1][0] == pytest.approx(truth["duration"] - 1 / truth["fps"])
            t_s, t_e = truth["evidence_window"]
            s_s, s_e = truth["scene_window"]
            assert s_s + 1 <= t_s < t_e <= s_e - 1 and s_e - s_s == SMALL["scene_s"]
            assert SMALL["event_min_s"] <= t_e - t_s <= SMALL["event_max_s"]
            colour = np.array(EVENT_COLOURS[truth["colour"]])
            for t, frame in frames:
                distance_to_colour = np.abs(_centre(frame) - colour).max()
                if t_s <= t < t_e:
                    assert distance_to_colour < 25, (truth["video"], t)
                else:
                    decoy = truth["decoy_window"] or (0.0, 0.0)
                    ground = SCENE if s_s <= t < s_e or decoy[0] <= t < decoy[1] else BACKGROUND
                    assert np.abs(_centre(frame) - np.array(ground)).max() < 25, (truth["video"], t)
            checked += 1
    assert checked >= 7 + 7 + 6
    decoys = [t["decoy_window"] for b in manifest["benchmarks"].values() for t in b["samples"].values()]
    assert 0 < sum(d is not None for d in decoys) < len(decoys)   # the CLI default gives about half a decoy


def test_training_videos_show_their_event_for_the_training_length(data):
    # the training events' own range (train_event_len), not the evaluation one: every coloured run is one
    # contiguous stretch of whole seconds inside it
    lengths = set()
    for video in sorted((data / "train" / "media" / "videos").glob("train_*.mp4")):
        frames = _decode(video)
        fps = round(1 / (frames[1][0] - frames[0][0]))
        coloured = [i for i, (_, f) in enumerate(frames) if min(
            np.abs(_centre(f) - np.array(rgb)).max() for rgb in EVENT_COLOURS.values()) < 25]
        assert coloured == list(range(coloured[0], coloured[0] + len(coloured))), video
        assert SMALL["train_event_min_s"] <= len(coloured) / fps <= SMALL["train_event_max_s"], video
        lengths.add(len(coloured) / fps)
    assert len(lengths) > 1   # drawn per video


def test_event_less_videos_show_no_colour_and_train_every_letter_alike(data, tmp_path):
    # frames that cannot tell the letters apart: Stage 1's direct answer is each letter once (add_unseen_rows)
    videos = sorted((data / "train" / "media" / "videos").glob("unseen_*.mp4"))
    assert len(videos) == max(1, SMALL["n_train"] // 12)
    for video in videos:
        assert not [t for t, f in _decode(video) if min(
            np.abs(_centre(f) - np.array(rgb)).max() for rgb in EVENT_COLOURS.values()) < 25], video
    from cader.dev.synthetic.train_mix import LONGVT_FILES

    rows = [r for f in ("sharegpt.json", *LONGVT_FILES) for r in _load(data / "train" / f, tmp_path)]
    letters = []
    for row in rows:
        if _is_direct_row(row) and "unseen_" in json.dumps(row):
            final = row["messages"][-1]["content"]
            letters.append((final if isinstance(final, str) else "".join(p["text"] or "" for p in final))[-1])
    assert sorted(letters) == sorted("ABCDEF" * len(videos))


def test_training_images_show_their_answer_colour(data, tmp_path):
    for row in _load(data / "train" / "video_r1_cot.json", tmp_path):
        if row["data_type"] != "image":
            continue
        letter = re.search(r"<answer>(.)</answer>", row["solution"]).group(1)
        colour = row["options"]["ABCDEF".index(letter)].split(". ", 1)[1]
        pixel = _centre(np.asarray(Image.open(data / "train" / row["path"]).convert("RGB")))
        assert np.abs(pixel - np.array(EVENT_COLOURS[colour])).max() < 25


def test_write_video_frame_count_and_times(tmp_path):
    spec = VideoSpec("x", duration=5.0, fps=8, t_s=2.0, t_e=3.0, colour="blue", width=32, height=32)
    frames = _decode(write_video(spec, tmp_path / "x.mp4"))
    assert [t for t, _ in frames] == pytest.approx([i / 8 for i in range(40)])
    coloured = [t for t, f in frames if np.abs(_centre(f) - np.array(EVENT_COLOURS["blue"])).max() < 25]
    assert coloured == pytest.approx([2.0 + i / 8 for i in range(8)])


def test_cued_specs_put_a_brief_event_inside_one_scene():
    rng = np.random.default_rng(1)
    slots = set()
    for i in range(200):
        spec = random_cued_spec(rng, f"v{i}", (128, 128), 16, 2.0, fps=4)
        assert spec.duration == 128 and spec.scene_e - spec.scene_s == 16 and spec.scene_s % 16 == 0
        assert spec.scene_s + 1 <= spec.t_s and spec.t_e <= spec.scene_e - 1 and spec.t_e - spec.t_s == 2.0
        assert spec.t_s == int(spec.t_s)   # whole seconds
        slots.add(spec.scene_s)
    assert slots == {16.0 * k for k in range(8)}
    assert random_cued_spec(rng, "x", (40, 40), 16, 2.0).duration == 32   # whole scenes
    with pytest.raises(ValueError, match="scene"):
        random_cued_spec(rng, "x", (128, 128), 3, 2.0)


def test_cued_specs_draw_whole_second_event_lengths_from_a_range():
    rng = np.random.default_rng(2)
    lengths = set()
    for i in range(300):
        spec = random_cued_spec(rng, f"v{i}", (128, 128), 16, (1, 6), fps=2)
        assert spec.scene_s + 1 <= spec.t_s and spec.t_e <= spec.scene_e - 1
        lengths.add(spec.t_e - spec.t_s)
    assert lengths == {1.0, 2.0, 3.0, 4.0, 5.0, 6.0}
    # the range's longest event must fit the scene, whichever length a video draws
    with pytest.raises(ValueError, match="scene"):
        random_cued_spec(rng, "x", (128, 128), 16, (1, 15))


def test_clip_spec_shifts_scene_and_event_or_drops_them():
    spec = VideoSpec("v", 128.0, 4, 37.5, 39.5, "red", scene_s=32.0, scene_e=48.0)
    pos = clip_spec(spec, "p", 32.0, 48.0)
    assert (pos.duration, pos.t_s, pos.t_e, pos.scene_s, pos.scene_e) == (16.0, 5.5, 7.5, 0.0, 16.0)
    neg = clip_spec(spec, "n", 64.0, 80.0)
    assert neg.event_frames == (0, 0) and neg.scene_frames == (0, 0)
    part = clip_spec(spec, "h", 24.0, 36.0)   # half the scene, no event
    assert part.event_frames == (0, 0) and (part.scene_s, part.scene_e) == (8.0, 12.0)


def test_cader_role_rows_use_the_app_c_prompts_and_the_right_clips(data, tmp_path):
    from cader.evaluate.method.prompts import GROUNDING_SYSTEM, VERIFIER_SYSTEM

    manifest = json.loads((data / "train" / "manifest.json").read_text())
    roles = manifest["sources"]["cader_roles"]["roles"]
    assert roles["propose"] == roles["verify_yes"] == roles["verify_no"] == roles["answer"] == SMALL["n_train"]
    rows = json.loads((data / "train" / "cader_roles.json").read_text())
    kinds = {"propose": 0, "reflect": 0, "yes": 0, "no": 0}
    has_decoy = {}
    for row in rows:
        system, user, answer = (m["content"] for m in row["messages"])
        assert [m["role"] for m in row["messages"]] == ["system", "user", "assistant"]
        assert user.startswith("<video>") and len(row["videos"]) == 1 and not row["images"]
        assert answer.startswith("<think>\n\n</think>\n\n")
        target = answer.removeprefix("<think>\n\n</think>\n\n")
        video = row["videos"][0]
        frames = _decode(data / "train" / video)
        coloured = [t for t, f in frames if np.abs(_centre(f) - np.array(BACKGROUND)).max() >= 25
                    and np.abs(_centre(f) - np.array(SCENE)).max() >= 25]
        if system == GROUNDING_SYSTEM:
            window = [float(x) for x in re.fullmatch(r'"relevant_windows": \[\[(\d+), (\d+)\]\]', target).groups()]
            name = re.fullmatch(r"media/videos/(train_\d+)\.mp4", video).group(1)
            pos = _decode(data / "train" / "media" / "clips" / f"{name}_pos.mp4")
            assert window[1] - window[0] == SMALL["scene_s"] and len(pos) == SMALL["scene_s"] * 2   # 2 fps by default
            # the target window is the light scene that holds the event; light outside it is the decoy scene
            light = [t for t, f in frames if np.abs(_centre(f) - np.array(BACKGROUND)).max() >= 25]
            assert window[0] <= min(coloured) and max(coloured) < window[1]
            decoy = [t for t in light if not window[0] <= t < window[1]]
            assert not decoy or max(decoy) - min(decoy) < SMALL["scene_s"]   # one scene-length decoy at most
            has_decoy[name] = bool(decoy)
            if "tried" in user.lower():
                kinds["reflect"] += 1
                tried = [[float(a), float(b)] for a, b in re.findall(r"\[(\d+), (\d+)\]", user.split("tried")[1])]
                if decoy:   # a decoy video's reflection row names the decoy as the failed window
                    assert tried == [[min(decoy) // SMALL["scene_s"] * SMALL["scene_s"],
                                      min(decoy) // SMALL["scene_s"] * SMALL["scene_s"] + SMALL["scene_s"]]], user
            else:
                kinds["propose"] += 1
        elif user.startswith("<video>Does this video clip contain relevant visual evidence"):   # C.3
            assert system == VERIFIER_SYSTEM
            assert target in ("Yes", "No")
            assert bool(coloured) == (target == "Yes"), video   # Yes exactly on the clip that shows the event
            kinds[target.lower()] += 1
        else:
            assert coloured and video.endswith("_pos.mp4")
            assert re.fullmatch(r"(<answer>)?[A-F](</answer>)?", target)
    assert kinds == {"propose": SMALL["n_train"], "reflect": roles["reflect"], "yes": SMALL["n_train"],
                     "no": SMALL["n_train"]}
    # a reflection row for every decoy video, and for every 2nd video without one
    assert 0 < sum(has_decoy.values()) < len(has_decoy) == SMALL["n_train"]
    assert roles["reflect"] == sum(d or int(n.split("_")[1]) % 2 == 0 for n, d in has_decoy.items())


def test_colour_options_contain_answer_once_and_respect_limits():
    rng = np.random.default_rng(0)
    for n in (2, 4, 6, 26):
        options, letter = colour_options(rng, "green", n)
        assert len(set(options)) == n and options.count("green") == 1
        assert options["ABCDEFGHIJKLMNOPQRSTUVWXYZ".index(letter)] == "green"
    with pytest.raises(ValueError):
        colour_options(rng, "green", 27)


def test_canonical_options_fix_the_letter_per_colour():
    for k, colour in enumerate(EVENT_COLOURS):
        options, letter = canonical_colour_options(colour)
        assert options == list(EVENT_COLOURS) and letter == "ABCDEF"[k]
    with pytest.raises(ValueError):
        canonical_colour_options("white")


def test_direct_answer_target_continues_the_thinking_off_prefill():
    """The direct-answer target must be exactly what follows Stage 1's prompt (enable_thinking=False)."""
    import jinja2
    from cader.vlm.chat_template import QWEN3_VL_CHAT_TEMPLATE, add_thinking_switch

    # the exported template: the tiny base template (which, like the released Instruct one, ignores the flag) plus
    # the Qwen3 switch that training adds
    template = jinja2.Environment().from_string(add_thinking_switch(QWEN3_VL_CHAT_TEMPLATE))
    user = [{"role": "user", "content": "Q"}]
    stage1 = template.render(messages=user, add_generation_prompt=True, enable_thinking=False)
    trained = template.render(
        messages=user + [{"role": "assistant", "content": direct_answer_text("C")}], add_generation_prompt=False
    )
    assert trained == stage1 + "C<|im_end|>\n"


def test_synthetic_benchmark_uses_the_fixed_option_order(data):
    for split in ("test", "heldout"):
        rows = [json.loads(x) for x in (data / "eval" / "synthetic" / f"{split}.jsonl").read_text().splitlines()]
        assert rows
        for row in rows:
            assert row["options"] == list(EVENT_COLOURS)
            assert row["options"]["ABCDEF".index(row["answer"])] == row["colour"]


@pytest.mark.slow
def test_cli_is_deterministic_by_seed(data, tmp_path):
    args = [f"--{k}={v}" for k, v in SMALL.items()]
    subprocess.run(
        [
            sys.executable,
            str(REPO / "scripts" / "make_synthetic_data.py"),
            "--out",
            str(tmp_path / "a"),
            "--seed",
            "3",
            *args,
        ],
        check=True,
        capture_output=True,
        cwd=tmp_path,
    )
    tables = sorted(
        p.relative_to(data) for p in data.rglob("*") if p.suffix in (".json", ".jsonl", ".parquet")
    )
    assert tables == sorted(
        p.relative_to(tmp_path / "a")
        for p in (tmp_path / "a").rglob("*")
        if p.suffix in (".json", ".jsonl", ".parquet")
    )
    for rel in tables:
        assert (data / rel).read_bytes() == (tmp_path / "a" / rel).read_bytes(), rel
    make_synthetic_data(tmp_path / "b", seed=4, **LIB)
    assert (data / "eval" / "manifest.json").read_bytes() != (
        tmp_path / "b" / "eval" / "manifest.json"
    ).read_bytes()


def test_rejects_odd_frame_sizes(tmp_path):
    with pytest.raises(ValueError, match="even"):
        make_synthetic_data(tmp_path, frames=Frames(width=95))


@pytest.mark.slow
def test_default_size_is_small(tmp_path):
    # (how long it takes is the suite's business, not an assertion: tests run beside the background main job)
    summary = make_synthetic_data(tmp_path)
    assert sum(p.stat().st_size for p in tmp_path.rglob("*") if p.is_file()) < 10 * 2**20
    assert summary["eval"]["synthetic_heldout"] == 240 and summary["train"]["longvt"]["tool_call"] == 3
