"""The lmms-eval model class `cader.evaluate.lmms.model.Cader` on its own, in .venv-lmms (it imports lmms-eval):
answers per request from the raw documents, a broken document becomes a failed record, a rerun resumes from the side
file by task, doc id and doc hash without running the model, an unsupported task and an unknown model_arg are
refused by name. Skips, saying why, without the venv."""

import json
import subprocess
from pathlib import Path

import pytest
from test_lmms_eval_run import VENV, WHY_NOT

pytestmark = [pytest.mark.slow, pytest.mark.skipif(WHY_NOT is not None, reason=str(WHY_NOT))]
REPO = Path(__file__).resolve().parents[1]

SCRIPT = r"""
import json, sys
from types import SimpleNamespace
import cader.evaluate.lmms.model as lmms_model
from cader.evaluate.lmms.model import Cader

model, video, records = sys.argv[1:4]
config = sys.argv[4]
docs = [{"question_id": f"q{i}", "videoID": "v", "duration": "long", "question": f"Which one {i}?",
         "options": ["A. x", "B. y", "C. z"], "answer": "ABC"[i % 3]} for i in range(2)]
docs.append({"question_id": "broken", "question": "no options"})
def requests(task):
    return [SimpleNamespace(args=("ctx", {}, lambda doc: [video], i, task, "test")) for i in range(len(docs))]
out = {}
first = Cader(model=model, config=config, records=records, tau=0.5)
first.task_dict = {"videomme_x": {"test": docs}}
out["answers"] = first.generate_until(requests("videomme_x"))
out["failures"] = first.failures
lmms_model.process_sample = lambda *a, **k: (_ for _ in ()).throw(AssertionError("recomputed"))
again = Cader(model=model, config=config, records=records)
again.task_dict = {"videomme_x": {"test": docs}}
out["again"] = again.generate_until(requests("videomme_x"))
try:
    again.task_dict["mmmu_val"] = {"test": docs}
    again.generate_until(requests("mmmu_val")[:1])
except ValueError as exc:
    out["unsupported"] = str(exc)
try:
    Cader(model=model, records=records, taus=0.5)
except ValueError as exc:
    out["unknown"] = str(exc)
print("RESULT " + json.dumps(out))
"""


def test_the_model_answers_resumes_and_refuses(tmp_path, tiny_model_dir, barcode_video):
    records = tmp_path / "records.jsonl"
    config = REPO / "configs" / "eval" / "cader_tiny.yaml"
    done = subprocess.run([str(VENV / "bin" / "python"), "-P", "-c", SCRIPT, str(tiny_model_dir), str(barcode_video),
                           str(records), str(config)], cwd=tmp_path, capture_output=True, text=True, timeout=600,
                          check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.split("RESULT ", 1)[1])
    rows = [json.loads(line) for line in records.read_text().splitlines()]
    assert len(rows) == 3 and out["failures"] == 1
    assert out["answers"] == [r["pred"] or "" for r in rows] and out["answers"][2] == ""
    assert rows[2]["error"].startswith("bad_sample: videomme_x doc 2: no 'options' field")
    assert all(r["stage1"]["tau"] == 0.5 for r in rows[:2])  # a model_arg overrides the config file
    assert [r["lmms"]["doc_id"] for r in rows] == [0, 1, 2] and len({r["lmms"]["doc_hash"] for r in rows}) == 3
    assert out["again"] == out["answers"]  # from the side file: process_sample raised if called
    assert "'mmmu_val' is not supported" in out["unsupported"]
    assert "unknown taus" in out["unknown"]
