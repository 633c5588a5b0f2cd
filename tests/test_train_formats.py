"""Readers of the SFT formats and the tool-free filter, on tiny inline fixtures."""
import json

import pyarrow as pa
import pyarrow.parquet as pq
from cader.train.formats import FormatError, Sample, read_source
from cader.train.toolfree import filter_tool_free, tool_reason


def _split(items):
    items = list(items)
    return [x for x in items if isinstance(x, Sample)], [x for x in items if isinstance(x, FormatError)]


def test_longvt_parquet_parts_and_json_string_messages(tmp_path):
    as_list = [{"role": "system", "content": "sys"},
               {"role": "user", "content": [{"type": "video_url", "video_url": {"url": "file://media/a.mp4"}},
                                            {"type": "text", "text": "What happens?"}]},
               {"role": "assistant", "content": [{"type": "text", "text": "<think>x</think><answer>B</answer>"}]}]
    as_string = [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "media/b.jpg"}},
                                              {"type": "text", "text": "Q"}]},
                 {"role": "assistant", "content": "<answer>A</answer>"}]
    path = tmp_path / "longvt.parquet"
    pq.write_table(pa.table({"messages": [json.dumps(as_list), json.dumps(as_string)]}), path)
    samples, errors = _split(read_source("longvt", path, "longvt"))
    assert errors == []
    first, second = samples
    assert [t.role for t in first.turns] == ["system", "user", "assistant"]
    assert first.media == [{"type": "video", "path": "media/a.mp4"}]
    assert first.turns[1].parts[0]["type"] == "video" and first.turns[1].text == "What happens?"
    assert second.media == [{"type": "image", "path": "media/b.jpg"}]
    assert second.turns[-1].text == "<answer>A</answer>"
    assert first.sample_id == "longvt:0" and second.sample_id == "longvt:1"


def test_longvt_parquet_nested_messages_column(tmp_path):
    rows = [{"id": "r7", "messages": [{"role": "user", "content": "hi"},
                                      {"role": "assistant", "content": "<answer>C</answer>"}]}]
    path = tmp_path / "x.parquet"
    pq.write_table(pa.Table.from_pylist(rows), path)
    (sample,) = read_source("longvt", path, "lv")
    assert sample.sample_id == "lv:r7" and sample.turns[1].text == "<answer>C</answer>"


def test_video_r1_prompt_and_target(tmp_path):
    rows = [{"problem_id": 3, "problem": "Which colour?", "problem_type": "multiple choice",
             "options": ["A. red", "B. blue"], "process": "<think>It is blue.</think>",
             "solution": "<answer>B</answer>", "path": "media/v.mp4", "data_type": "video"},
            {"problem": "no target"}]
    path = tmp_path / "vr1.json"
    path.write_text(json.dumps(rows))
    samples, errors = _split(read_source("video_r1", path))
    (s,) = samples
    assert s.sample_id == "video_r1:3"
    assert s.media == [{"type": "video", "path": "media/v.mp4"}]
    assert "Which colour?" in s.turns[0].text and "A. red\nB. blue" in s.turns[0].text
    assert s.turns[1].text == "<think>It is blue.</think><answer>B</answer>"
    assert len(errors) == 1 and "row 1" in str(errors[0]) and "process" in str(errors[0])


def test_longvideo_reason_jsonl_flat_and_bad_line(tmp_path):
    path = tmp_path / "lvr.jsonl"
    path.write_text(json.dumps({"video": "media/l.mp4", "question": "Why?", "options": ["A. x", "B. y"],
                                "reasoning": "because", "answer": "A"}) + "\n{not json\n")
    samples, errors = _split(read_source("longvideo_reason", path))
    (s,) = samples
    assert s.turns[1].text == "<think>because</think><answer>A</answer>"
    assert s.media[0]["path"] == "media/l.mp4"
    assert len(errors) == 1 and "row 1" in str(errors[0])


def test_sharegpt_placeholders_system_and_errors(tmp_path):
    rows = [{"conversations": [{"from": "human", "value": "<video>Describe <image>"},
                               {"from": "gpt", "value": "<answer>D</answer>"}],
             "videos": ["v.mp4"], "images": ["i.png"], "system": "S"},
            {"conversations": [{"from": "human", "value": "<video>"}, {"from": "gpt", "value": ""}],
             "videos": ["v.mp4"]},
            {"conversations": [{"from": "human", "value": "<video><video>"}, {"from": "gpt", "value": "x"}],
             "videos": ["v.mp4"]},
            {"conversations": [{"from": "alien", "value": "x"}]}]
    path = tmp_path / "sg.json"
    path.write_text(json.dumps(rows))
    samples, errors = _split(read_source("sharegpt", path))
    (s,) = samples
    assert [t.role for t in s.turns] == ["system", "user", "assistant"]
    assert [p["type"] for p in s.turns[1].parts] == ["video", "text", "image"]
    reasons = [e.reason for e in errors]
    assert [e.row for e in errors] == [1, 2, 3]
    assert "empty assistant" in reasons[0] and "placeholders" in reasons[1] and "alien" in reasons[2]


def test_tool_filter_counts_per_source(tmp_path):
    rows = [{"conversations": [{"from": "human", "value": "q"}, {"from": "gpt", "value": "<answer>A</answer>"}]},
            {"conversations": [{"from": "human", "value": "q"},
                               {"from": "gpt", "value": "<tool_call>{}</tool_call>"},
                               {"from": "gpt", "value": "<answer>A</answer>"}]},
            {"conversations": [{"from": "human", "value": "q"}, {"from": "function_call", "value": "{}"},
                               {"from": "observation", "value": "r"}, {"from": "gpt", "value": "A"}]},
            {"conversations": [{"from": "human", "value": "q"}, {"from": "gpt", "value": "A"}], "tools": "[{}]"}]
    path = tmp_path / "sg.json"
    path.write_text(json.dumps(rows))
    samples = [s for s in read_source("sharegpt", path, "sg") if isinstance(s, Sample)]
    lv = tmp_path / "lv.parquet"
    msgs = [{"role": "user", "content": "q"},
            {"role": "assistant", "content": "<tool_response>r</tool_response><answer>B</answer>"}]
    pq.write_table(pa.table({"messages": [json.dumps(msgs)]}), lv)
    samples += [s for s in read_source("longvt", lv, "lv") if isinstance(s, Sample)]
    assert [tool_reason(s) for s in samples] == [None, "marker <tool_call>", "tool_role", "tools_declared",
                                                 "marker <tool_response>"]
    kept, dropped = filter_tool_free(samples)
    assert [s.sample_id for s in kept] == ["sg:0"]
    assert dropped == {"sg": 3, "lv": 1}
