"""`cader export-lmms`: a cader run as lmms-eval's samples_<task>.jsonl and results.json (no lmms-eval needed)."""

import json

from cader.dev.viewer_records import synthetic_records
from cader.evaluate.lmms.export import METRIC, export_lmms


def test_a_run_becomes_one_samples_file_per_benchmark_and_the_mean_score(tmp_path):
    records = synthetic_records(40, seed=1)
    records[0] |= {"lmms": {"task": "videomme_long", "split": "test", "doc_id": 17, "doc_hash": "abc"}}
    run = tmp_path / "run"
    run.mkdir()
    (run / "predictions.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records) + "{torn\n")
    results = export_lmms(str(run), str(tmp_path / "out"))
    assert results["problems"] and ":41:" in results["problems"][0]
    tasks = {r.get("lmms", {}).get("task") or r["benchmark"] for r in records}
    assert set(results["results"]) == tasks
    for task in tasks:
        mine = [r for r in records if (r.get("lmms", {}).get("task") or r["benchmark"]) == task]
        lines = [json.loads(x) for x in (tmp_path / "out" / f"samples_{task}.jsonl").read_text().splitlines()]
        assert len(lines) == len(mine) == results["n-samples"][task]["original"]
        assert [line["filtered_resps"] for line in lines] == [r["pred"] or "" for r in mine]  # failed: ""
        right = sum(r["pred"] == r["answer"] for r in mine if r["pred"])
        assert results["results"][task][f"{METRIC},none"] == 100.0 * right / len(mine)
    first = json.loads((tmp_path / "out" / "samples_videomme_long.jsonl").read_text().splitlines()[0])
    assert (first["doc_id"], first["doc_hash"]) == (17, "abc")  # from lmms-eval: its own ids
    assert json.loads((tmp_path / "out" / "results.json").read_text())["results"] == results["results"]


def test_a_missing_run_is_an_error_naming_it(tmp_path, capsys):
    from cader.cli.main import main

    assert main(["export-lmms", str(tmp_path / "nowhere"), "--out", str(tmp_path / "out")]) == 2
    assert "nowhere: no such predictions file" in capsys.readouterr().err
