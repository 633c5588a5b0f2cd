"""CADER as an lmms-eval model: `lmms-eval --model cader --model_args model=PATH,...` runs the whole method per
document and answers with the letter; the cader records go to a side file.

lmms-eval (0.7.3) resolves `--model cader` through the `lmms_eval.models` entry point this package declares
(`cader.evaluate.lmms.plugin:manifest`, a `ModelManifest` naming this class; lmms_eval/models/registry_v2.py). The
class is a "simple" model (lmms_eval/api/model.py `lmms`, `is_simple = True`): each `generate_until` request carries
(context, gen_kwargs, doc_to_visual, doc_id, task, split), and the raw document is `self.task_dict[task][split]
[doc_id]`. cader ignores lmms-eval's prompt: it reads the question and options from the document
(`cader.evaluate.lmms.docs`), runs Stage 1, and Stage 2 when the margin is below tau, with its own prompts, and
returns the final letter for the task's own scorer to read.

The side file (`records=`, default cader_lmms_records.jsonl) gets one predictions.jsonl record per document, with
`lmms: {task, split, doc_id, doc_hash}`; a rerun reuses the records whose task, doc id and doc hash match, so an
interrupted lmms-eval run resumes without recomputing. The side file is a cader run: `cader view` and the report
read it as such.
"""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path

import yaml
from cader.contracts.jsonl import JsonlAppender, read_jsonl, repair_torn_tail
from cader.evaluate.lmms.docs import BadDocument, doc_hash, sample_from_doc
from cader.evaluate.method.config import CaderConfig
from cader.evaluate.runner import process_sample
from lmms_eval.api.instance import Instance
from lmms_eval.api.model import lmms

log = logging.getLogger(__name__)
CONFIG_FIELDS = {f.name for f in dataclasses.fields(CaderConfig)}


def cader_config(config: str | None, calibration: str | None, overrides: dict) -> CaderConfig:
    """CADER's settings: an evaluate/run.py config file's CaderConfig fields (its other keys, such as `backend`,
    are ignored), then `overrides` (model_args), then calibration.json's T and tau."""
    values = {}
    if config:
        loaded = yaml.safe_load(Path(config).read_text(encoding="utf-8")) or {}
        values.update({k: v for k, v in loaded.items() if k in CONFIG_FIELDS})
    values.update(overrides)
    if calibration:
        from cader.calibrate.calibration_file import load_calibration

        values["temperature"], values["tau"] = load_calibration(calibration)
    return CaderConfig(**values)


def first_video(visuals) -> str:
    """The video path among what the task's doc_to_visual returned (cader reads the file itself)."""
    for item in visuals or []:
        if isinstance(item, (str, Path)):
            return str(item)
    raise BadDocument(f"doc_to_visual returned no video path: {type(visuals).__name__} {visuals!r:.120}")


def failed_record(task: str, doc_id, error: str) -> dict:
    """A predictions record for a document that could not become a sample."""
    return {"benchmark": task, "sample_id": str(doc_id), "video": "", "duration": None, "question": "",
            "options": [], "letters": [], "answer": None, "stage1": None, "route": None, "stage2": None,
            "pred": None, "correct": False, "error": error,
            "cost": {"forwards": 0, "frames_decoded": 0, "prompt_tokens": 0, "completion_tokens": 0, "seconds": 0.0}}


class Cader(lmms):
    """lmms-eval model `cader` (see the module docstring)."""

    is_simple = True

    def __init__(self, model: str, verifier: str | None = None, config: str | None = None,
                 calibration: str | None = None, records: str = "cader_lmms_records.jsonl", device: str = "cpu",
                 dtype: str = "float32", attn_implementation: str | None = None, batch_size=1, **overrides) -> None:
        """
        Args:
            model: the main model: an HF folder (cader's SFT export) or hub id
            verifier: the verifier model (default: the main model)
            config: an evaluate/run.py config file (configs/eval/cader.yaml): its CADER settings are used
            calibration: calibration.json from calibrate/fit.py: its T and tau override the config's
            records: the side file of cader records (predictions.jsonl format), appended and resumed
            device: torch device of the HF backends
            dtype: torch dtype of the HF backends
            attn_implementation: passed to transformers (None: its default)
            batch_size: lmms-eval's batch size; cader batches inside a sample, so documents run one at a time
            overrides: any CaderConfig field (tau=0.9, variant=no_stage2, ...); other keys are refused
        """
        super().__init__()
        unknown = sorted(set(overrides) - CONFIG_FIELDS)
        if unknown:
            raise ValueError(f"cader model_args: unknown {', '.join(unknown)} (CADER settings: "
                             f"{', '.join(sorted(CONFIG_FIELDS))})")
        from cader.evaluate.backends.hf import HFBackend

        self.cfg = cader_config(config, calibration, overrides)
        self.main = HFBackend(model, dtype=dtype, device=device, attn_implementation=attn_implementation)
        self.verifier = (self.main if not verifier or verifier == model else
                         HFBackend(verifier, dtype=dtype, device=device, attn_implementation=attn_implementation))
        self.records_path = Path(records)
        self.records_path.parent.mkdir(parents=True, exist_ok=True)
        repair_torn_tail(self.records_path)
        self.done = {self.key_of(r["lmms"]): r for r in read_jsonl(self.records_path) if isinstance(r.get("lmms"), dict)}
        self.failures = 0

    @staticmethod
    def key_of(lmms_block: dict) -> tuple[str, str, str]:
        return str(lmms_block.get("task")), str(lmms_block.get("doc_id")), str(lmms_block.get("doc_hash"))

    def answer(self, task: str, split: str, doc_id: int, doc_to_visual) -> dict:
        """The cader record of one document: reused from the side file, or run now and appended to it."""
        doc = self.task_dict[task][split][doc_id]
        block = {"task": task, "split": split, "doc_id": doc_id, "doc_hash": doc_hash(doc)}
        stored = self.done.get(self.key_of(block))
        if stored is not None:
            return stored
        try:
            sample = sample_from_doc(task, doc, doc_id, first_video(doc_to_visual(doc)))
        except BadDocument as exc:  # recorded as a failed sample, like a bad benchmark row in evaluate/run.py
            record = {**failed_record(task, doc_id, f"bad_sample: {exc}"), "lmms": block}
        else:
            record = {**process_sample(sample, sample.video, self.main, self.verifier, self.cfg), "lmms": block}
        with JsonlAppender(self.records_path) as out:
            out.write(record)
        self.done[self.key_of(block)] = record
        if record.get("error"):
            self.failures += 1
            log.warning("cader: %s doc %s failed: %s (answered with no letter)", task, doc_id, record["error"])
        return record

    def generate_until(self, requests: list[Instance]) -> list[str]:
        """The final letter per request; "" for a failed sample (the task's scorer counts it wrong)."""
        replies = []
        for request in requests:
            _context, _gen_kwargs, doc_to_visual, doc_id, task, split = request.args
            record = self.answer(task, split, doc_id, doc_to_visual)
            replies.append(record.get("pred") or "")
        return replies

    def loglikelihood(self, requests: list[Instance]) -> list[tuple[float, bool]]:
        raise NotImplementedError("cader answers multiple-choice video tasks through generate_until only "
                                  "(output_type: generate_until)")

    def generate_until_multi_round(self, requests) -> list[str]:
        raise NotImplementedError("cader does not run multi-round tasks")
