"""How the lmms-eval model `cader` answers a batch of requests, without lmms-eval itself (so it is tested alone).

lmms-eval 0.7.3 hands a simple model every request of one type in a single call (lmms_eval/evaluator.py
`simple_evaluate`/`evaluate`: the Instances of all tasks, each cloned `repeats` times, then
`getattr(lm, reqtype)(cloned_reqs)`, the replies zipped back onto the requests by position; its response cache
passes the uncached ones, also in one call). `answer_requests` turns that call into one CADER run:
- every document becomes a cader sample; one that cannot (a missing field, no video path, a video the task's
  doc_to_visual cannot find: lmms-eval's task utils then call sys.exit or assert) gets a failed record in the side
  file at once, as a bad benchmark row or a missing video does in evaluate/run.py, and the run goes on;
- documents already in the side file (same task, doc id and doc hash) are not run again; a document asked twice in
  one call runs once;
- the rest run together, ordered so that a video's questions are adjacent (videos in the order they are first asked
  about, across tasks: videomme and videomme_long share videos), each video read through one reader whose Stage-1
  decode and repeated crops its questions share, `concurrency` samples in flight whose model calls are merged
  into batched calls: the runner's own `records_of`, so the records are `cader eval`'s (`run_grouped`);
- each record is appended to the side file as it comes, so an interrupted run resumes; the replies come back in
  request order.

One process only: lmms-eval shards a task's documents round-robin over its processes (`task.build_all_requests
(rank=RANK, world_size=WORLD_SIZE)`, every WORLD_SIZE-th document), which sends a video's questions to different
processes, and each process zips its replies onto its own requests and scores them before rank 0 gathers the
results: a model gets no hook to answer another rank's documents. `single_process_problem` refuses that launch by
name and says what to use instead.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from cader.contracts.jsonl import JsonlAppender, exclusive_writer, read_jsonl, repair_torn_tail
from cader.contracts.paper import PAPER, is_self_verifier
from cader.evaluate.lmms.docs import BadDocument, doc_hash, family_of, sample_from_doc
from cader.evaluate.video_groups import group_by_video
from tqdm import tqdm

log = logging.getLogger(__name__)
BACKENDS = ("hf", "vllm", "server")  # server: cader.evaluate.lmms.server_args


def single_process_problem(environ: Mapping[str, str]) -> str | None:
    """Why cader cannot run under this launch (None when it can): lmms-eval reads WORLD_SIZE, as set by
    `accelerate launch` or torchrun, to shard the documents round-robin (see the module docstring)."""
    raw = environ.get("WORLD_SIZE", "1") or "1"
    try:
        world_size = int(raw)
    except ValueError:
        return f"WORLD_SIZE={raw!r} is not a process count"
    if world_size <= 1:
        return None
    return (f"cader runs all of a task's documents in one process, but lmms-eval was started with WORLD_SIZE="
            f"{world_size}: it would deal every {world_size}th document to each process, splitting a video's "
            "questions between them. Start `python -m lmms_eval` as one process (no accelerate launch/torchrun) and "
            "parallelise inside it with the model_args concurrency=N (samples in flight, batched model calls), "
            "device=/verifier_device= (main model and verifier on their own GPUs), backend=vllm, or backend=server "
            "(vLLM servers, docs/lmms_eval.md); or run "
            "`cader eval --devices N`, which shards by video, and `cader export-lmms` its predictions")


def run_grouped(samples: Sequence, main, verifier, cfg, concurrency: int) -> Iterator[dict]:
    """The records of `samples` (a video's questions adjacent, as `answer_requests` orders them), in their order,
    through the runner's own `records_of`: one group per video, `concurrency` in flight, so they are `cader eval`'s
    records of the same samples (timings aside).

    Args:
        samples: the samples, grouped by video
        main: the main model's backend
        verifier: the verifier's backend
        cfg: CADER's settings
        concurrency: samples in flight
    """
    from cader.evaluate.runner import records_of

    run = records_of(samples, main, verifier, cfg, lambda sample: sample.video, concurrency=concurrency)
    for expected, (sample, record) in zip(samples, run, strict=True):
        if sample is not expected:  # the runner keeps a grouped list's order; a reorder would misfile records
            raise RuntimeError(f"cader: the runner reordered the samples ({sample.sample_id} before "
                               f"{expected.sample_id}); the samples must come grouped by video")
        yield record


@dataclass(frozen=True)
class DocRequest:
    """One lmms-eval request as cader needs it: the raw document and the task's doc_to_visual."""

    task: str
    split: str
    doc_id: int
    doc: dict
    doc_to_visual: Callable

    def block(self) -> dict:
        """The record's `lmms` block: what joins it to lmms-eval's samples file and keys the resume."""
        return {"task": self.task, "split": self.split, "doc_id": self.doc_id, "doc_hash": doc_hash(self.doc)}


def key_of(lmms_block: dict) -> tuple[str, str, str]:
    return str(lmms_block.get("task")), str(lmms_block.get("doc_id")), str(lmms_block.get("doc_hash"))


def first_video(visuals) -> str:
    """The video path among what the task's doc_to_visual returned (cader reads the file itself)."""
    for item in visuals or []:
        if isinstance(item, (str, Path)):
            return str(item)
    raise BadDocument(f"doc_to_visual returned no video path: {type(visuals).__name__} {visuals!r:.120}")


def visuals_of(request: DocRequest):
    """What the task's doc_to_visual returns; BadDocument when it stops instead: lmms-eval 0.7.3's task utils end
    the whole process on one missing video (videomme, mlvu, videomme_v2: sys.exit; lvbench: assert), which would
    lose every other document's answer."""
    try:
        return request.doc_to_visual(request.doc)
    except (SystemExit, AssertionError, OSError) as exc:
        why = str(exc) or type(exc).__name__
        raise BadDocument(f"{request.task} doc {request.doc_id}: its doc_to_visual stopped ({why})") from None


def failed_record(task: str, doc_id, error: str) -> dict:
    """A predictions record for a document that could not become a sample."""
    return {"benchmark": task, "sample_id": str(doc_id), "video": "", "duration": None, "question": "",
            "options": [], "letters": [], "answer": None, "stage1": None, "route": None, "stage2": None,
            "pred": None, "correct": False, "error": error,
            "cost": {"forwards": 0, "frames_decoded": 0, "prompt_tokens": 0, "completion_tokens": 0, "seconds": 0.0}}


class SideFile:
    """The side file of cader records (predictions.jsonl format plus the `lmms` block), by task, doc id and doc hash.

    Args:
        path: the JSONL file; a torn last line (a killed run) is repaired, then its records count as done
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        repair_torn_tail(self.path)
        self.done = {key_of(r["lmms"]): r for r in read_jsonl(self.path) if isinstance(r.get("lmms"), dict)}
        self.failures = 0  # records written by this process with `error` set

    def add(self, out: JsonlAppender, record: dict) -> None:
        out.write(record)
        self.done[key_of(record["lmms"])] = record
        if record.get("error"):
            self.failures += 1
            block = record["lmms"]
            log.warning("cader: %s doc %s failed: %s (answered with no letter)", block["task"], block["doc_id"],
                        record["error"])


def answer_requests(requests: Sequence[DocRequest], side: SideFile,
                    run: Callable[[list], Iterable[dict]], progress: bool | None = None) -> list[dict]:
    """The cader record of each request, in request order (see the module docstring).

    Args:
        requests: the documents asked about, in lmms-eval's order
        side: the side file: its records are reused, new ones appended to it
        run: runs a list of samples and yields one record per sample, in that list's order
        progress: a tqdm bar over the samples run (None: only on a terminal)
    """
    for task in dict.fromkeys(request.task for request in requests):
        family_of(task)  # an unsupported task is refused before anything runs or is written
    keys, todo = [], {}
    with exclusive_writer(side.path), JsonlAppender(side.path, fsync=True) as out:
        for request in requests:
            block = request.block()
            key = key_of(block)
            keys.append(key)
            if key in side.done or key in todo:
                continue
            try:
                video = first_video(visuals_of(request))
                sample = sample_from_doc(request.task, request.doc, request.doc_id, video)
            except BadDocument as exc:  # recorded as a failed sample, like a bad benchmark row in evaluate/run.py
                side.add(out, {**failed_record(request.task, request.doc_id, f"bad_sample: {exc}"), "lmms": block})
                continue
            todo[key] = (block, sample)
        pending = [item for group in group_by_video(todo.values(), key=lambda item: str(item[1].video))
                   for item in group]
        log.info("cader: %d requests, %d documents to run (%d videos), the rest from %s", len(requests),
                 len(pending), len({str(sample.video) for _, sample in pending}), side.path)
        records = run([sample for _, sample in pending])
        bar = tqdm(records, total=len(pending), desc="cader", unit="doc",
                   disable=None if progress is None else not progress)  # tqdm: None = off unless a terminal
        failed_before = side.failures
        for (block, _sample), record in zip(pending, bar, strict=True):
            side.add(out, {**record, "lmms": block})
        if pending:
            log.info("cader: ran %d documents, %d failed (no letter); records in %s", len(pending),
                     side.failures - failed_before, side.path)
    return [side.done[key] for key in keys]


def weights_dtype(given: str | None, config: Mapping) -> str:
    """The backends' weights dtype: the dtype= model_arg, else the config file's `dtype` (evaluate/run.py reads the
    same key: float32 in configs/eval/cader_tiny.yaml), else bfloat16, the paper's precision (as evaluate/run.py)."""
    return given or config.get("dtype") or PAPER.dtype


def verifier_model(given: str | None, config: Mapping, model: str) -> str:
    """The verifier's folder or hub id: the verifier= model_arg, else the config file's `verifier` (evaluate/run.py
    reads the same key), else the paper's Qwen3-VL-4B-Instruct; `main_model` (SELF_VERIFIER) names the main model
    `model` itself, which then verifies its own crops (not the paper's Stage 2)."""
    chosen = given or config.get("verifier") or PAPER.verifier
    return model if is_self_verifier(chosen, model) else chosen


def load_backends(backend: str, model: str, verifier: str, *, device: str, verifier_device: str | None,
                  dtype: str, attn_implementation: str | None, engines: Mapping[str, dict]):
    """(main, verifier) backends; one copy when the verifier is the main model.

    Args:
        backend: hf (transformers) or vllm
        model: the main model's folder or hub id
        verifier: the verifier's (`verifier_model`; `model` itself when the main model verifies)
        device: torch device of the HF main model
        verifier_device: torch device of the HF verifier when it is another model (None: `device`)
        dtype: weights dtype
        attn_implementation: HF attention kernel (None: transformers' choice)
        engines: vLLM engine settings per role ("vllm_main", "vllm_verifier"), as in an evaluate/run.py config file
    """
    if backend not in BACKENDS or backend == "server":  # the server's backends: server_build.load_server_backends
        raise ValueError(f"cader model_args: backend={backend!r}; choose one of hf, vllm")

    def load(path: str, role: str, on: str):
        if backend == "vllm":
            from cader.evaluate.backends.vllm import VERIFIER_ENGINE, VLLMBackend, VLLMEngineConfig

            default = VERIFIER_ENGINE if role == "vllm_verifier" else VLLMEngineConfig()
            settings = engines.get(role)
            engine = VLLMEngineConfig(**settings) if settings else default
            return VLLMBackend(path, dtype=dtype, engine=engine)
        from cader.evaluate.backends.hf import HFBackend

        return HFBackend(path, dtype=dtype, device=on, attn_implementation=attn_implementation)

    main = load(model, "vllm_main", device)
    if verifier == model:
        return main, main
    return main, load(verifier, "vllm_verifier", verifier_device or device)
