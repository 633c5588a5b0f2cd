"""LLaMA-Factory dataset_info.json entries: file, formatting, columns and tags honoured as its loader does
(tests/fixtures/llamafactory_dataset_info/PROVENANCE.md)."""
import json
from pathlib import Path

import pytest
from cader.train.dataset_info import DatasetInfoError, SharegptAttr, attr_from_entry, load_entry
from cader.train.formats import FormatError, Sample, parse_row

DATA = Path(__file__).resolve().parent / "fixtures" / "llamafactory_dataset_info"


def read(dataset: str) -> list:
    path, attr = load_entry(DATA, dataset)
    rows = json.loads(path.read_text()) if path.suffix == ".json" else [
        json.loads(line) for line in path.read_text().splitlines()]
    return [parse_row("sharegpt", row, i, dataset, path, attr) for i, row in enumerate(rows)]


def shape(sample: Sample) -> list[tuple[str, str]]:
    return [(t.role, "".join(p["text"] if p["type"] == "text" else f"<{p['type']}:{p['path']}>" for p in t.parts))
            for t in sample.turns]


def test_defaults_are_llamafactorys():
    assert attr_from_entry({"formatting": "sharegpt"}) == SharegptAttr(
        messages="conversations", system=None, tools=None, images=None, videos=None, audios=None,
        role_tag="from", content_tag="value", user_tag="human", assistant_tag="gpt",
        observation_tag="observation", function_tag="function_call", system_tag="system")
    # with `tags`, an unnamed tag is unset; with `columns`, an unnamed column is unset (messages included)
    partial = attr_from_entry({"formatting": "sharegpt", "columns": {"images": "imgs"}, "tags": {"role_tag": "r"}})
    assert partial.messages is None and partial.images == "imgs" and partial.role_tag == "r"
    assert partial.content_tag is None and partial.system_tag is None


def test_every_renamed_column_and_tag_is_honoured():
    system_turn, column_system, tools, assistant_first, default_tags = read("cader_custom_tags")
    assert shape(system_turn) == [("system", "You watch videos closely."),
                                  ("user", "<video:clips/ball.mp4>What colour is the ball?"),
                                  ("assistant", "<think>The ball is red in every frame.</think><answer>red</answer>")]
    assert shape(column_system)[0] == ("system", "Answer with a number.")
    assert [t.role for t in column_system.turns] == ["system", "user", "assistant", "user", "assistant"]
    assert column_system.media == [{"type": "image", "path": "pictures/table.png"}]
    assert [t.role for t in tools.turns] == ["user", "tool", "tool", "assistant"]
    assert tools.meta["tools"][0]["name"] == "clock"
    assert isinstance(assistant_first, FormatError) and "turn 0" in str(assistant_first)
    assert isinstance(default_tags, FormatError) and "'human'" in str(default_tags)


def test_the_openai_style_entry_and_an_unmapped_column():
    with_system, unmapped_images = read("cader_openai_style")
    assert shape(with_system)[0] == ("system", "Reply in one word.")
    assert with_system.media == [{"type": "video", "path": "clips/car.mp4"}]
    assert unmapped_images.media == []          # its `images` key is no column of the entry


def test_tags_without_a_system_tag_make_a_leading_system_turn_abnormal():
    abnormal, plain = read("cader_no_system_tag")
    assert isinstance(abnormal, FormatError) and "role='system'" in str(abnormal)
    assert [t.role for t in plain.turns] == ["user", "assistant"]


def test_no_columns_no_tags_reads_conversations_and_nothing_else():
    no_system, unmapped_image = read("cader_defaults")
    assert [t.role for t in no_system.turns] == ["user", "assistant"]      # its `system` key is not read
    assert isinstance(unmapped_image, FormatError) and "<image>" in str(unmapped_image)


@pytest.mark.parametrize("dataset,named", [("cader_alpaca", "alpaca"), ("cader_hub", "hf_hub_url"),
                                           ("nope", "no data set 'nope'")])
def test_entries_this_reader_cannot_use_are_refused_by_name(dataset, named):
    with pytest.raises(DatasetInfoError, match=named):
        load_entry(DATA / "dataset_info.json", dataset)


def test_a_source_named_by_its_entry_reads_through_the_data_module(tmp_path):
    from cader.train.datamodule import SFTDataModule, Source, SourceError

    source = Source("custom", "sharegpt", dataset_info=str(DATA), dataset="cader_custom_tags")
    dm = SFTDataModule([source], plan_cache_dir=str(tmp_path / "cache"), report_dir=str(tmp_path))
    assert dm.source_path(source) == DATA / "custom_tags.json"
    read_back = dm.read_all()["custom"]
    assert read_back.n_rows == 5 and read_back.tool_dropped == 1 and len(read_back.errors) == 2
    assert len(read_back.rows) == 2
    assert dm.source_format_key(source).startswith("sharegpt:{") and "answerer" in dm.source_format_key(source)
    bad = SFTDataModule([Source("hub", "sharegpt", dataset_info=str(DATA), dataset="cader_hub")],
                        plan_cache_dir=str(tmp_path / "cache2"), report_dir=str(tmp_path / "r2"))
    with pytest.raises(SourceError, match="source 'hub'.*hf_hub_url"):
        bad.read_all()
