"""A real `lmms-eval eval --model cader` run (lmms-eval 0.7.3 in .venv-lmms, scripts/install_lmms_eval.sh) on tasks
the test writes with `--include_path`, scored by lmms-eval's own task functions:
- Video-MME documents in the release's parquet layout: lmms-eval's score equals cader's runner (`cader eval`) on the
  same samples, document by document, the records too (Stage 1, route, Stage 2, cost): lmms-eval's run has two
  documents in flight (concurrency=2) over questions that alternate between two videos, cader's runs one at a time; the side file joins lmms-eval's samples file on doc_id (lmms-eval 0.7.3
  logs the same doc_hash for every document, see below); `cader export-lmms` of the side file gives lmms-eval's
  score and answers back;
- LongVideoBench, in the same run: options as option0..option4 in lmms-eval's rows, as candidates in the release
  file cader's loader reads; the same score and answers both ways.
Both runs use the tiny random Qwen3-VL in the same environment (the venv's av). Skips, saying why, without the venv.
"""

import hashlib
import json
import os
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
VENV = REPO / ".venv-lmms"
NULL_DOC_HASH = hashlib.sha256(json.dumps(None, indent=2).encode("utf-8")).hexdigest()
TASK = "videomme_long_cader"  # a videomme* name: cader reads its documents as Video-MME's


def venv_ready() -> str | None:
    python = VENV / "bin" / "python"
    if not python.exists():
        return f"{VENV} is missing (bash scripts/install_lmms_eval.sh)"
    probe = subprocess.run([str(python), "-P", "-c", "import lmms_eval, filelock._api, cader.evaluate.lmms.model"],
                           capture_output=True, text=True, timeout=300, check=False)  # fmt: skip
    return None if probe.returncode == 0 else f"lmms-eval does not import in {VENV}: {probe.stderr[-300:]}"


WHY_NOT = venv_ready()
pytestmark = [pytest.mark.slow, pytest.mark.skipif(WHY_NOT is not None, reason=str(WHY_NOT))]

TASK_YAML = """dataset_path: parquet
dataset_kwargs:
  data_files:
    test: {parquet}
task: {task}
test_split: test
output_type: generate_until
process_docs: !function utils.process_docs_long
doc_to_visual: !function utils.doc_to_visual
doc_to_text: !function utils.doc_to_text
doc_to_target: "answer"
generation_kwargs:
  max_new_tokens: 16
  temperature: 0
  do_sample: false
process_results: !function utils.process_results
metric_list:
  - metric: videomme_perception_score
    aggregation: !function utils.aggregate_results
    higher_is_better: true
lmms_eval_specific_kwargs:
  default:
    pre_prompt: ""
    post_prompt: "Answer with the option's letter from the given choices directly."
metadata:
  - version: 0.0
"""
LVB_TASK = "longvideobench_val_cader"  # a longvideobench* name: read as LongVideoBench's documents
LVB_YAML = """dataset_path: parquet
dataset_kwargs:
  data_files:
    validation: {parquet}
task: {task}
test_split: validation
doc_to_visual: !function lvb_utils.doc_to_visual
doc_to_text: !function lvb_utils.doc_to_text
doc_to_target: "correct_choice"
generation_kwargs:
  max_new_tokens: 32
  temperature: 0
  do_sample: False
process_results: !function lvb_utils.process_results
metric_list:
  - metric: lvb_acc
    aggregation: !function lvb_utils.aggregate_results
    higher_is_better: true
lmms_eval_specific_kwargs:
  default:
    pre_prompt: ""
    post_prompt: "Answer with the option's letter from the given choices directly."
"""
LVB_UTILS = "\n".join(f"from lmms_eval.tasks.longvideobench.utils import {name} as {alias}" for name, alias in [
    ("longvideobench_doc_to_visual_v", "doc_to_visual"), ("longvideobench_doc_to_text", "doc_to_text"),
    ("longvideobench_process_results", "process_results"),
    ("longvideobench_aggregate_results", "aggregate_results")]) + "\n"  # fmt: skip
# lmms-eval's own Video-MME functions (lmms_eval/tasks/videomme/utils.py); only the dataset location is ours
TASK_UTILS = "\n".join(f"from lmms_eval.tasks.videomme.utils import {name} as {alias}" for name, alias in [
    ("videomme_doc_to_visual", "doc_to_visual"), ("videomme_doc_to_text", "doc_to_text"),
    ("videomme_process_docs_long", "process_docs_long"), ("videomme_process_results", "process_results"),
    ("videomme_aggregate_results", "aggregate_results")]) + "\n"  # fmt: skip


def write_videomme(data_root: Path, n: int) -> Path:
    """Video-MME's layout under <data_root>/videomme (evaluate/benchmarks/videomme.py, the lmms-lab release);
    the last row is a "short" video, which both readers leave out."""
    import pandas as pd
    from conftest import write_barcode_video

    folder = data_root / "videomme"
    (folder / "videomme").mkdir(parents=True)
    (folder / "data").mkdir()
    for video in ("vidA", "vidB"):
        write_barcode_video(folder / "data" / f"{video}.mp4", n_frames=300, fps=10)
    rows = [{"video_id": f"{i:03d}", "duration": "long" if i < n - 1 else "short", "domain": "Knowledge",
             "sub_category": "Humanity & History", "url": "https://www.youtube.com/watch?v=none",
             "videoID": "vidA" if i % 2 == 0 else "vidB", "question_id": f"{i:03d}-1", "task_type": "Counting Problem",
             "question": f"How many grey bands are there in scene {i}?",
             "options": [f"A. {i}", f"B. {i + 1}", f"C. {i + 2}", f"D. {i + 3}"], "answer": "ABCD"[i % 4]}
            for i in range(n)]  # fmt: skip
    parquet = folder / "videomme" / "test-00000-of-00001.parquet"
    pd.DataFrame(rows).to_parquet(parquet)
    return parquet


def write_longvideobench(data_root: Path, n: int) -> Path:
    """The same questions twice: the release's lvb_val.json (`candidates`; cader's loader) and the Hugging Face rows
    lmms-eval reads (`option0`..`option4`, "N/A" past the last), with the videos where each looks for them."""
    import pandas as pd
    from conftest import write_barcode_video

    folder = data_root / "longvideobench"
    (folder / "videos").mkdir(parents=True)
    write_barcode_video(folder / "videos" / "lvbA.mp4", n_frames=300, fps=10)
    rows = [{"video_id": "lvbA", "question": f"Which band is brightest in part {i}?", "candidates":
             [f"band {k}" for k in range(3 + i % 2)], "correct_choice": i % 3, "id": f"lvbA_{i}",
             "video_path": "lvbA.mp4", "subtitle_path": "lvbA_en.json", "duration": 30.0, "duration_group": 15,
             "question_category": "E2O", "topic_category": "TR-Travel", "starting_timestamp_for_subtitles": 0}
            for i in range(n)]  # fmt: skip
    (folder / "lvb_val.json").write_text(json.dumps(rows))
    hf_rows = [{**{k: v for k, v in r.items() if k != "candidates"},
                **{f"option{k}": (r["candidates"][k] if k < len(r["candidates"]) else "N/A") for k in range(5)}}
               for r in rows]  # fmt: skip
    parquet = folder / "validation.parquet"
    pd.DataFrame(hf_rows).to_parquet(parquet)
    # lmms-eval's LongVideoBench reads $HF_HOME/datasets/longvideobench/videos/<video_path> (its yaml's cache_dir)
    (data_root / "datasets").mkdir()
    (data_root / "datasets" / "longvideobench").symlink_to(folder)
    return parquet


def assert_same(a, b, where="record"):
    """Equal but for float noise (the left-padded batched forward is not byte-equal to one prompt alone) and the
    wall-clock cost."""
    if isinstance(a, dict) and isinstance(b, dict):
        assert a.keys() == b.keys(), where
        for key in a:
            if not (where.endswith("cost") and key == "seconds"):
                assert_same(a[key], b[key], f"{where}.{key}")
    elif isinstance(a, list) and isinstance(b, list):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            assert_same(x, y, f"{where}[{i}]")
    elif isinstance(a, float) or isinstance(b, float):
        assert a == pytest.approx(b, abs=1e-4), where
    else:
        assert a == b, where


def method_part(record: dict) -> dict:
    """What CADER computed for a sample: the video path and the loader's meta differ between the two readers, and
    so does the Stage-1 fingerprint's digest of the sample (it hashes the video path). The cost, shared part
    included, is the same: both go through the runner's `records_of` with its video groups."""
    part = {k: record[k] for k in ("stage1", "route", "stage2", "pred", "correct", "error", "cost")}
    if part["stage1"]:
        fingerprint = {k: v for k, v in part["stage1"]["fingerprint"].items() if k != "sample"}
        part["stage1"] = {**part["stage1"], "fingerprint": fingerprint}
    return part


def run(argv, cwd, env, timeout=600) -> str:
    done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False)
    assert done.returncode == 0, f"{argv[0]} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done.stdout + done.stderr


def test_lmms_eval_scores_cader_as_cader_scores_itself(tmp_path, tiny_model_dir):
    data_root = tmp_path / "data"
    parquet = write_videomme(data_root, n=5)
    tasks = tmp_path / "tasks"
    tasks.mkdir()
    (tasks / f"{TASK}.yaml").write_text(TASK_YAML.format(parquet=parquet, task=TASK))
    (tasks / "utils.py").write_text(TASK_UTILS)
    lvb_parquet = write_longvideobench(data_root, n=4)
    (tasks / f"{LVB_TASK}.yaml").write_text(LVB_YAML.format(parquet=lvb_parquet, task=LVB_TASK))
    (tasks / "lvb_utils.py").write_text(LVB_UTILS)
    # lmms-eval's Video-MME finds videos at $HF_HOME/videomme/data/<videoID>.mp4: the data root here
    env = {**os.environ, "HF_HOME": str(data_root), "HF_DATASETS_CACHE": str(tmp_path / "hf_datasets"),
           "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "WANDB_MODE": "disabled",
           "TOKENIZERS_PARALLELISM": "false", "OMP_NUM_THREADS": "1"}  # fmt: skip
    config = REPO / "configs" / "eval" / "cader_tiny.yaml"
    records = tmp_path / "lmms_out" / "cader_records.jsonl"
    # two documents in flight: lmms-eval's order alternates vidA and vidB, cader's runner below runs one at a time
    model_args = f"model={tiny_model_dir},config={config},records={records},concurrency=2"
    # cwd is not the repo root: its evaluate/ folder would shadow the HF `evaluate` package lmms-eval imports
    run([str(VENV / "bin" / "lmms-eval"), "eval", "--model", "cader", "--model_args", model_args, "--tasks", f"{TASK},{LVB_TASK}",
         "--include_path", str(tasks), "--output_path", str(tmp_path / "lmms_out"), "--log_samples",
         "--batch_size", "1", "--device", "cpu"], cwd=tmp_path, env=env)  # fmt: skip
    run([str(VENV / "bin" / "cader"), "eval", "--config", str(config), "--model", str(tiny_model_dir),
         "--benchmark", "videomme_long", "--data_root", str(data_root), "--out", str(tmp_path / "cader_out"),
         "--progress", "false"], cwd=tmp_path, env=env)  # fmt: skip
    run([str(VENV / "bin" / "cader"), "eval", "--config", str(config), "--model", str(tiny_model_dir),
         "--benchmark", "longvideobench_val", "--data_root", str(data_root), "--out", str(tmp_path / "cader_lvb"),
         "--progress", "false"], cwd=tmp_path, env=env)  # fmt: skip

    (results_file,) = (tmp_path / "lmms_out").rglob("*_results.json")
    (samples_file,) = (tmp_path / "lmms_out").rglob(f"*_samples_{TASK}.jsonl")
    lmms_score = json.loads(results_file.read_text())["results"][TASK]["videomme_perception_score,none"]
    cader_report = json.loads((tmp_path / "cader_out" / "report.json").read_text())
    assert cader_report["n"] == 4  # the "short" row is left out by both
    assert lmms_score == pytest.approx(cader_report["overall"]["accuracy"], abs=0.01)

    results = json.loads(results_file.read_text())["results"]
    lvb_report = json.loads((tmp_path / "cader_lvb" / "report.json").read_text())
    assert lvb_report["n"] == 4
    # longvideobench_aggregate_results reports a fraction, cader a percentage
    assert 100 * results[LVB_TASK]["lvb_acc,none"] == pytest.approx(lvb_report["overall"]["accuracy"], abs=0.01)
    lvb_side = {r["sample_id"]: r for r in map(json.loads, records.read_text().splitlines())
                if r["lmms"]["task"] == LVB_TASK}  # fmt: skip
    lvb_ours = {r["sample_id"]: r for r in map(json.loads, (tmp_path / "cader_lvb" / "predictions.jsonl")
                                               .read_text().splitlines())}  # fmt: skip
    assert lvb_side.keys() == lvb_ours.keys() and len(lvb_side) == 4
    for sample_id, record in lvb_ours.items():
        assert (lvb_side[sample_id]["pred"], lvb_side[sample_id]["options"]) == (record["pred"], record["options"])
        assert_same(method_part(lvb_side[sample_id]), method_part(record), sample_id)

    # one generate_until call for both tasks, run video by video: vidA's questions, vidB's, then lvbA's
    videos = [Path(r["video"]).stem for r in map(json.loads, records.read_text().splitlines())]
    assert videos == ["vidA", "vidA", "vidB", "vidB", "lvbA", "lvbA", "lvbA", "lvbA"], videos
    side = {r["sample_id"]: r for r in map(json.loads, records.read_text().splitlines())
            if r["lmms"]["task"] == TASK}  # fmt: skip
    ours = {r["sample_id"]: r for r in map(json.loads, (tmp_path / "cader_out" / "predictions.jsonl").read_text()
                                           .splitlines())}  # fmt: skip
    assert side.keys() == ours.keys() and len(side) == 4
    for sample_id, record in ours.items():
        assert side[sample_id]["pred"] == record["pred"] and side[sample_id]["route"] == record["route"], sample_id
        assert_same(method_part(side[sample_id]), method_part(record), sample_id)
    lmms_samples = {s["doc_id"]: s for s in map(json.loads, samples_file.read_text().splitlines())}
    for record in side.values():
        logged = lmms_samples[record["lmms"]["doc_id"]]
        # lmms-eval 0.7.3 builds its Instances without the doc (lmms_eval/api/task.py: `# doc=doc`), so the
        # doc_hash it logs is sha256 of json.dumps(None) for every document; the side file's is the document's
        assert logged["doc_hash"] in (record["lmms"]["doc_hash"], NULL_DOC_HASH)
        assert record["lmms"]["doc_hash"] != NULL_DOC_HASH
        assert logged["filtered_resps"] == record["pred"]
        assert logged["videomme_perception_score"]["score"] == float(record["correct"])

    from cader.cli.main import main

    assert main(["export-lmms", str(records), "--out", str(tmp_path / "export")]) == 0
    exported = json.loads((tmp_path / "export" / "results.json").read_text())
    assert exported["results"][TASK]["cader_accuracy,none"] == pytest.approx(lmms_score)
    lines = [json.loads(line) for line in (tmp_path / "export" / f"samples_{TASK}.jsonl").read_text().splitlines()]
    assert {(s["doc_id"], s["filtered_resps"], s["target"]) for s in lines} == {
        (s["doc_id"], s["filtered_resps"], s["target"]) for s in lmms_samples.values()}
    assert {s["doc_hash"] for s in lines} == {r["lmms"]["doc_hash"] for r in side.values()}
