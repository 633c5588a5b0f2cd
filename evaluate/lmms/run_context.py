"""What lmms-eval 0.7.3 does not hand a model, read from the run itself: its `--output_path` (where the side file
goes, `side_file`) and the tasks it is about to load; and what the model refuses before any model loads
(`refusal`), among it a task whose data is not there when the run is offline.

lmms-eval builds the model inside `lmms_eval.evaluator.simple_evaluate`, before it loads any task, passing only
model_args, batch_size, max_batch_size and device (`get_model(model).create_from_arg_string(...)`); the run's
parsed command line (`cli_args`, with `output_path`, also when it came from `--config`), its task list (`tasks`,
names or configs) and its `task_manager` are arguments of that function. `lmms_run` reads them from that frame of
the call stack. Outside an lmms-eval run (a test, another caller) there is no such frame and it returns None.

Why the data check: lmms-eval catches every exception of a run (lmms_eval/__main__.py, cli_evaluate: `except
Exception` -> traceback, "Error during evaluation", exit status 0), so a task whose rows or videos cannot be found
offline ("Couldn't reach 'lmms-eval/Video-MME' on the Hub") ends a run that looks successful, after the model has
loaded. With HF_HUB_OFFLINE or HF_DATASETS_OFFLINE set, cader looks first, the way lmms-eval will
(lmms_eval/api/task.py, ConfigurableTask.download): a video task needs `$HF_HOME/<dataset_kwargs.cache_dir>`
(else it calls snapshot_download), and `datasets.load_dataset(dataset_path)` needs a folder of that name in the
working directory or the dataset in the datasets cache (`<cache>/<namespace>___<snake_case name>`, datasets'
CachedDatasetModuleFactory). What is missing is named and the model refuses with SystemExit, which lmms-eval does
not catch: the run stops with status 1 before any model loads.
"""

from __future__ import annotations

import dataclasses
import inspect
import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from cader.evaluate.lmms.answering import BACKENDS, single_process_problem
from cader.evaluate.lmms.docs import UnsupportedTask, family_of
from cader.evaluate.lmms.server_args import secret_problem, server_problem, split_server_args
from cader.evaluate.method.config import CaderConfig

CONFIG_FIELDS = {f.name for f in dataclasses.fields(CaderConfig)}
SIDE_FILE = "cader_lmms_records.jsonl"
log = logging.getLogger(__name__)
TRUE = {"1", "ON", "YES", "TRUE"}  # huggingface_hub's and datasets' reading of their offline switches
OFFLINE_SWITCHES = ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE")
RECIPE = ("write them with `python -m cader.evaluate.lmms.local_data --data_root DATA --out DIR` and run lmms-eval "
          "from DIR with HF_HOME=DIR/hf_home (docs/lmms_eval.md, 'Offline data')")


@dataclass(frozen=True)
class ModelArgs:
    """The lmms-eval model's own model_args (lmms-eval passes `--model_args k=v,...`, and its --batch_size and
    --device, as keyword arguments); the other keys are CaderConfig fields and `server.<field>`, and `refusal`
    refuses any other by name.

    Attributes:
        verifier: the verifier model (default: the config file's `verifier`, else the paper's
            Qwen/Qwen3-VL-4B-Instruct); main_model: the main model verifies its own crops, which is not the paper's
            Stage 2 and costs about twice the 4B verifier (every Stage-2 record says which verifier ran)
        config: an evaluate/run.py config file (configs/eval/cader.yaml): its CADER settings are used, its
            vllm_main/vllm_verifier engine settings with backend=vllm, its `server:` block with backend=server
        calibration: calibration.json from calibrate/fit.py: its T and tau override the config's
        records: the side file of cader records (predictions.jsonl format), appended and resumed (default:
            cader_lmms_records.jsonl in lmms-eval's --output_path)
        device: torch device of the HF backends
        verifier_device: torch device of the HF verifier when it is another model (default: device)
        dtype: weights dtype of the HF and vLLM backends (default: the config file's `dtype`, as evaluate/run.py
            reads it, else bfloat16, the paper's precision; configs/eval/cader_tiny.yaml says float32)
        attn_implementation: passed to transformers (None: its default)
        backend: hf (transformers), vllm (in this process) or server (vLLM OpenAI servers: model_urls)
        model_urls: backend=server: the main model's replicas, joined with | (http://a:8000|http://b:8000)
        verifier_urls: backend=server: the verifier's replicas (needed unless verifier=main_model: then model_urls
            serve both roles)
        concurrency: documents in flight; their model calls are merged into batched calls (backend=server: about
            replicas x server.concurrency)
        batch_size: lmms-eval's batch size, unused: cader batches across the documents in flight (concurrency)
    """

    verifier: str | None = None
    config: str | None = None
    calibration: str | None = None
    records: str | None = None
    device: str = "cpu"
    verifier_device: str | None = None
    dtype: str | None = None
    attn_implementation: str | None = None
    backend: str = "hf"
    model_urls: str | None = None
    verifier_urls: str | None = None
    concurrency: int = 1
    batch_size: object = 1

    @classmethod
    def split(cls, model_args: Mapping) -> tuple[ModelArgs, dict]:
        """(the model's own model_args, the others: CaderConfig fields, `server.<field>`, unknown keys)."""
        own = {f.name for f in dataclasses.fields(cls)}
        return (cls(**{k: v for k, v in model_args.items() if k in own}),
                {k: v for k, v in model_args.items() if k not in own})


@dataclass(frozen=True)
class LmmsRun:
    """The lmms-eval run building this model: its --output_path (None when not given), task list and manager."""

    output_path: str | None
    tasks: list = field(default_factory=list)
    task_manager: object | None = None


def lmms_run(frame=None) -> LmmsRun | None:
    """The run whose `simple_evaluate` is on the call stack above `frame` (default: the caller's), else None."""
    frame = frame or inspect.currentframe()
    try:
        while frame is not None:
            if frame.f_globals.get("__name__") == "lmms_eval.evaluator" and frame.f_code.co_name == "simple_evaluate":
                found = frame.f_locals
                cli_args = found.get("cli_args")
                return LmmsRun(getattr(cli_args, "output_path", None) or None, list(found.get("tasks") or []),
                               found.get("task_manager"))
            frame = frame.f_back
        return None
    finally:
        del frame  # a frame kept alive keeps its locals (the whole run) alive


def task_configs(run: LmmsRun) -> dict[str, dict]:
    """Task name -> its YAML config, as lmms-eval indexes it (`!function` values left out), for the run's tasks
    that are task names, tags of task names, or configs (`--tasks DIR`); groups are left to lmms-eval."""
    index = getattr(run.task_manager, "task_index", None) or {}
    configs: dict[str, dict] = {}
    pending = list(run.tasks)
    while pending:
        item = pending.pop(0)
        if isinstance(item, dict) and isinstance(item.get("task"), str):
            configs[item["task"]] = item
            continue
        entry = index.get(item) if isinstance(item, str) else None
        if not entry:
            continue
        if entry.get("type") == "task":
            from lmms_eval import utils

            configs[item] = utils.load_yaml_config(entry["yaml_path"], mode="simple")
        elif entry.get("type") == "tag":
            pending.extend(name for name in entry.get("task", []) if name not in configs)
    return configs


def is_offline(environ: Mapping[str, str]) -> bool:
    return any(environ.get(name, "").strip().upper() in TRUE for name in OFFLINE_SWITCHES)


def hf_home(environ: Mapping[str, str]) -> Path:
    return Path(os.path.expanduser(environ.get("HF_HOME") or "~/.cache/huggingface"))


def in_datasets_cache(dataset_path: str, environ: Mapping[str, str]) -> bool:
    """Whether `datasets` has `dataset_path` (a Hub id) cached where its offline fallback looks."""
    from datasets.naming import camelcase_to_snakecase

    cache = (environ.get("LMMS_EVAL_DATASETS_CACHE", "").strip() or environ.get("HF_DATASETS_CACHE")
             or str(hf_home(environ) / "datasets"))
    namespace, name = dataset_path.split("/")
    return (Path(os.path.expanduser(cache)) / f"{namespace}___{camelcase_to_snakecase(name)}").is_dir()


def missing_offline_data(config: dict, environ: Mapping[str, str], cwd: Path) -> list[str]:
    """What an offline lmms-eval would fail to find for one task config (empty when all is there)."""
    kwargs = config.get("dataset_kwargs") or {}
    missing = []
    cache_dir = kwargs.get("cache_dir")
    if kwargs.get("video") and isinstance(cache_dir, str):
        folder = Path(os.path.expanduser(os.path.expandvars(cache_dir)))
        folder = folder if folder.is_absolute() else hf_home(environ) / folder  # lmms_eval.utils.resolve_cache_dir
        if not folder.is_dir():
            missing.append(f"no video folder {folder}")
    path = config.get("dataset_path")
    hub_id = isinstance(path, str) and path.count("/") == 1 and not Path(path).is_absolute()
    if hub_id and not kwargs.get("load_from_disk") and not (cwd / path).is_dir() and not in_datasets_cache(path, environ):
        missing.append(f"no rows {cwd / path} (a folder named like its dataset_path, in the working directory) and "
                       f"no {path} in the datasets cache")
    return missing


def offline_data_problem(configs: Mapping[str, dict], environ: Mapping[str, str], cwd: Path) -> str | None:
    """Why the run's tasks cannot load offline, naming each task and what it lacks; None when online or all there."""
    if not is_offline(environ):
        return None
    lacking = {task: missing_offline_data(config, environ, cwd) for task, config in configs.items()}
    lacking = {task: missing for task, missing in lacking.items() if missing}
    if not lacking:
        return None
    named = "; ".join(f"{task}: {', '.join(missing)}" for task, missing in lacking.items())
    return (f"lmms-eval is offline ({'/'.join(OFFLINE_SWITCHES)}) and cannot find its tasks' data, so it would "
            f"load the model, fail to load the task and exit 0 -- {named}. {RECIPE[0].upper()}{RECIPE[1:]}")


def side_file(records: str | None, run: LmmsRun | None) -> Path:
    """The side file: `records` when given, else cader_lmms_records.jsonl in the run's --output_path (the working
    directory, said in the log, when the run has none)."""
    if records:
        return Path(records)
    if run is not None and run.output_path:
        return Path(run.output_path) / SIDE_FILE
    log.warning("cader: lmms-eval has no --output_path; the side file goes to %s", Path.cwd() / SIDE_FILE)
    return Path(SIDE_FILE)


def refusal(overrides: dict, concurrency, backend: str, run: LmmsRun | None, environ, cwd: Path, *,
            model_urls=None, verifier_urls=None, config_server: dict | None = None) -> str | None:
    """Why this run cannot go ahead (checked before any model loads), or None.

    Args:
        overrides: the model_args beyond the named ones (CaderConfig fields, `server.<field>`)
        concurrency: the concurrency= model_arg
        backend: the backend= model_arg
        run: the lmms-eval run (None outside one)
        environ: the environment (WORLD_SIZE, the offline switches)
        cwd: the working directory (where lmms-eval looks for a task's rows)
        model_urls: the model_urls= model_arg (backend=server)
        verifier_urls: the verifier_urls= model_arg
        config_server: the `server:` block of the config= file
    """
    problem = single_process_problem(environ)
    if problem:
        return problem
    if backend not in BACKENDS:
        return f"model_args: backend={backend!r}; choose one of {', '.join(BACKENDS)}"
    problem = secret_problem(overrides)
    if problem:
        return problem
    server_values, overrides = split_server_args(overrides)
    problem = server_problem(backend, model_urls, verifier_urls, server_values, config_server)
    if problem:
        return problem
    unknown = sorted(set(overrides) - CONFIG_FIELDS)
    if unknown:
        own = sorted(["model", *(f.name for f in dataclasses.fields(ModelArgs))])
        return (f"model_args: unknown {', '.join(unknown)} (CADER settings: {', '.join(sorted(CONFIG_FIELDS))}; "
                f"the model's own: {', '.join(own)})")
    if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
        return f"model_args: concurrency must be a whole number >= 1, got {concurrency!r}"
    if run is None:
        return None
    configs = task_configs(run)
    for task in configs:
        try:
            family_of(task)
        except UnsupportedTask as exc:
            return str(exc)
    return offline_data_problem(configs, environ, cwd)
