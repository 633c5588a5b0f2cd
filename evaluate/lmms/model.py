"""CADER as an lmms-eval model: `lmms-eval --model cader --model_args model=PATH,...` runs the whole method per
document and answers with the letter; the cader records go to a side file.

lmms-eval (0.7.3) resolves `--model cader` through the `lmms_eval.models` entry point this package declares
(`cader.evaluate.lmms.plugin:manifest`, a `ModelManifest` naming this class; lmms_eval/models/registry_v2.py). The
class is a "simple" model (lmms_eval/api/model.py `lmms`, `is_simple = True`): each `generate_until` request carries
(context, gen_kwargs, doc_to_visual, doc_id, task, split), and the raw document is `self.task_dict[task][split]
[doc_id]`. cader ignores lmms-eval's prompt: it reads the question and options from the document
(`cader.evaluate.lmms.docs`), runs Stage 1, and Stage 2 when the margin is below tau, with its own prompts, and
returns the final letter for the task's own scorer to read.

The side file (`records=`, default `<--output_path>/cader_lmms_records.jsonl`, the working directory only when the run
has no --output_path) gets one predictions.jsonl record per document, with `lmms: {task, split, doc_id,
doc_hash}`; a rerun reuses the records whose task, doc id and doc hash match, so an interrupted lmms-eval run
resumes without recomputing. The side file is a cader run: `cader view` and the report read it as such.

Before any model loads, the model refuses, with SystemExit (status 1; lmms-eval turns any Exception into a
traceback and exit status 0): a multi-process launch, an unknown or bad model_arg, a task cader cannot read, and,
when HF_HUB_OFFLINE/HF_DATASETS_OFFLINE is set, a task whose rows or videos are not where lmms-eval will look
(`cader.evaluate.lmms.run_context`).

With `backend=server` the model calls go to vLLM OpenAI servers (`cader.evaluate.backends.server`, docs/serving.md):
`model_urls=` (and `verifier_urls=`) list the replicas, joined with `|` because lmms-eval splits model_args on
commas, and `server.<field>=` sets what evaluate/run.py's `--server.<field>` sets (`cader.evaluate.lmms.server_args`).
`model=` still names the model: its processor renders the prompts here. A server that cannot give exact scores is
refused at start, naming the server flag it lacks (the backend's probe); requests sent and failed per replica go to
`<side file stem>.server_routing.json` beside the side file.

`generate_until` runs all of the requests it is given (lmms-eval gives it every request of the run at once) as one
CADER run, grouped by video, `concurrency=` samples in flight (`cader.evaluate.lmms.answering`). lmms-eval's
multi-process launch is refused: it would split a video's questions over processes.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

import yaml
from cader.contracts.paper import PAPER, SELF_VERIFIER
from cader.evaluate.lmms.answering import (
    DocRequest,
    SideFile,
    answer_requests,
    load_backends,
    run_grouped,
    verifier_model,
    weights_dtype,
)
from cader.evaluate.lmms.run_context import CONFIG_FIELDS, ModelArgs, lmms_run, refusal, side_file
from cader.evaluate.lmms.server_args import ServerRefusal, load_servers, split_server_args
from cader.evaluate.method.config import CaderConfig
from cader.vlm.files import write_json_atomic
from lmms_eval.api.instance import Instance
from lmms_eval.api.model import lmms

log = logging.getLogger(__name__)


class Refused(SystemExit):
    """The model will not run this lmms-eval run; the message says why. A SystemExit, so that lmms-eval, which
    reports any Exception and exits 0, stops with status 1."""

    def __init__(self, why: str):
        super().__init__(f"cader: {why}")


def read_config(config: str | None) -> dict:
    """An evaluate/run.py config file's keys ({} without one)."""
    return (yaml.safe_load(Path(config).read_text(encoding="utf-8")) or {}) if config else {}


def write_server_routing(side: Path, main, verifier) -> Path | None:
    """Requests sent and failed per replica, and per frame set the replica(s) that answered, of each server backend
    (evaluate/run.py's server_routing.json), beside the side file; None without server backends."""
    roles = {"model": main} | ({} if verifier is main else {"verifier": verifier})
    accounting = {role: b.accounting() for role, b in roles.items() if hasattr(b, "accounting")}
    if not accounting:
        return None
    return write_json_atomic(side.with_name(f"{side.stem}.server_routing.json"), accounting)


def cader_config(config: str | None, calibration: str | None, overrides: dict) -> CaderConfig:
    """CADER's settings: an evaluate/run.py config file's CaderConfig fields (its other keys, such as `backend`,
    are ignored), then `overrides` (model_args), then calibration.json's T and tau."""
    values = {k: v for k, v in read_config(config).items() if k in CONFIG_FIELDS}
    values.update(overrides)
    if calibration:
        from cader.calibrate.calibration_file import load_calibration

        values["temperature"], values["tau"] = load_calibration(calibration)
    return CaderConfig(**values)


def say_which_verifier(model: str, verifier: str, needs_verifier: bool) -> None:
    """One log line naming the verifier; a warning when the main model verifies its own crops."""
    if not needs_verifier:
        return
    if verifier == model:
        log.warning("cader: the main model verifies its own crops (verifier=%s, or the model named again): not the "
                    "paper's Stage 2, whose verifier is %s; every Stage-2 record says so", SELF_VERIFIER, PAPER.verifier)
    else:
        log.info("cader: verifier %s%s", verifier, " (the paper's)" if verifier == PAPER.verifier else "")


class Cader(lmms):
    """lmms-eval model `cader` (see the module docstring)."""

    is_simple = True

    def __init__(self, model: str, **model_args) -> None:
        """
        Args:
            model: the main model: an HF folder (cader's SFT export) or hub id; with backend=server, the model the
                servers serve (its processor renders the prompts here)
            model_args: the model's own settings (`ModelArgs`: verifier, config, calibration, records, device,
                verifier_device, dtype, attn_implementation, backend, model_urls, verifier_urls, concurrency,
                batch_size); any CaderConfig field (tau=0.9, variant=no_stage2, ...); with backend=server, any
                `server.<field>` of evaluate/run.py's --server.<field> (server.concurrency=4, server.timeout_s=600,
                server.retries=4, ...); other keys are refused
        """
        super().__init__()
        args, overrides = ModelArgs.split(model_args)
        run = lmms_run()
        if args.config and not Path(args.config).is_file():
            raise Refused(f"model_args: config={args.config}: no such file")
        settings = read_config(args.config)
        why = refusal(overrides, args.concurrency, args.backend, run, os.environ, Path.cwd(),
                      model_urls=args.model_urls, verifier_urls=args.verifier_urls,
                      config_server=settings.get("server"))
        if why:  # before any model loads: seconds
            raise Refused(why)
        server_values, overrides = split_server_args(overrides)
        self.cfg = cader_config(args.config, args.calibration, overrides)
        self.concurrency = args.concurrency
        self.verifier_path = verifier_model(args.verifier, settings, model)
        needs_verifier = self.cfg.uses_verifier and self.cfg.runs_stage2
        say_which_verifier(model, self.verifier_path, needs_verifier)
        if args.backend == "server":
            try:
                self.main, self.verifier = load_servers(model, self.verifier_path, args.model_urls, args.verifier_urls,
                                                        needs_verifier, server_values, settings.get("server"))
            except ServerRefusal as err:
                raise Refused(str(err)) from None
        else:
            self.main, self.verifier = load_backends(
                args.backend, model, self.verifier_path, device=args.device, verifier_device=args.verifier_device,
                dtype=weights_dtype(args.dtype, settings), attn_implementation=args.attn_implementation,
                engines=settings)
        self.side = SideFile(side_file(args.records, run))
        self.records_path = self.side.path

    @property
    def failures(self) -> int:
        """Documents this process recorded as failed (answered with no letter)."""
        return self.side.failures

    def run(self, samples: list):
        """The records of `samples` (a video's adjacent), in their order, `concurrency` in flight."""
        return run_grouped(samples, self.main, self.verifier, self.cfg, self.concurrency)

    def generate_until(self, requests: list[Instance]) -> list[str]:
        """The final letter per request, in request order; "" for a failed sample (the task's scorer counts it
        wrong)."""
        asked = []
        for request in requests:
            _context, _gen_kwargs, doc_to_visual, doc_id, task, split = request.args
            asked.append(DocRequest(task, split, doc_id, self.task_dict[task][split][doc_id], doc_to_visual))
        records = answer_requests(asked, self.side, self.run)
        write_server_routing(self.side.path, self.main, self.verifier)
        return [record.get("pred") or "" for record in records]

    def loglikelihood(self, requests: list[Instance]) -> list[tuple[float, bool]]:
        raise NotImplementedError("cader answers multiple-choice video tasks through generate_until only "
                                  "(output_type: generate_until)")

    def generate_until_multi_round(self, requests) -> list[str]:
        raise NotImplementedError("cader does not run multi-round tasks")
