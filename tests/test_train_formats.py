"""Readers of the SFT formats on fixtures laid out as the releases (tests/fixtures/*/PROVENANCE.md), compared with
what each release's official loader makes of the same rows; plus the tool-free filter and media-path confinement.

The `official_*` helpers restate each official reading rule (cited in the fixture's PROVENANCE.md) independently of
cader.train.formats, on the rows as HF `datasets` loads them.
"""
import json
from pathlib import Path

import pytest
from cader.train.formats import (
    FormatError,
    MediaPathError,
    Sample,
    confined_media_path,
    declared_tools,
    read_source,
)
from cader.train.toolfree import filter_tool_free, tool_reason
from datasets import Dataset

FIXTURES = Path(__file__).resolve().parent / "fixtures"
LONGVT = FIXTURES / "longvt_parquet"
LONGVT_FILES = ["longvt_sft_videor1_165k5.parquet", "longvt_sft_longvideoreason_5k2.parquet",
                "longvt_sft_llavacot_54k5.parquet", "longvt_sft_openvlthinker_2k8.parquet",
                "longvt_sft_wemath_602.parquet"]
VIDEO_R1 = FIXTURES / "video_r1_cot" / "Video-R1-COT-165k.json"
LVR = FIXTURES / "longvideo_reason" / "train.jsonl"
SHAREGPT = FIXTURES / "llamafactory_sharegpt"


def _split(items):
    items = list(items)
    return [x for x in items if isinstance(x, Sample)], [x for x in items if isinstance(x, FormatError)]


def _parts(sample: Sample) -> list[list[tuple]]:
    return [[(p["type"], p.get("text", p.get("path"))) for p in t.parts] for t in sample.turns]


# ---- LongVT parquet: lmms-engine's vision dataset ----

def official_longvt(row: dict) -> tuple[list[str], list[list[tuple]]]:
    """(roles, parts) as lmms-engine reads a row: the part's type decides, media by their url, else text."""
    roles, parts = [], []
    for message in row["messages"]:
        roles.append(message["role"])
        out = []
        for content in message["content"]:
            if content["type"] == "image_url":
                out.append(("image", content["image_url"]["url"]))
            elif content["type"] == "video_url":
                out.append(("video", content["video_url"]["url"]))
            else:
                out.append(("text", content["text"]))
        parts.append(out)
    return roles, parts


@pytest.mark.parametrize("name", LONGVT_FILES)
def test_longvt_release_file_reads_as_lmms_engine_reads_it(name):
    rows = list(Dataset.from_parquet(str(LONGVT / name)))
    samples, errors = _split(read_source("longvt", LONGVT / name, "lv"))
    assert errors == [] and len(samples) == len(rows) >= 1
    for row, sample in zip(rows, samples):
        roles, parts = official_longvt(row)
        assert [t.role for t in sample.turns] == roles
        assert _parts(sample) == parts


def test_longvt_fixture_has_the_release_schema():
    """Written by `datasets`: every part carries type, text, image_url, video_url; the absent ones are null."""
    for name in LONGVT_FILES:
        ds = Dataset.from_parquet(str(LONGVT / name))
        assert ds.column_names == ["messages"]
        for row in ds:
            for message in row["messages"]:
                for part in message["content"]:
                    assert set(part) == {"type", "text", "image_url", "video_url"}
                    present = {k for k in ("text", "image_url", "video_url") if part[k] is not None}
                    assert present == {"text" if part["type"] == "text" else part["type"]}


def test_longvt_tool_free_files_keep_every_row():
    for name in LONGVT_FILES:
        samples, errors = _split(read_source("longvt", LONGVT / name, name))
        kept, dropped = filter_tool_free(samples)
        assert errors == [] and len(kept) == len(samples) and not dropped


def test_longvt_string_content_and_json_string_messages_are_also_read(tmp_path):
    # not in the release; accepted as other lmms-engine forks do
    import pyarrow as pa
    import pyarrow.parquet as pq

    msgs = [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "file://media/b.jpg"}},
                                         {"type": "text", "text": "Q"}]},
            {"role": "assistant", "content": "<answer>A</answer>"}]
    path = tmp_path / "x.parquet"
    pq.write_table(pa.table({"messages": [json.dumps(msgs)]}), path)
    (s,) = read_source("longvt", path)
    assert s.media == [{"type": "image", "path": "media/b.jpg"}] and s.turns[-1].text == "<answer>A</answer>"


def test_longvt_audio_part_is_its_own_counted_kind(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    msgs = [{"role": "user", "content": [{"type": "audio_url", "audio_url": {"url": "a.wav"}}]},
            {"role": "assistant", "content": [{"type": "text", "text": "x"}]}]
    path = tmp_path / "x.parquet"
    pq.write_table(pa.Table.from_pylist([{"messages": msgs}]), path)
    (err,) = read_source("longvt", path)
    assert isinstance(err, FormatError) and err.kind == "audio" and "row 0" in str(err)


# ---- Video-R1 JSON: Video-R1's sft_video.py ----

def official_video_r1(row: dict) -> tuple[str, str, str, str]:
    """(media type, media path under Video-R1-data/, question, target) as sft_video.py builds them."""
    if row["problem_type"] == "multiple choice":
        question = row["problem"] + "Options:\n"
        for op in row["options"]:
            question += op + "\n"
    else:
        question = row["problem"]
    full_path = "/ROOT/Video-R1-data" + row["path"][1:]
    return row["data_type"], full_path.removeprefix("/ROOT/Video-R1-data/"), question, \
        row["process"] + "\n" + row["solution"]


def test_video_r1_release_reads_as_its_sft_script_reads_it():
    rows = list(Dataset.from_json(str(VIDEO_R1)))
    samples, errors = _split(read_source("video_r1", VIDEO_R1, "vr1"))
    assert errors == [] and len(samples) == len(rows) == 5
    for row, sample in zip(rows, samples):
        kind, path, question, target = official_video_r1(row)
        user, assistant = sample.turns
        assert user.media == [{"type": kind, "path": path}]
        assert user.parts[0]["type"] == kind  # media first, then the text, as sft_video.py orders them
        assert user.text.startswith(question) and len(user.text) > len(question)
        assert assistant.text == target
        assert sample.sample_id == f"vr1:{row['problem_id']}"
        assert sample.meta["problem_type"] == row["problem_type"]


def test_video_r1_rejects_rows_its_script_cannot_build(tmp_path):
    good = json.loads(VIDEO_R1.read_text())[0]
    rows = [dict(good, problem_type="yes/no"), {k: v for k, v in good.items() if k != "process"},
            dict(good, options=[]), dict(good, data_type="audio"), dict(good, process="  ")]
    path = tmp_path / "Video-R1-COT-165k.json"
    path.write_text(json.dumps(rows))
    samples, errors = _split(read_source("video_r1", path))
    assert samples == [] and [e.row for e in errors] == [0, 1, 2, 3, 4]
    assert "problem_type" in errors[0].reason and "process" in errors[1].reason
    assert "option" in errors[2].reason and "data_type" in errors[3].reason and "process" in errors[4].reason


# ---- LongVideo-Reason JSONL: Long-RL's reader ----

def test_longvideo_reason_release_reads_as_long_rl_reads_it():
    rows = list(Dataset.from_json(str(LVR)))
    samples, errors = _split(read_source("longvideo_reason", LVR, "lvr"))
    assert errors == [] and len(samples) == len(rows) == 3
    for row, sample in zip(rows, samples):
        user, assistant = sample.turns
        assert user.media == [{"type": "video", "path": row["videos"]}]  # os.path.join(video_dir, videos)
        assert user.text.startswith(row["problem"])                      # options live inside `problem`
        assert assistant.text == f"<think>{row['reasoning']}</think>{row['answer']}"
        assert sample.meta["problem_type"] == row["problem_type"]


def test_longvideo_reason_bare_letter_and_bad_line(tmp_path):
    path = tmp_path / "train.jsonl"
    path.write_text(json.dumps({"videos": "longvila_videos/l.mp4", "problem": "Why?\nA. x\nB. y",
                                "reasoning": "because", "answer": "A"}) + "\n{not json\n"
                    + json.dumps({"videos": ["a.mp4", "b.mp4"], "problem": "Q", "answer": "B"}) + "\n")
    samples, errors = _split(read_source("longvideo_reason", path))
    (s,) = samples
    assert s.turns[1].text == "<think>because</think><answer>A</answer>"
    assert [e.row for e in errors] == [1, 2] and "one video" in errors[1].reason


# ---- LLaMA-Factory sharegpt: its converter ----

def official_sharegpt(row: dict, tags: dict) -> dict | None:
    """What LLaMA-Factory's SharegptDatasetConverter keeps of a row (None: skipped as abnormal)."""
    role, content = tags.get("role_tag", "from"), tags.get("content_tag", "value")
    user, assistant = tags.get("user_tag", "human"), tags.get("assistant_tag", "gpt")
    odd, even = (user, "observation"), (assistant, "function_call")
    messages = row[tags["messages"]]
    system = ""
    if messages and messages[0][role] == "system":
        system, messages = messages[0][content], messages[1:]
    for i, m in enumerate(messages):
        if m[role] not in (odd, even)[i % 2]:
            return None
    if len(messages) % 2:
        return None
    return {"system": system, "roles": [m[role] for m in messages], "tools": row.get("tools") or ""}


def _dataset_info():
    return json.loads((SHAREGPT / "dataset_info.json").read_text())


@pytest.mark.parametrize("name", ["glaive_toolcall_en_demo", "mllm_demo", "mllm_video_demo"])
def test_sharegpt_files_read_as_llamafactory_converts_them(name):
    entry = _dataset_info()[name]
    tags = {**entry.get("tags", {}), "messages": entry["columns"]["messages"]}
    path = SHAREGPT / entry["file_name"]
    rows = json.loads(path.read_text())
    out = list(read_source("sharegpt", path, name))
    assert len(out) == len(rows)
    names = {"human": "user", "user": "user", "gpt": "assistant", "assistant": "assistant",
             "function_call": "tool", "observation": "tool"}
    for row, got in zip(rows, out):
        want = official_sharegpt(row, tags)
        if want is None:
            assert isinstance(got, FormatError) and got.kind == "format"
            continue
        assert isinstance(got, Sample), got
        roles = [t.role for t in got.turns]
        assert roles == (["system"] if want["system"] else []) + [names[r] for r in want["roles"]]
        if want["system"]:
            assert got.turns[0].text == want["system"]
        assert bool(got.meta.get("tools")) == bool(json.loads(want["tools"] or "[]"))
        # each of these rows has one media kind, consumed in placeholder order
        assert [m["path"] for m in got.media] == row.get("images", []) + row.get("videos", [])


def test_sharegpt_empty_tool_lists_declare_no_tools():
    path = SHAREGPT / "glaive_toolcall_en_demo.json"
    rows = json.loads(path.read_text())
    samples, errors = _split(read_source("sharegpt", path, "glaive"))
    kept, dropped = filter_tool_free(samples)
    # rows 0, 1, 4: "[]" or "" and no tool turns -> kept; 2 and 3 declare a tool; 5 is skipped as abnormal
    assert [s.sample_id for s in kept] == ["glaive:0", "glaive:1", "glaive:4"]
    assert dropped == {"glaive": 2} and [e.row for e in errors] == [5]
    assert [tool_reason(s) for s in samples] == [None, None, "tools_declared", "tools_declared", None]
    assert [declared_tools(r["tools"]) == [] for r in rows] == [True, True, False, False, True, True]


def test_sharegpt_multi_turn_row_keeps_every_assistant_turn_and_media_order():
    (first, second) = read_source("sharegpt", SHAREGPT / "mllm_demo.json", "mm")
    assert [t.role for t in first.turns] == ["user", "assistant", "user", "assistant"]
    assert [t.text for t in first.turns if t.role == "assistant"] == ["A green apple.",
                                                                      "A knife next to the same apple."]
    assert [p["type"] for p in first.turns[2].parts] == ["text", "image"]  # placeholder at the end of turn 3
    assert len(second.media) == 1


@pytest.mark.parametrize("name", ["mllm_audio_demo.json", "mllm_video_audio_demo.json"])
def test_sharegpt_audio_rows_are_skipped_and_counted(name):
    (err,) = read_source("sharegpt", SHAREGPT / name)
    assert isinstance(err, FormatError) and err.kind == "audio"


def test_sharegpt_malformed_rows_name_file_and_row(tmp_path):
    rows = [{"conversations": [{"from": "human", "value": "<video>"}, {"from": "gpt", "value": ""}],
             "videos": ["v.mp4"]},
            {"conversations": [{"from": "human", "value": "<video><video>"}, {"from": "gpt", "value": "x"}],
             "videos": ["v.mp4"]},
            {"conversations": [{"from": "alien", "value": "x"}, {"from": "gpt", "value": "x"}]},
            {"conversations": [{"from": "human", "value": "q"}, {"from": "gpt", "value": "a"}], "tools": "{oops"}]
    path = tmp_path / "sg.json"
    path.write_text(json.dumps(rows))
    samples, errors = _split(read_source("sharegpt", path))
    assert samples == [] and [e.row for e in errors] == [0, 1, 2, 3]
    assert "empty assistant" in errors[0].reason and "placeholders" in errors[1].reason
    assert "alien" in errors[2].reason and "tools" in errors[3].reason and str(path) in str(errors[3])


# ---- media paths stay inside the media root ----

@pytest.mark.parametrize("path, norm", [("videor1_0/a.mp4", "videor1_0/a.mp4"), ("./x/../y/b.png", "y/b.png"),
                                        ("a//b.mp4", "a/b.mp4")])
def test_media_paths_inside_the_root_are_normalised(path, norm):
    assert confined_media_path(path) == norm


@pytest.mark.parametrize("path", ["/etc/passwd", "../secret.mp4", "a/../../b.mp4", "~/v.mp4", "C:/v.mp4",
                                  "http://host/v.mp4", "file:///abs/v.mp4", "", "..\\up.mp4"])
def test_media_paths_leaving_the_root_are_refused(path):
    with pytest.raises(MediaPathError):
        confined_media_path(path)
