"""Plan cache of SFTDataModule.setup (Arrow tables cached by `datasets`): warm runs open no video and report the same
counts; edits re-plan exactly what changed; broken plan files are rebuilt; planning in several processes equals one;
concurrent cold runs leave tables a warm run reads."""
import json
import logging
import multiprocessing
import os
import shutil

import pytest
from cader.dev.synthetic.train_mix import SYNTHETIC_MIX
from cader.train.datamodule import SFTDataModule, Source

SOURCES = SYNTHETIC_MIX


@pytest.fixture(scope="module")
def base_data(tmp_path_factory):
    from cader.dev.synthetic.dataset import Counts, make_synthetic_data

    out = tmp_path_factory.mktemp("plan_cache_data")
    make_synthetic_data(out, counts=Counts(n_train=8, n_images=3, n_tool=1, n_eval=1, n_heldout=1))
    return out / "train"


@pytest.fixture
def data(base_data, tmp_path):
    """A private copy, so a test may edit rows and media."""
    return shutil.copytree(base_data, tmp_path / "train")


@pytest.fixture
def video_opens(monkeypatch):
    """Counts VideoReader constructions (the decord open that planning pays per video)."""
    from cader.vlm import video

    opened, real = [], video.VideoReader

    class Counting(real):
        def __init__(self, path, *args, **kwargs):
            opened.append(str(path))
            super().__init__(path, *args, **kwargs)

    monkeypatch.setattr(video, "VideoReader", Counting)
    return opened


def _dm(model_dir, data, tmp_path, cache="cache", workers=2, report="report", **budget):
    sources = [Source(name, fmt, str(data / file)) for name, fmt, file in SOURCES]
    return SFTDataModule(sources, processor_path=str(model_dir), max_length=budget.pop("max_length", 2048),
                         report_dir=str(tmp_path / report), plan_cache_dir=str(tmp_path / cache) if cache else None,
                         plan_workers=workers, **budget)


def _setup(dm):
    dm.setup()
    return dm


def _setup_with_dead_sources(dm):
    """setup() on a budget that leaves some sources with nothing to train: it stops with SourceError after
    planning (and caching) every source, and the report still holds every count."""
    from cader.train.datamodule import SourceError

    with pytest.raises(SourceError, match="none of its"):
        dm.setup()
    return dm


def _counts(report):
    """The report without the cache section: what must not depend on hits or misses."""
    return {name: {k: v for k, v in entry.items() if k != "plan_cache"} for name, entry in report.items()}


def _cache(dm, key):
    return {name: entry["plan_cache"][key] for name, entry in dm.report.items()}


def _kept_rows(dm):
    """Rows that reach planning (format-valid, tool-free), per source."""
    return {src.name: len(dm.read_source(src).rows) for src in dm.sources}


def _plan_files(tmp_path, cache="cache"):
    return sorted((tmp_path / cache).glob("*.plan*.arrow"))


def test_warm_run_opens_no_video_and_reports_the_same(tiny_model_dir, data, tmp_path, video_opens):
    uncached = _setup(_dm(tiny_model_dir, data, tmp_path, cache=None, report="r0"))
    n_uncached_opens = len(video_opens)
    assert n_uncached_opens > 0
    cold = _setup(_dm(tiny_model_dir, data, tmp_path, report="r1"))
    assert len(video_opens) == 2 * n_uncached_opens
    kept = _kept_rows(cold)
    assert _cache(cold, "misses") == kept and set(_cache(cold, "hits").values()) == {0}
    warm = _setup(_dm(tiny_model_dir, data, tmp_path, report="r2"))
    assert len(video_opens) == 2 * n_uncached_opens                 # no video opened on the warm run
    assert _cache(warm, "hits") == kept and set(_cache(warm, "misses").values()) == {0}
    assert warm.items == cold.items == uncached.items
    assert _counts(warm.report) == _counts(cold.report) == _counts(uncached.report)
    written = json.loads((tmp_path / "r2" / "data_report.json").read_text())
    assert written["sources"]["video_r1"]["plan_cache"]["hits"] == kept["video_r1"]
    assert all(os.path.dirname(f) == str(tmp_path / "cache") for f in _cache(warm, "file").values())


@pytest.mark.slow
def test_skipped_samples_are_cached_with_their_reason(tiny_model_dir, data, tmp_path, video_opens):
    # a budget so tight that samples are dropped, and a missing image: the warm report lists the same ids and reasons
    image = next(p for p in (data / "media" / "images").iterdir())
    hidden = image.rename(tmp_path / image.name)
    cold = _setup_with_dead_sources(_dm(tiny_model_dir, data, tmp_path, max_length=150, min_frames=2))
    skipped = {reason for entry in cold.report.values() for reason in entry["skipped"]}
    assert {"over_budget", "missing_media"} <= skipped
    opens = len(video_opens)
    warm = _setup_with_dead_sources(_dm(tiny_model_dir, data, tmp_path, max_length=150, min_frames=2))
    assert len(video_opens) == opens
    assert _counts(warm.report) == _counts(cold.report) and warm.items == cold.items
    # the image comes back: exactly the samples that use it are planned again
    hidden.rename(image)
    back = _setup_with_dead_sources(_dm(tiny_model_dir, data, tmp_path, max_length=150, min_frames=2))
    rel = str(image.relative_to(data))
    assert _cache(back, "misses") == _uses(back, rel) and sum(_uses(back, rel).values()) >= 1
    assert sum(e["skipped"].get("missing_media", 0) for e in back.report.values()) == 0


@pytest.mark.slow
def test_changed_row_is_replanned_alone(tiny_model_dir, data, tmp_path, video_opens):
    cold = _setup(_dm(tiny_model_dir, data, tmp_path))
    rows = json.loads((data / "video_r1_cot.json").read_text())
    target = next(i for i, r in enumerate(rows) if "<tool" not in json.dumps(r))
    rows[target]["process"] = rows[target]["process"] + " A longer line of reasoning that changes the budget."
    (data / "video_r1_cot.json").write_text(json.dumps(rows))
    warm = _setup(_dm(tiny_model_dir, data, tmp_path))
    kept = _kept_rows(warm)
    assert _cache(warm, "misses") == {name: int(name == "video_r1") for name in kept}
    assert _cache(warm, "hits")["video_r1"] == kept["video_r1"] - 1
    fresh = _setup(_dm(tiny_model_dir, data, tmp_path, cache=None, report="fresh"))
    assert warm.items == fresh.items and warm.items != cold.items
    again = _setup(_dm(tiny_model_dir, data, tmp_path))          # the rewritten file holds the edited row
    assert set(_cache(again, "misses").values()) == {0}


def test_budget_change_replans_everything_and_keeps_the_old_cache(tiny_model_dir, data, tmp_path, video_opens):
    first = _setup(_dm(tiny_model_dir, data, tmp_path))
    kept = _kept_rows(first)
    other = _setup(_dm(tiny_model_dir, data, tmp_path, video_max_pixels=4096))
    assert _cache(other, "misses") == kept
    assert set(_cache(other, "file").values()).isdisjoint(_cache(first, "file").values())
    back = _setup(_dm(tiny_model_dir, data, tmp_path))
    assert _cache(back, "hits") == kept and back.items == first.items


def _uses(dm, rel_path):
    """Per source: how many planned rows reference this media file."""
    return {src.name: sum(rel_path in paths for paths in dm.read_source(src).rows["media"]) for src in dm.sources}


@pytest.mark.slow
@pytest.mark.parametrize("how", ["touch", "replace"])
def test_changed_media_file_replans_its_samples_only(tiny_model_dir, data, tmp_path, video_opens, how):
    cold = _setup(_dm(tiny_model_dir, data, tmp_path))
    video = next(m["path"] for p in cold.items for m in p.sample.media if m["type"] == "video")
    uses = _uses(cold, video)
    path = data / video
    if how == "touch":
        st = path.stat()
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 5_000_000_000))
    else:   # same name, other content: the smallest other video of the mix (a short clip: another duration)
        others = [p for p in data.rglob("*.mp4") if p != path]
        donor = min(others, key=lambda p: p.stat().st_size)
        shutil.copyfile(donor, path)
    opens = len(video_opens)
    warm = _setup(_dm(tiny_model_dir, data, tmp_path))
    assert _cache(warm, "misses") == uses and sum(uses.values()) >= 1
    assert len(video_opens) - opens == sum(uses.values())
    fresh = _setup(_dm(tiny_model_dir, data, tmp_path, cache=None, report="fresh"))
    assert warm.items == fresh.items and _counts(warm.report) == _counts(fresh.report)
    if how == "replace":
        assert warm.items != cold.items


def _table_of_other_columns(path):
    from datasets import Dataset

    Dataset.from_dict({"row": [0], "plan": ["{}"]}).map(lambda r: r, cache_file_name=str(path), new_fingerprint="x0")


@pytest.mark.slow
@pytest.mark.parametrize("damage", ["garbage", "truncated", "empty", "other_columns"])
def test_broken_plan_file_is_rebuilt_with_a_warning(tiny_model_dir, data, tmp_path, caplog, damage):
    cold = _setup(_dm(tiny_model_dir, data, tmp_path))
    file = _cache(cold, "file")["video_r1"]
    with open(file, "rb") as f:
        text = f.read()
    # a new file in its place: `cold` still maps the old one, which must not shrink under it (that is a SIGBUS)
    os.unlink(file)
    if damage == "other_columns":
        _table_of_other_columns(file)
    else:
        broken = {"garbage": b"\x00\xffnot arrow at all\n{", "truncated": text[: len(text) * 2 // 3], "empty": b""}[damage]
        with open(file, "wb") as f:
            f.write(broken)
    with caplog.at_level(logging.WARNING, logger="cader.train.plan_cache"):
        warm = _setup(_dm(tiny_model_dir, data, tmp_path))
    assert any(file in r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING)
    kept = _kept_rows(warm)
    assert _cache(warm, "misses")["video_r1"] == kept["video_r1"] and warm.report["video_r1"]["plan_cache"]["rebuilt"]
    assert warm.items == cold.items and _counts(warm.report) == _counts(cold.report)
    again = _setup(_dm(tiny_model_dir, data, tmp_path))
    assert _cache(again, "hits") == kept and "rebuilt" not in again.report["video_r1"]["plan_cache"]


def test_unwritable_cache_dir_warns_and_trains(tiny_model_dir, data, tmp_path, caplog):
    (tmp_path / "cache").write_text("a file where the cache folder should be")
    with caplog.at_level(logging.WARNING, logger="cader.train.plan_cache"):
        dm = _setup(_dm(tiny_model_dir, data, tmp_path))
    assert dm.items and all(entry["plan_cache"]["write_error"] for entry in dm.report.values())
    assert any("cannot write plan cache" in r.getMessage() for r in caplog.records)


@pytest.mark.slow
def test_parallel_plan_equals_serial(tiny_model_dir, data, tmp_path, monkeypatch):
    from cader.train import mix_rows, plan_cache

    serial = _setup(_dm(tiny_model_dir, data, tmp_path, cache=None, workers=1, report="s"))
    monkeypatch.setattr(plan_cache, "PLAN_ROWS_PER_WORKER", 1)      # every source in several processes
    monkeypatch.setattr(mix_rows, "PARSE_ROWS_PER_WORKER", 1)
    parallel = _setup(_dm(tiny_model_dir, data, tmp_path, cache="par", workers=3, report="p"))
    assert [p.sample.sample_id for p in parallel.items] == [p.sample.sample_id for p in serial.items]
    assert parallel.items == serial.items and _counts(parallel.report) == _counts(serial.report)
    assert any("_of_00003" in f.name for f in _plan_files(tmp_path, "par"))  # the map ran in three processes
    warm = _setup(_dm(tiny_model_dir, data, tmp_path, cache="par", workers=1, report="w"))
    assert warm.items == serial.items and set(_cache(warm, "misses").values()) == {0}


def test_prepare_data_fills_the_cache_setup_reads(tiny_model_dir, data, tmp_path, video_opens):
    dm = _dm(tiny_model_dir, data, tmp_path)
    dm.prepare_data()
    opens = len(video_opens)
    assert opens > 0
    dm.setup()
    assert len(video_opens) == opens
    kept = _kept_rows(dm)
    assert _cache(dm, "hits") == kept
    assert {n: e["plan_cache"]["prepare_data"]["misses"] for n, e in dm.report.items()} == kept


def test_auto_cache_dir_sits_next_to_the_source(tiny_model_dir, data, tmp_path):
    dm = _setup(SFTDataModule([Source("video_r1", "video_r1", str(data / "video_r1_cot.json"))],
                              processor_path=str(tiny_model_dir), max_length=2048, report_dir=str(tmp_path / "r")))
    assert os.path.dirname(dm.report["video_r1"]["plan_cache"]["file"]) == str(data.resolve() / ".cader_plan_cache")


def _cold_setup(model_dir, data, tmp_path, report):
    _setup(_dm(model_dir, data, tmp_path, report=report))


@pytest.mark.slow
def test_concurrent_cold_runs_leave_tables_a_warm_run_reads(tiny_model_dir, data, tmp_path, video_opens):
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=_cold_setup, args=(tiny_model_dir, data, tmp_path, f"c{k}")) for k in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
    assert all(p.exitcode == 0 for p in procs)
    warm = _setup(_dm(tiny_model_dir, data, tmp_path, report="w"))
    assert video_opens == [] and set(_cache(warm, "misses").values()) == {0}
    fresh = _setup(_dm(tiny_model_dir, data, tmp_path, cache=None, report="fresh"))
    assert warm.items == fresh.items
    assert not list((tmp_path / "cache").glob("**/*.tmp*"))       # no half-written file left behind


def test_shipped_config_names_the_options():
    from cader.train.cli import parse_sft_args

    cfg = parse_sft_args(["--config", "cot_mix"])
    assert cfg.data.plan_cache_dir == "auto" and cfg.data.plan_workers == 8


def test_the_cache_line_says_what_this_run_planned_whichever_pass_reports_it():
    """One process runs prepare_data (plans: misses) then setup (reads back: hits); both lines report the planning."""
    from cader.train.plan_cache import cache_line

    planned = {"hits": 0, "misses": 16}
    assert cache_line({"hits": 16, "misses": 0, "prepare_data": planned}) == cache_line(planned) == (
        "plan cache: 16 rows planned by this run, 0 reused from an earlier run")
    assert cache_line({"hits": 16, "misses": 0}) == "plan cache: 0 rows planned by this run, 16 reused from an earlier run"
