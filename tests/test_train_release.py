"""The paper recipe on the LongVT release as downloaded: `cot_mix.yaml` + one release root + one media root.

`--plan_only` reports every tool-free source with its counts; a source with nothing trainable (wrong schema, wrong
media root) stops planning and training with the reason; media paths outside the media root are counted row errors;
a source losing too much warns; a hub id that is not downloaded fails at once instead of reaching for the network.
"""
import importlib
import json
from pathlib import Path

import lightning  # noqa: F401 -- see below
import numpy as np
import pytest
import yaml
from cader.dev.synthetic.train_mix import (
    LONGVT_FILES,
    longvt_part,
    write_longvt_parquet,
    write_training_mix,
)
from datasets import Dataset

# Lightning gives its loggers a StreamHandler on the sys.stderr of the moment it is first imported: imported here, at
# collection, that is the session's stream; imported by the first test's sft run, it would be that test's capture,
# closed when a later test's run logs ("--- Logging error ---" in the stderr these tests read).
REPO = Path(__file__).resolve().parents[1]
RECIPE_SOURCES = ["longvideoreason", "videor1", "llavacot", "openvlthinker", "wemath"]


def _sft():
    module = importlib.import_module("cader.train.sft")
    return module


@pytest.fixture(scope="module")
def release(tmp_path_factory):
    """A folder laid out like LongVT-Parquet (the five tool-free files by name) with its media beside it."""
    root = tmp_path_factory.mktemp("LongVT-Parquet")
    write_training_mix(root, np.random.default_rng(1), n_train=8, n_images=4, n_tool=1)
    return root


def _argv(tiny_model_dir, release_root, media_root, tmp_path, *extra):
    return ["--config", "cot_mix.yaml", "--model.model_path", str(tiny_model_dir),
            "--data.release_root", str(release_root), "--data.media_root", str(media_root),
            "--data.plan_cache_dir", str(tmp_path / "cache"), "--data.plan_workers", "1",
            "--trainer.default_root_dir", str(tmp_path / "run"), "--plan_only", "true", *extra]


def test_plan_only_reports_every_tool_free_source_of_the_release(tiny_model_dir, release, tmp_path, capsys):
    assert _sft().main(_argv(tiny_model_dir, release, release, tmp_path)) == 0
    out = capsys.readouterr().out
    report = json.loads((tmp_path / "run" / "data_report.json").read_text())["sources"]
    assert list(report) == RECIPE_SOURCES
    names = dict(zip(RECIPE_SOURCES, ["longvt_sft_longvideoreason_5k2.parquet", "longvt_sft_videor1_165k5.parquet",
                                      "longvt_sft_llavacot_54k5.parquet", "longvt_sft_openvlthinker_2k8.parquet",
                                      "longvt_sft_wemath_602.parquet"]))
    for name, file in names.items():
        entry = report[name]
        assert entry["rows"] == len(Dataset.from_parquet(str(release / file)))
        assert entry["train_samples"] >= 1
        assert entry["rows"] == entry["tool_calls_dropped"] + sum(entry["skipped"].values()) + entry["trainable"]
        line = next(x for x in out.splitlines() if x.startswith(f"{name}:"))
        assert f"{entry['rows']} rows" in line and f"{entry['train_samples']} to train" in line
        assert "tool-call rows dropped" in line and "over the token budget" in line
    assert report["videor1"]["tool_calls_dropped"] == 1      # the synthetic tool row sits in that file
    group = sum(report[n]["train_samples"] for n in ("llavacot", "openvlthinker", "wemath"))
    assert "group image_cot: " in out and f"{group} to train" in out.split("group image_cot: ")[1].splitlines()[0]


def test_wrong_media_root_stops_planning_with_the_reason(tiny_model_dir, release, tmp_path, capsys):
    empty = tmp_path / "not_the_media"
    empty.mkdir()
    assert _sft().main(_argv(tiny_model_dir, release, empty, tmp_path)) == 2
    err = capsys.readouterr().err
    for name in RECIPE_SOURCES:
        assert f"source {name!r}: none of its" in err
    assert "missing_media" in err and str(empty) in err


def test_wrong_schema_stops_before_any_processor_is_loaded(release, tmp_path, capsys):
    bad = tmp_path / "release"
    bad.mkdir()
    for name in LONGVT_FILES:
        (bad / name).symlink_to(release / name)
    (bad / "longvt_sft_wemath_602.parquet").unlink()
    Dataset.from_list([{"conversations": "x"}, {"conversations": "y"}]).to_parquet(
        str(bad / "longvt_sft_wemath_602.parquet"))
    # a processor that could not be loaded: the data check must fail first, naming the source
    argv = _argv(tmp_path / "no_model_here", bad, release, tmp_path)
    assert _sft().main(argv) == 2
    err = capsys.readouterr().err
    assert "source 'wemath': none of its 2 rows can be trained (2 format)" in err and "messages" in err
    assert "processor" not in err


def test_a_hub_id_that_is_not_downloaded_fails_at_once(release, tmp_path, capsys, monkeypatch):
    import socket

    # "at once": without reaching for the network (no hub retries, whatever the environment's offline flags say)
    attempts = []
    monkeypatch.setattr(socket.socket, "connect", lambda self, address: attempts.append(address) or 1 / 0)
    argv = _argv("Qwen/Qwen3-VL-8B-Instruct", release, release, tmp_path)
    assert _sft().main(argv) == 2
    assert attempts == []
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "Qwen/Qwen3-VL-8B-Instruct" in err[0] and "--model.model_path" in err[0]


def test_media_outside_the_root_are_counted_and_a_lossy_source_warns(tiny_model_dir, release, tmp_path, capsys):
    tree = tmp_path / "release"
    tree.mkdir()
    for name in LONGVT_FILES:
        (tree / name).symlink_to(release / name)
    rows = list(Dataset.from_parquet(str(release / "longvt_sft_wemath_602.parquet")))
    escaping = []
    for bad in ("../outside.mp4", "/etc/hosts"):
        row = json.loads(json.dumps(rows[0]))
        for message in row["messages"]:
            message["content"] = [longvt_part("video_url", bad) if p["type"] in ("video_url", "image_url") else p
                                  for p in message["content"]]
        escaping.append(row)
    (tree / "longvt_sft_wemath_602.parquet").unlink()
    write_longvt_parquet(tree / "longvt_sft_wemath_602.parquet", rows + escaping)
    assert _sft().main(_argv(tiny_model_dir, tree, release, tmp_path)) == 0
    err = capsys.readouterr().err
    entry = json.loads((tmp_path / "run" / "data_report.json").read_text())["sources"]["wemath"]
    assert entry["skipped"]["media_outside_root"] == 2 and entry["trainable"] == len(rows)
    assert all("media root" in x or "absolute" in x for x in entry["skipped_ids"]["media_outside_root"])
    assert "WARNING: source 'wemath' loses 2 of its" in err


def test_training_stops_with_the_reason_when_a_source_cannot_train(tiny_model_dir, tmp_path, capsys):
    bad = tmp_path / "broken.json"
    bad.write_text(json.dumps([{"question": "no Video-R1 fields here"}]))
    cfg = yaml.safe_load((REPO / "configs" / "train" / "cot_mix_tiny.yaml").read_text())
    cfg.pop("make_missing")
    cfg["model"]["model_path"] = str(tiny_model_dir)
    cfg["data"]["sources"] = [{"name": "broken", "format": "video_r1", "path": str(bad)}]
    cfg["trainer"].update(default_root_dir=str(tmp_path / "run"), logger=False, callbacks=None, max_epochs=1)
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(cfg))
    assert _sft().main(["--config", str(path)]) == 2
    err = capsys.readouterr().err
    assert "source 'broken': none of its 1 rows can be trained (1 format)" in err


def test_unreadable_and_missing_files_are_all_named(release, tmp_path, capsys):
    tree = tmp_path / "release"
    tree.mkdir()
    for name in LONGVT_FILES[:3]:
        (tree / name).symlink_to(release / name)
    (tree / LONGVT_FILES[3]).write_text("not a parquet file")      # LONGVT_FILES[4] is missing
    assert _sft().main(_argv(tmp_path / "no_model_here", tree, release, tmp_path)) == 2
    err = capsys.readouterr().err
    assert f"source 'openvlthinker': cannot read {tree / LONGVT_FILES[3]} as longvt" in err
    assert f"source 'wemath': {tree / LONGVT_FILES[4]} not found" in err and "release_root" in err
