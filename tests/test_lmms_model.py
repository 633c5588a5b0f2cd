"""The lmms-eval model class `cader.evaluate.lmms.model.Cader` on its own, in .venv-lmms (it imports lmms-eval):
answers per request from the raw documents, a broken document becomes a failed record, a rerun resumes from the side
file by task, doc id and doc hash without running the model, an unsupported task and an unknown model_arg are
refused by name (the model_arg with SystemExit, before any model loads); concurrency=2 over requests that
interleave two videos gives the records of concurrency=1, run video by video, the replies in request order; a
multi-process launch (WORLD_SIZE=2) is refused before any model loads, with SystemExit. Skips, saying why, without
the venv."""

import json
import subprocess
from pathlib import Path

import pytest
from test_lmms_eval_run import VENV, WHY_NOT, assert_same

pytestmark = [pytest.mark.slow, pytest.mark.skipif(WHY_NOT is not None, reason=str(WHY_NOT))]
REPO = Path(__file__).resolve().parents[1]

SCRIPT = r"""
import json, os, sys
from types import SimpleNamespace
import cader.evaluate.runner as runner
from cader.evaluate.lmms.model import Cader

model, video, records = sys.argv[1:4]
config, other_video = sys.argv[4:6]
docs = [{"question_id": f"q{i}", "videoID": "v", "duration": "long", "question": f"Which one {i}?",
         "options": ["A. x", "B. y", "C. z"], "answer": "ABC"[i % 3]} for i in range(2)]
docs.append({"question_id": "broken", "question": "no options"})
def requests(task):
    return [SimpleNamespace(args=("ctx", {}, lambda doc: [video], i, task, "test")) for i in range(len(docs))]
out = {}
process_sample = runner.process_sample
first = Cader(model=model, verifier="main_model", config=config, records=records, tau=0.5)
first.task_dict = {"videomme_x": {"test": docs}}
out["answers"] = first.generate_until(requests("videomme_x"))
out["failures"] = first.failures
runner.process_sample = lambda *a, **k: (_ for _ in ()).throw(AssertionError("recomputed"))
again = Cader(model=model, verifier="main_model", config=config, records=records)
again.task_dict = {"videomme_x": {"test": docs}}
out["again"] = again.generate_until(requests("videomme_x"))
try:
    again.task_dict["mmmu_val"] = {"test": docs}
    again.generate_until(requests("mmmu_val")[:1])
except ValueError as exc:
    out["unsupported"] = str(exc)
try:
    Cader(model=model, records=records, taus=0.5)
except SystemExit as exc:  # lmms-eval catches every Exception and exits 0; a SystemExit stops it with status 1
    out["unknown"] = str(exc)
runner.process_sample = process_sample
# four questions about two videos, asked alternately: lmms-eval's order within a task is the dataset's
two = [{"question_id": f"t{i}", "videoID": "v", "duration": "long", "question": f"Where is band {i}?",
        "options": ["A. up", "B. down", "C. left", "D. right"], "answer": "ABCD"[i]} for i in range(4)]
visual = lambda doc: [video if doc["question_id"] in ("t0", "t2") else other_video]
asked = [SimpleNamespace(args=("ctx", {}, visual, i, "videomme_y", "test")) for i in range(4)]
for n in (1, 2):
    model_n = Cader(model=model, verifier="main_model", config=config, records=f"{records}.c{n}", concurrency=n)
    model_n.task_dict = {"videomme_y": {"test": two}}
    out[f"replies_c{n}"] = model_n.generate_until(asked)
os.environ["WORLD_SIZE"] = "2"
try:
    Cader(model="/no/such/model", records=records)
except SystemExit as exc:
    out["world_size"] = f"{type(exc).__name__}: {exc}"
print("RESULT " + json.dumps(out))
"""


def test_the_model_answers_resumes_and_refuses(tmp_path, tiny_model_dir, barcode_video):
    from conftest import write_barcode_video

    records = tmp_path / "records.jsonl"
    config = REPO / "configs" / "eval" / "cader_tiny.yaml"
    other_video = tmp_path / "other.mp4"
    write_barcode_video(other_video, n_frames=300, fps=10)
    done = subprocess.run([str(VENV / "bin" / "python"), "-P", "-c", SCRIPT, str(tiny_model_dir), str(barcode_video),
                           str(records), str(config), str(other_video)], cwd=tmp_path, capture_output=True, text=True,
                          timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.split("RESULT ", 1)[1])
    rows = [json.loads(line) for line in records.read_text().splitlines()]
    assert len(rows) == 3 and out["failures"] == 1
    assert [r["lmms"]["doc_id"] for r in rows] == [2, 0, 1]  # the broken document is recorded before any run
    assert out["answers"] == [rows[1]["pred"] or "", rows[2]["pred"] or "", ""]
    assert rows[0]["error"].startswith("bad_sample: videomme_x doc 2: no 'options' field")
    assert all(r["stage1"]["tau"] == 0.5 for r in rows[1:])  # a model_arg overrides the config file
    assert len({r["lmms"]["doc_hash"] for r in rows}) == 3
    assert out["again"] == out["answers"]  # from the side file: process_sample raised if called
    assert "'mmmu_val' is not supported" in out["unsupported"]
    assert out["unknown"].startswith("cader: model_args: unknown taus")

    one, two = ([json.loads(line) for line in Path(f"{records}.c{n}").read_text().splitlines()] for n in (1, 2))
    assert [r["lmms"]["doc_id"] for r in two] == [0, 2, 1, 3]  # video by video
    by_doc = {r["lmms"]["doc_id"]: r for r in two}
    assert out["replies_c2"] == [by_doc[i]["pred"] or "" for i in range(4)] == out["replies_c1"]
    assert all(r["error"] is None for r in one + two)
    assert_same(one, two)
    assert out["world_size"].startswith("Refused: cader: cader runs all of a task's documents in one process")
    assert "WORLD_SIZE=2" in out["world_size"] and "concurrency=N" in out["world_size"]
