"""The Arrow-backed mix against the mix it replaced (every row a Python object; scripts/bench/dict_mix.py keeps it):
the same training batches and losses on the synthetic mix under the shipped tiny config, the same rows, row errors
and whole-file errors for every release format, the same ratio draws; and a rank holds tables, not rows."""
import importlib.util
import json
import random
from pathlib import Path

import numpy as np
import pytest
import torch
from cader.train.datamodule import BatchCollator, PlannedDataset, SFTDataModule, Source, SourceError
from cader.train.formats import FormatError, sample_from_json
from cader.train.mix_index import PlannedRows, ratio_rows
from torch.utils.data import DataLoader

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO / "tests" / "fixtures"
RELEASE_FILES = [("longvt", p) for p in sorted((FIXTURES / "longvt_parquet").glob("*.parquet"))] + [
    ("video_r1", FIXTURES / "video_r1_cot" / "Video-R1-COT-165k.json"),
    ("longvideo_reason", FIXTURES / "longvideo_reason" / "train.jsonl"),
    *[("sharegpt", p) for p in sorted((FIXTURES / "llamafactory_sharegpt").glob("*.json"))
      if p.name != "dataset_info.json"]]


def _dict_mix():
    module = importlib.import_module("cader.scripts.bench.dict_mix")
    return module


@pytest.fixture(scope="module")
def shipped_mix(tmp_path_factory):
    """The synthetic mix as `python scripts/make_synthetic_data.py --out DIR --n_train 16` writes it."""
    from cader.dev.synthetic.dataset import Counts, make_synthetic_data

    out = tmp_path_factory.mktemp("mix_arrow")
    make_synthetic_data(out, counts=Counts(n_train=16))
    return out / "train"


def _shipped_data_config(model_dir, train_dir, tmp_path) -> dict:
    """configs/train/cot_mix_tiny.yaml's data section, pointed at `train_dir`."""
    from cader.train.cli import parse_sft_args

    data = parse_sft_args(["--config", "cot_mix_tiny.yaml"]).data.as_dict()
    data["sources"] = [dict(s, path=str(train_dir / Path(s["path"]).name)) for s in data["sources"]]
    return {**data, "processor_path": str(model_dir), "report_dir": str(tmp_path / "report"),
            "plan_cache_dir": str(tmp_path / "cache")}


def _dict_batches(dm: SFTDataModule, dict_mix) -> list[dict]:
    """The batches the mix before trained on: its items, then the same sampler, encoder and collator."""
    from cader.train.collate import LengthGroupedBatchSampler

    sources = [dict_mix.DictSource(s.name, s.format, dm.source_path(s), dm.source_media_root(s), s.ratio)
               for s in dm.sources]
    items, _ = dict_mix.build_items(sources, dm.encoder, dm.budget, seed=dm.seed)
    sampler = LengthGroupedBatchSampler([p.num_tokens for p in items], dm.batch_size, seed=dm.seed,
                                        mega=dm.mega_batch)
    loader = DataLoader(PlannedDataset(items, dm.encoder), batch_sampler=sampler,
                        collate_fn=BatchCollator(dm.encoder.pad_id))
    return list(loader)


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_the_arrow_mix_trains_the_same_batches_and_losses(tiny_model_dir, shipped_mix, tmp_path):
    from cader.train.pixels import normalize_pixels
    from transformers import AutoModelForImageTextToText

    dm = SFTDataModule(**_shipped_data_config(tiny_model_dir, shipped_mix, tmp_path))
    dm.setup("fit")
    arrow = list(dm.train_dataloader())
    before = _dict_batches(dm, _dict_mix())
    assert len(arrow) == len(before) > 10
    for new, old in zip(arrow, before):
        assert new.keys() == old.keys()
        for key in ("input_ids", "labels", "attention_mask"):
            assert torch.equal(new[key], old[key]), key
        for key in ("pixel_values_videos", "video_grid_thw", "pixel_values", "image_grid_thw"):
            if key in old:
                assert new[key].shape == old[key].shape and torch.equal(new[key], old[key]), key
    model = AutoModelForImageTextToText.from_pretrained(tiny_model_dir, dtype=torch.float32).eval()
    with torch.no_grad():
        for new, old in zip(arrow[:2], before[:2]):
            assert model(**normalize_pixels(new)).loss.item() == model(**normalize_pixels(old)).loss.item()


@pytest.mark.slow
def test_a_rank_holds_tables_not_rows(tiny_model_dir, shipped_mix, tmp_path):
    from datasets.table import ConcatenationTable, MemoryMappedTable

    dm = SFTDataModule(**_shipped_data_config(tiny_model_dir, shipped_mix, tmp_path))
    dm.setup("fit")
    assert isinstance(dm.items, PlannedRows) and dm._reads is None
    assert dm.items.sources.dtype == np.int32 and dm.items.rows.dtype == np.int64
    for table in dm.items.samples + dm.items.plans:
        assert table.cache_files and isinstance(table.data, (MemoryMappedTable, ConcatenationTable))
        assert all(Path(f["filename"]).is_relative_to(tmp_path / "cache") for f in table.cache_files)
    assert dm.items[-1] == dm.items[len(dm.items) - 1] and dm.items[1:3] == [dm.items[1], dm.items[2]]


def _rows(dm: SFTDataModule, src: Source):
    read = dm.read_source(src)
    samples = [sample_from_json(text) for text in read.rows["sample"]]
    return samples, [(e.row, e.kind, str(e)) for e in read.errors], read.tool_dropped, read.n_rows


def _dict_rows(dict_mix, dm: SFTDataModule, src: Source):
    read = dict_mix.read_rows(dict_mix.DictSource(src.name, src.format, dm.source_path(src), ""))
    return [s for _, s in read.rows], [(e.row, e.kind, str(e)) for e in read.errors], read.tool_dropped, read.n_rows


def _malformed_files(folder: Path) -> list[tuple[str, Path]]:
    """Rows every reader must count as errors, in each file type."""
    jsonl = folder / "lvr.jsonl"
    jsonl.write_text(json.dumps({"videos": "a.mp4", "problem": "Q\nA. x", "reasoning": "r", "answer": "A"})
                     + "\n{not json\n\n" + json.dumps({"videos": ["a.mp4", "b.mp4"], "problem": "Q", "answer": "B"})
                     + "\n" + json.dumps({"videos": "../up.mp4", "problem": "Q", "answer": "C"}) + "\n[1, 2]\n")
    rows = json.loads((FIXTURES / "video_r1_cot" / "Video-R1-COT-165k.json").read_text())
    vr1 = folder / "vr1.json"
    vr1.write_text(json.dumps({"data": [rows[0], dict(rows[1], problem_type="yes/no"), 7,
                                        dict(rows[2], path="/abs/v.mp4")]}))
    return [("longvideo_reason", jsonl), ("video_r1", vr1)]


def test_every_release_format_reads_as_before(tmp_path):
    dict_mix = _dict_mix()
    dm = SFTDataModule([], plan_cache_dir=str(tmp_path / "cache"))
    files = RELEASE_FILES + _malformed_files(tmp_path)
    for k, (fmt, path) in enumerate(files):
        src = Source(f"s{k}", fmt, str(path))
        assert _rows(dm, src) == _dict_rows(dict_mix, dm, src), path
    assert sum(bool(_rows(dm, Source(f"s{k}", fmt, str(p)))[1]) for k, (fmt, p) in enumerate(files)) >= 4


def test_whole_file_errors_and_empty_files_read_as_before(tmp_path):
    from cader.train.formats import read_source

    bad = {"not_json.json": "{oops", "object.json": '{"rows": []}', "not_parquet.parquet": "text"}
    dm = SFTDataModule([], plan_cache_dir=str(tmp_path / "cache"))
    for name, text in bad.items():
        path = tmp_path / name
        path.write_text(text)
        fmt = "longvt" if name.endswith(".parquet") else "video_r1"
        with pytest.raises((ValueError, TypeError)) as before:
            list(read_source(fmt, path))
        with pytest.raises(SourceError) as now:
            dm.read_source(Source("s", fmt, str(path)))
        err, prefix = before.value, f"source 's': cannot read {path} as {fmt}: {type(before.value).__name__}: "
        if fmt == "longvt":   # pyarrow's reason, without read_table's "Could not open Parquet input source" prefix
            reason = str(now.value).removeprefix(prefix)
            assert reason != str(now.value) and str(err).endswith(reason)
        else:
            assert str(now.value) == prefix + str(err)
    (tmp_path / "empty.json").write_text("[]")
    (tmp_path / "empty.jsonl").write_text("\n\n")
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"messages": pa.array([], pa.string())}), tmp_path / "empty.parquet")
    for name, fmt in (("empty.json", "video_r1"), ("empty.jsonl", "longvideo_reason"), ("empty.parquet", "longvt")):
        read = dm.read_source(Source("s", fmt, str(tmp_path / name)))
        assert (read.n_rows, len(read.rows), read.errors, read.tool_dropped) == (0, 0, [], 0)


@pytest.mark.parametrize("ratio", [None, 1.0, 0.3, 0.5, 0.99, 1.7, 2.0, 3.4])
def test_ratio_draws_pick_what_the_item_list_draw_picked(ratio):
    dict_mix = _dict_mix()
    for n in (0, 1, 5, 37):
        items = [f"item{k}" for k in range(n)]
        positions = np.arange(n, dtype=np.int64) * 3 + 1
        old_rng, new_rng = random.Random(n), random.Random(n)
        old = dict_mix.apply_ratio(items, ratio, old_rng)
        new = ratio_rows(positions, ratio, new_rng)
        assert [items[(p - 1) // 3] for p in new] == old
        assert old_rng.random() == new_rng.random()      # the next source's draw starts from the same state


def test_format_errors_name_file_and_row(tmp_path):
    path = tmp_path / "sg.json"
    path.write_text(json.dumps([{"conversations": [{"from": "alien", "value": "x"}, {"from": "gpt", "value": "y"}]}]))
    dm = SFTDataModule([], plan_cache_dir=str(tmp_path / "cache"))
    (err,) = dm.read_source(Source("sg", "sharegpt", str(path))).errors
    assert isinstance(err, FormatError) and str(err).startswith(f"{path} row 0: ValueError: unknown speaker")


@pytest.mark.slow
def test_loader_workers_and_pickled_items_read_the_same_rows(tiny_model_dir, shipped_mix, tmp_path):
    import pickle

    dm = SFTDataModule(**{**_shipped_data_config(tiny_model_dir, shipped_mix, tmp_path), "num_workers": 2})
    dm.setup("fit")
    shipped = pickle.dumps(dm.items)           # what a spawned DataLoader worker receives: file names, not rows
    assert len(shipped) < 8_192 * len(dm.items.plans) + 16 * len(dm.items) < len(pickle.dumps(list(dm.items)))
    assert pickle.loads(shipped) == dm.items
    in_workers = [batch["input_ids"] for _, batch in zip(range(3), dm.train_dataloader())]
    dm.num_workers = 0
    here = [batch["input_ids"] for _, batch in zip(range(3), dm.train_dataloader())]
    assert all(torch.equal(a, b) for a, b in zip(in_workers, here)) and len(here) == 3
