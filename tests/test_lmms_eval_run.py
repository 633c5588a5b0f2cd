"""A real, offline `lmms-eval --model cader` run (lmms-eval 0.7.3 in .venv-lmms, scripts/install_lmms_eval.sh)
through lmms-eval's OWN built-in task YAMLs: videomme_long, mlvu_dev, lvbench, longvideobench_val_v and
videomme_v2, their rows written by the offline recipe (`python -m cader.evaluate.lmms.local_data`) from cader
benchmark folders in the releases' layouts (the synthetic writers; Video-MME-v2's release layout written here), run
from that folder with HF_HOME on it and HF_HUB_OFFLINE/HF_DATASETS_OFFLINE set, scored by lmms-eval's own task
functions. The same rows through `cader eval` (one command per benchmark; Video-MME-v2's questions in Video-MME's
layout, which cader's loader reads): each task's lmms-eval number equals cader's on the same documents (MLVU by
lmms-eval's own definition, the mean over its seven fixed task types, computed from cader's records), and every
document's answer, route, Stage-1 logits and Stage 2 agree (two documents in flight in lmms-eval, one in cader).
The side file lands in --output_path; `cader export-lmms` of it gives lmms-eval's Video-MME score back;
`lmms-eval models` lists cader; offline without the rows, lmms-eval stops with status 1 naming what is missing,
before any model loads. Both runs use the tiny random Qwen3-VL in the same environment (the venv's av). Skips,
saying why, without the venv.
"""

import hashlib
import json
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[1]
VENV = REPO / ".venv-lmms"
NULL_DOC_HASH = hashlib.sha256(json.dumps(None, indent=2).encode("utf-8")).hexdigest()
TASKS = ("videomme_long", "mlvu_dev", "lvbench", "longvideobench_val_v", "videomme_v2")
# each task's number in lmms-eval's results.json and its scale to a percentage (the tasks' metric_list, 0.7.3)
METRICS = {"videomme_long": ("videomme_perception_score,none", 1), "mlvu_dev": ("mlvu_percetion_score,none", 1),
           "lvbench": ("lvbench_score,none", 100), "longvideobench_val_v": ("lvb_acc,none", 100),
           "videomme_v2": ("videomme_v2_overall_acc,none", 1)}
MLVU_TASK_TYPES = ("anomaly_reco", "count", "ego", "needle", "order", "plotQA", "topic_reasoning")  # 0.7.3, dev


def venv_ready() -> str | None:
    python = VENV / "bin" / "python"
    if not python.exists():
        return f"{VENV} is missing (bash scripts/install_lmms_eval.sh)"
    probe = subprocess.run([str(python), "-P", "-c", "import lmms_eval, filelock._api, cader.evaluate.lmms.model"],
                           capture_output=True, text=True, timeout=300, check=False)
    return None if probe.returncode == 0 else f"lmms-eval does not import in {VENV}: {probe.stderr[-300:]}"


WHY_NOT = venv_ready()
pytestmark = [pytest.mark.slow, pytest.mark.skipif(WHY_NOT is not None, reason=str(WHY_NOT))]


def assert_same(a, b, where="record"):
    """Equal but for float noise (the left-padded batched forward is not byte-equal to one prompt alone) and the
    wall-clock cost."""
    if isinstance(a, dict) and isinstance(b, dict):
        if where.endswith("cost"):
            a, b = ({k: v for k, v in x.items() if k != "seconds"} for x in (a, b))
        assert a.keys() == b.keys(), where
        for key in a:
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
    so does the Stage-1 fingerprint's digest of the sample (it hashes the video path)."""
    part = {k: record[k] for k in ("stage1", "route", "stage2", "pred", "correct", "error", "cost")}
    part["cost"] = {k: v for k, v in part["cost"].items() if k != "seconds"}  # wall clock (cader eval leaves it out)
    if part["stage1"]:
        fingerprint = {k: v for k, v in part["stage1"]["fingerprint"].items() if k != "sample"}
        part["stage1"] = {**part["stage1"], "fingerprint": fingerprint}
    return part


def run(argv, cwd, env, timeout=900, expect=0) -> str:
    done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False)
    assert done.returncode == expect, f"{argv[0]} exited {done.returncode}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done.stdout + done.stderr


def write_benchmarks(data_root: Path) -> None:
    """Small sets in the releases' layouts: cader's synthetic writers, and Video-MME-v2's release (test.parquet,
    videos unzipped) with its two questions also written in Video-MME's layout under data_root/v2_as_videomme."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    from cader.dev.synthetic.eval_sets import write_longvideobench, write_lvbench, write_mlvu, write_videomme
    from cader.dev.synthetic.media import (
        COLOUR_QUESTION,
        LETTERS,
        colour_options,
        random_cued_spec,
        write_video,
    )

    rng = np.random.default_rng(3)

    def new_spec(name):
        return random_cued_spec(rng, name, (32, 32), 16, 2.0, fps=4, width=64, height=48)

    write_videomme(data_root / "videomme", rng, 2, new_spec)  # + a short and a medium row, left out by both
    write_mlvu(data_root / "mlvu", rng, 2, new_spec)
    write_lvbench(data_root / "lvbench", rng, 1, new_spec)  # one video, two questions
    write_longvideobench(data_root / "longvideobench", rng, 2, new_spec)
    spec = new_spec("v2")
    write_video(spec, data_root / "videomme_v2" / "videos" / "001.mp4")
    v2, as_videomme = [], []
    for n in (1, 2):
        options, letter = colour_options(rng, spec.colour, 8)
        question = f"{COLOUR_QUESTION} ({n})"
        v2.append({"video_id": "001", "question_id": f"001-{n}", "question": question,
                   "options": "\n".join(f"{LETTERS[k]}. {o}" for k, o in enumerate(options)), "answer": letter,
                   "group_type": "relevance", "group_structure": "[1, 2, 3, 4]", "level": 1,
                   "second_head": "Information Aggregation", "third_head": "Attribute"})
        as_videomme.append({"video_id": "001", "duration": "long", "domain": "d", "sub_category": "s", "url": "",
                            "videoID": "001", "question_id": f"001-{n}", "task_type": "t", "question": question,
                            "options": [f"{LETTERS[k]}. {o}" for k, o in enumerate(options)], "answer": letter})
    pq.write_table(pa.Table.from_pylist(v2), data_root / "videomme_v2" / "test.parquet")
    copy = data_root / "v2_as_videomme" / "videomme"
    (copy / "videomme").mkdir(parents=True)
    (copy / "data").mkdir()
    (copy / "data" / "001.mp4").symlink_to(data_root / "videomme_v2" / "videos" / "001.mp4")
    pq.write_table(pa.Table.from_pylist(as_videomme), copy / "videomme" / "test-00000-of-00001.parquet")


CADER_EVALS = """
import sys
from cader.cli.main import main
config, model, out = sys.argv[1:4]
for benchmark, data_root, name in zip(sys.argv[4::3], sys.argv[5::3], sys.argv[6::3]):
    code = main(["eval", "--config", config, "--model", model, "--verifier", "main_model", "--benchmark", benchmark,
                 "--data_root", data_root, "--out", f"{out}/{name}", "--progress", "false"])
    assert code == 0, (benchmark, code)
"""


def lmms_env(home: Path) -> dict:
    return {**os.environ, "HF_HOME": str(home / "hf_home"), "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1", "WANDB_MODE": "disabled", "TOKENIZERS_PARALLELISM": "false",
            "OMP_NUM_THREADS": "1"}


def records_of(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def by_question(records: list[dict]) -> dict:
    """Records keyed by their video file's name (through the recipe's links) and question."""
    return {(Path(os.path.realpath(r["video"])).name, r["question"]): r for r in records}


def test_lmms_eval_scores_cader_through_its_own_task_yamls_offline(tmp_path, tiny_model_dir):
    data_root, home = tmp_path / "data", tmp_path / "lmms_home"
    write_benchmarks(data_root)
    from cader.evaluate.lmms.local_data import main as local_data

    assert local_data(["--data_root", str(data_root), "--out", str(home)]) == 0
    env = lmms_env(home)
    listed = run([str(VENV / "bin" / "lmms-eval"), "models"], cwd=home, env=env)
    assert any(line.split()[:2] == ["cader", "simple"] for line in listed.splitlines())

    config = REPO / "configs" / "eval" / "cader_tiny.yaml"
    out = home / "out"
    run([str(VENV / "bin" / "lmms-eval"), "--model", "cader", "--model_args",
         f"model={tiny_model_dir},verifier=main_model,config={config},concurrency=2", "--tasks", ",".join(TASKS),
         "--output_path", str(out), "--log_samples", "--batch_size", "1", "--device", "cpu"], cwd=home, env=env)
    cader_runs = [("videomme_long", data_root, "videomme_long"), ("mlvu_dev", data_root, "mlvu_dev"),
                  ("lvbench", data_root, "lvbench"), ("longvideobench_val", data_root, "longvideobench_val_v"),
                  ("videomme_long", data_root / "v2_as_videomme", "videomme_v2")]
    run([str(VENV / "bin" / "python"), "-P", "-c", CADER_EVALS, str(config), str(tiny_model_dir),
         str(tmp_path / "cader"), *[str(x) for triple in cader_runs for x in triple]], cwd=tmp_path, env=env)

    side = records_of(out / "cader_lmms_records.jsonl")  # no records= model_arg: the side file is in --output_path
    (results_file,) = out.rglob("*_results.json")
    results = json.loads(results_file.read_text())["results"]
    for task in TASKS:
        ours = records_of(tmp_path / "cader" / task / "predictions.jsonl")
        report = json.loads((tmp_path / "cader" / task / "report.json").read_text())
        theirs = [r for r in side if r["lmms"]["task"] == task]
        assert len(theirs) == len(ours) == report["n"] == 2, task
        mine, lmms_side = by_question(ours), by_question(theirs)
        assert mine.keys() == lmms_side.keys(), task
        for key, record in mine.items():
            assert (lmms_side[key]["options"], lmms_side[key]["answer"]) == (record["options"], record["answer"])
            assert_same(method_part(lmms_side[key]), method_part(record), f"{task} {key}")
        (samples_file,) = out.rglob(f"*_samples_{task}.jsonl")
        logged = {s["doc_id"]: s for s in records_of(samples_file)}
        for record in theirs:  # lmms-eval scored the letter cader answered
            assert logged[record["lmms"]["doc_id"]]["filtered_resps"] == (record["pred"] or "")
        metric, scale = METRICS[task]
        score, accuracy = scale * results[task][metric], report["overall"]["accuracy"]
        if task == "mlvu_dev":  # lmms-eval's MLVU number: the mean over its seven fixed task types, absent ones 0
            per_type = {t: [r["correct"] for r in ours if r["meta"]["task_type"] == t] for t in MLVU_TASK_TYPES}
            accuracy = sum(100 * sum(v) / len(v) for v in per_type.values() if v) / len(MLVU_TASK_TYPES)
        assert score == pytest.approx(accuracy, abs=0.01), task

    from cader.cli.main import main

    assert main(["export-lmms", str(out / "cader_lmms_records.jsonl"), "--out", str(tmp_path / "export")]) == 0
    exported = json.loads((tmp_path / "export" / "results.json").read_text())
    assert exported["results"]["videomme_long"]["cader_accuracy,none"] == pytest.approx(
        results["videomme_long"]["videomme_perception_score,none"])
    # lmms-eval 0.7.3 builds its Instances without the doc (lmms_eval/api/task.py: `# doc=doc`), so the doc_hash
    # it logs is sha256 of json.dumps(None) for every document; the side file's is the document's
    assert all(r["lmms"]["doc_hash"] != NULL_DOC_HASH for r in side)


def test_offline_without_the_rows_lmms_eval_stops_before_the_model_loads(tmp_path):
    home = tmp_path / "empty_home"
    home.mkdir()
    said = run([str(VENV / "bin" / "lmms-eval"), "--model", "cader", "--model_args", "model=/no/such/model",
                "--tasks", "videomme_long,lvbench", "--output_path", str(tmp_path / "out"), "--batch_size", "1"],
               cwd=home, env=lmms_env(home), timeout=600, expect=1)
    assert "cader: lmms-eval is offline" in said
    assert f"videomme_long: no video folder {home / 'hf_home' / 'videomme'}, no rows {home / 'lmms-eval/Video-MME'}" in said
    assert "lvbench: no video folder" in said and "python -m cader.evaluate.lmms.local_data" in said


YAML_FACTS = """
import json, os, sys
import lmms_eval
from lmms_eval import utils
root = os.path.join(os.path.dirname(lmms_eval.__file__), "tasks")
index = {}
for folder, _, files in os.walk(root):
    for name in files:
        if name.endswith(".yaml") or name == "_default_template_yaml":
            try:
                config = utils.load_yaml_config(os.path.join(folder, name), mode="simple")
            except Exception:
                continue
            if isinstance(config, dict) and isinstance(config.get("task"), str):
                index[config["task"]] = config
print("FACTS " + json.dumps({task: {k: index[task].get(k) for k in ("dataset_path", "test_split", "dataset_kwargs")}
                            for task in sys.argv[1:]}))
"""


def test_the_recipe_matches_the_installed_task_yamls(tmp_path):
    """Each dataset's dataset_path, split and video folder are the installed built-in YAMLs' values."""
    from cader.evaluate.lmms.local_data import DATASETS

    tasks = [task for spec in DATASETS.values() for task in spec.tasks]
    said = run([str(VENV / "bin" / "python"), "-P", "-c", YAML_FACTS, *tasks], cwd=tmp_path, env=dict(os.environ))
    facts = json.loads(said.split("FACTS ", 1)[1].splitlines()[0])
    for spec in DATASETS.values():
        for task in spec.tasks:
            fact = facts[task]
            assert (fact["dataset_path"], fact["test_split"]) == (spec.dataset_path, spec.split), task
            assert fact["dataset_kwargs"]["cache_dir"] == spec.cache_dir and fact["dataset_kwargs"]["video"], task
