"""Run CADER on one benchmark and write predictions.jsonl, report.json and report.md.

    python evaluate/run.py --config configs/eval/cader.yaml --model PATH --verifier PATH --benchmark NAME \
        --data_root DIR --out DIR [--calibration FILE | --temperature T --tau TAU] [--variant V] [--limit N] \
        [--shard I/N]
    python evaluate/run.py --merge true --out DIR        # join shard files, then write the report

The run's own flags (models, inputs, outputs, runtime, parallelism) are the fields of
cader.evaluate.run_options.RunOptions. Every CADER constant (r1, temperature, tau, delta, k_reflections, f_min,
n_budget, r_min, r_max, min_crop, breadth limits, frame/pixel budgets, ...) is also a flag; see
cader.evaluate.method.config.CaderConfig.
--calibration (calibration.json from calibrate/fit.py) sets temperature and tau, overriding the flags.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import sys
import typing
from contextlib import ExitStack
from pathlib import Path
from typing import Literal

from cader.cli.docstrings import argument_help
from cader.cli.function_cli import extend_help, function_parser
from cader.contracts.jsonl import FileInUse, exclusive_writer
from cader.evaluate.backends.base import BackendError
from cader.evaluate.backends.server import ServerOptions
from cader.evaluate.backends.server_build import MissingServers, server_roles, split_urls
from cader.evaluate.backends.vllm import VLLMEngineConfig
from cader.evaluate.benchmarks import available as available_benchmarks
from cader.evaluate.launch import done_marker, launch, launched_rank, rank_device, wait_for_shards
from cader.evaluate.method.config import CROP_EDGE_MODES, P_YES_MODES, VARIANTS, CaderConfig
from cader.evaluate.method.stage1_reuse import Stage1ReuseError
from cader.evaluate.report import write_report
from cader.evaluate.run_checks import argument_problems, calibration_binding, path_problems
from cader.evaluate.run_options import RunOptions
from cader.evaluate.runner import (
    load_stage1_priors,
    merge_shards,
    parse_shard,
    predictions_path,
    read_records,
    run_samples,
    run_variants,
    select_samples,
)
from cader.vlm.files import write_json_atomic
from jsonargparse import ArgumentParser

log = logging.getLogger("cader.evaluate.run")

# CaderConfig fields that take one of a few values: typed as a Literal so that --help prints them as choices
CHOICES = {"variant": VARIANTS, "crop_edge": CROP_EDGE_MODES, "p_yes_mode": P_YES_MODES}


class RunError(Exception):
    """A whole-run problem (an unreadable input, a model that does not load, an output in use): one line, exit 2."""


def build_parser(prog: str | None = None) -> ArgumentParser:
    """The flags of evaluate/run.py: RunOptions' fields, then every CaderConfig field.

    prog: the program name the usage shows.
    """
    parser = function_parser(RunOptions, prog, description=__doc__.split("\n\n")[0])
    extend_help(parser, "benchmark", "one of: " + ", ".join(available_benchmarks()))
    extend_help(parser, "variants", "variants: " + ", ".join(VARIANTS))
    add_cader_arguments(parser)
    return parser


def add_cader_arguments(parser: ArgumentParser) -> None:
    """One flag per CaderConfig field, its help from the field's description and its choices as a Literal.

    parser: the parser the flags are added to.
    """
    types = typing.get_type_hints(CaderConfig)
    for name, choices in CHOICES.items():
        types[name] = Literal[choices]
    descriptions = argument_help(CaderConfig)
    group = parser.add_argument_group("CADER's settings (cader.evaluate.method.config.CaderConfig)")
    for f in dataclasses.fields(CaderConfig):
        group.add_argument(f"--{f.name}", type=types[f.name], default=f.default, help=descriptions[f.name])


def make_backend(kind: str, path: str, device: str, dtype: str, attn_implementation: str | None, engine=None,
                 urls: list[str] | None = None, server: ServerOptions | None = None,
                 max_batch_tokens: int | None = None):
    """A loaded model: HFBackend, VLLMBackend or ServerBackend.

    kind: hf, vllm or server.
    path: the model's folder or hub id.
    device: the HF backend's torch device.
    dtype: the weights dtype (auto: the checkpoint's).
    attn_implementation: the HF attention kernel (None: transformers' choice).
    engine: the vLLM engine settings (VLLMEngineConfig).
    urls: the server backend's replicas.
    server: the server backend's options (ServerOptions).
    max_batch_tokens: the HF backend's padded tokens per forward (None: its default).
    """
    if kind == "server":
        from cader.evaluate.backends.server import ServerBackend

        return ServerBackend(path, urls or [], server)
    if kind == "vllm":
        from cader.evaluate.backends.vllm import VLLMBackend

        return VLLMBackend(path, dtype=dtype, engine=engine)
    from cader.evaluate.backends.hf import HFBackend

    budget = {} if max_batch_tokens is None else {"max_batch_tokens": max_batch_tokens}
    return HFBackend(path, dtype=dtype, device=device, attn_implementation=attn_implementation, **budget)


def variant_configs(variants: str | None, values: dict) -> dict[str, CaderConfig] | None:
    """`--variants all` or a comma list -> {variant: its CaderConfig}; None when unset.

    variants: the --variants value.
    values: every CaderConfig field's value; each variant's config takes them with its own `variant`.
    """
    if not variants:
        return None
    names = list(VARIANTS) if variants.strip() == "all" else [v.strip() for v in variants.split(",") if v.strip()]
    unknown = [v for v in names if v not in VARIANTS]
    if unknown:
        raise RunError(f"unknown variant(s) {unknown}; choose from {list(VARIANTS)} or 'all'")
    return {v: CaderConfig(**{**values, "variant": v}) for v in names}


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    """Parse the flags, check them, then run the mode they ask for (`run_mode`).

    Exit 0 on success; 2, with one line on stderr naming the flag or file, for a bad flag value, a missing input, a
    model that cannot be loaded or an output another run is writing. A bad sample never ends the run.

    argv: the flags (default: sys.argv[1:]).
    prog: the program name the usage shows (the `cader` subcommand).
    """
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_arguments(argv, prog)
    problems = argument_problems(args) + path_problems(args)
    if problems:
        return refuse(*problems)
    try:
        return run_mode(args, argv)
    except RunError as err:
        return refuse(str(err))


def parse_arguments(argv: list[str], prog: str | None = None):
    """The parsed flags, the vLLM engine groups as VLLMEngineConfig objects.

    argv: the flags.
    prog: the program name the usage shows.
    """
    args = build_parser(prog).parse_args(argv)
    # jsonargparse keeps dataclass-typed groups as namespaces until instantiated
    args.vllm_main, args.vllm_verifier = (VLLMEngineConfig(**dict(vars(ns))) if not isinstance(ns, VLLMEngineConfig)
                                          else ns for ns in (args.vllm_main, args.vllm_verifier))
    if not isinstance(args.server, ServerOptions):
        args.server = ServerOptions(**dict(vars(args.server)))
    return args


def refuse(*problems: str) -> int:
    """Print each problem as one `error:` line on stderr; return exit code 2.

    problems: the lines to print.
    """
    for problem in problems:
        print(f"error: {problem}", file=sys.stderr)
    return 2


def run_mode(args, argv: list[str]) -> int:
    """One of four modes: the launcher of a multi-device run (`launch_ranks`), a merge of shard files
    (`merge_run`), several Table 2 variants in one pass or a run of one configuration (`run_benchmark`).
    A torchrun rank runs its shard on its device.

    args: the checked flags.
    argv: the flags as given (the launcher hands them on to its ranks).
    """
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rank = launched_rank()
    if args.devices * args.num_nodes > 1 and rank is None:  # this process is the launcher
        return launch_ranks(args, argv, out)
    if rank is not None:  # a torchrun rank: its shard, its device
        args.shard, args.device = f"{rank[0]}/{rank[1]}", rank_device(args.device, rank[2])
        done_marker(predictions_path(out, parse_shard(args.shard))).unlink(missing_ok=True)  # a rerun's old marker
    values = cader_values(args)
    try:
        cfg = CaderConfig(**values)
    except ValueError as err:  # CaderConfig's own checks (r_min <= r_max, counts >= 1, ...)
        raise RunError(str(err)) from None
    binding, binding_line = calibration_binding(args, values)
    if binding is not None and not binding["holds"] and not binding["accepted_mismatch"]:
        raise RunError(binding_line)
    if binding_line:   # the mismatch was accepted: say so, so that the warning explains itself
        log.warning("%s; used anyway, as --accept_calibration_mismatch true asks: exits here carry no guarantee, "
                    "and report.md says so", binding_line)
    config_record = {
        **cfg.to_dict(),
        "model": args.model,
        "verifier": args.verifier or args.model,
        "benchmark": args.benchmark,
        "calibration": args.calibration,
        "calibration_binding": binding,
    }
    compare = read_records(args.compare) if args.compare else None
    if args.merge:
        return merge_run(out, config_record, compare)
    return run_benchmark(args, out, values, cfg, rank, config_record, compare)


def launch_ranks(args, argv: list[str], out: Path) -> int:
    """The launcher: torchrun starts one rank per device, each a shard; node 0 then merges them and writes the report.

    args: the checked flags.
    argv: the flags as given, handed on to the ranks.
    out: the output folder.
    """
    if args.shard or args.merge:
        return refuse("--devices/--num_nodes shard the run themselves; drop --shard/--merge")
    code = launch(args.devices, args.num_nodes, argv)
    if code != 0 or int(os.environ.get("NODE_RANK", "0")) != 0:
        return code
    wait_for_shards(out, args.devices * args.num_nodes)
    return main([*argv, "--merge", "true", "--devices", "1", "--num_nodes", "1"])


def cader_values(args) -> dict:
    """Every CaderConfig field's value from its flag, T and tau from --calibration when it is given.

    args: the checked flags.
    """
    values = {f.name: getattr(args, f.name) for f in dataclasses.fields(CaderConfig)}
    if args.calibration:
        from cader.calibrate.calibration_file import CalibrationFileError, load_calibration

        try:
            values["temperature"], values["tau"] = load_calibration(args.calibration)
        except CalibrationFileError as err:
            raise RunError(f"--calibration {err}") from None
        # 4 significant digits for reading; the run uses (and report.json records) the full values
        log.info("calibration %s: T = %.4g, tau = %.4g", args.calibration, values["temperature"], values["tau"])
    return values


def merge_run(out: Path, config_record: dict, compare: list[dict] | None) -> int:
    """Join the shard files in `out` into predictions.jsonl and write the report; runs nothing.

    out: the output folder holding the shard files.
    config_record: the report's `config` block.
    compare: another run's records, compared with this one in the report.
    """
    try:
        target, n = merge_shards(out)
    except FileInUse as err:
        raise RunError(str(err)) from None
    log.info("merged %d records into %s", n, target)
    load_errors_file = out / "load_errors.json"
    errors = json.loads(load_errors_file.read_text()) if load_errors_file.exists() else []
    write_report(out, read_records(target), errors, config_record, compare)
    return 0


def run_benchmark(args, out: Path, values: dict, cfg: CaderConfig, rank, config_record: dict,
                  compare: list[dict] | None) -> int:
    """Claim the output files, load the benchmark and the models, run its samples (one configuration, or every
    --variants row in one pass) and write the report(s); a rank then marks its shard done.

    args: the checked flags.
    out: the output folder.
    values: every CaderConfig field's value (each variant's config is built from them).
    cfg: the run's CaderConfig.
    rank: (rank, world size, local rank) of a torchrun rank, else None.
    config_record: the report's `config` block; the backends' descriptions are added to it.
    compare: another run's records, compared with this one in the report.
    """
    for name in ("model", "benchmark", "data_root"):
        if not getattr(args, name):
            return refuse(f"--{name} is required (unless --merge)")
    shard = parse_shard(args.shard)
    variant_cfgs = variant_configs(args.variants, values)
    if variant_cfgs and shard is not None:
        return refuse("--variants runs in one process; drop --shard")
    # The output files are claimed before anything is read or loaded: a second run on this --out is refused at once
    # (it would append every record a second time), naming the pid of the run that writes them.
    files = [out / v / "predictions.jsonl" for v in variant_cfgs] if variant_cfgs else [predictions_path(out, shard)]
    with ExitStack() as locks:
        try:
            for file in files:
                locks.enter_context(exclusive_writer(file))
        except FileInUse as err:
            raise RunError(str(err)) from None
        samples, load_errors = _load_samples(args, out / "load_errors.json")
        chosen = select_samples(samples, args.limit, shard)
        log.info("%s: %d samples loaded, %d selected, %d rows unusable", args.benchmark, len(samples), len(chosen),
                 len(load_errors))
        main_backend, verifier_backend = load_backends(args, list((variant_cfgs or {"": cfg}).values()))
        config_record.update(describe_backends(main_backend, verifier_backend))
        run = Run(args, out, chosen, load_errors, config_record, compare, main_backend, verifier_backend)
        try:
            code = run_variant_rows(run, variant_cfgs) if variant_cfgs else run_one(run, cfg, shard, rank)
        finally:
            write_server_accounting(out, shard, main_backend, verifier_backend)
    if code == 0 and rank is not None:  # after the lock is released: node 0's launcher then merges the shards
        done_marker(predictions_path(out, shard)).write_text("done\n")
    return code


def _load_samples(args, load_errors_file: Path) -> tuple[list, list[str]]:
    """The benchmark's samples and its unusable rows (as lines, also written to load_errors.json).

    args: the checked flags (--benchmark, --data_root).
    load_errors_file: where the unusable rows are written.
    """
    from cader.evaluate.benchmarks import UnknownBenchmarkError, load_benchmark

    try:
        samples, errors = load_benchmark(args.benchmark, args.data_root)
    except (FileNotFoundError, UnknownBenchmarkError) as err:  # no release layout there, or a misspelt name
        raise RunError(f"--benchmark {args.benchmark} --data_root {args.data_root}: {err}") from None
    load_errors = [str(e) for e in errors]
    for message in load_errors:
        log.warning("skipped benchmark row: %s", message)
    write_json_atomic(load_errors_file, load_errors)
    return samples, load_errors


def _load_backend(args, flag: str, path: str, engine, urls: list[str] | None = None):
    """The backend of `path`; RunError (one line) when it does not load: a hub id that is not there, no network, a
    server that cannot give exact scores.

    args: the checked flags (--backend, --device, --dtype, --attn_implementation, --server).
    flag: the flag that named `path`, for the message.
    path: the model's folder or hub id.
    engine: its vLLM engine settings.
    urls: its servers (--backend server).
    """
    try:
        return make_backend(args.backend, path, args.device, args.dtype, args.attn_implementation, engine=engine,
                            urls=urls, server=args.server, max_batch_tokens=args.hf_max_batch_tokens)
    except BackendError as err:  # a server refused at start: the message names the server flag it lacks
        raise RunError(f"--{flag} {path}: {err}") from None
    except (OSError, ValueError) as err:
        log.debug("loading %s failed", path, exc_info=True)
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise RunError(f"--{flag} {path}: cannot load it ({first})") from None


def load_backends(args, cfgs: list[CaderConfig]):
    """(main, verifier) backends; one copy when they are the same model or no configuration uses the verifier.

    args: the checked flags.
    cfgs: the configurations the run runs.
    """
    verifier_path = args.verifier or args.model
    needs_verifier = any(c.uses_verifier and c.runs_stage2 for c in cfgs)
    if args.backend == "server":  # which servers serve which role: the rule the lmms-eval model shares
        try:
            roles = server_roles(args.model, args.verifier, split_urls(args.model_urls), split_urls(args.verifier_urls),
                                 needs_verifier)
        except MissingServers as err:
            if err.role == "model":
                raise RunError("--backend server needs --model_urls (the main model's servers, comma separated)") from None
            raise RunError(f"--verifier {err.path} is another model: give its servers with --verifier_urls") from None
        main_backend = _load_backend(args, "model", args.model, args.vllm_main, list(roles.model_urls))
        if roles.verifier is None:
            return main_backend, main_backend
        return main_backend, _load_backend(args, "verifier", roles.verifier, args.vllm_verifier,
                                           list(roles.verifier_urls))
    main_backend = _load_backend(args, "model", args.model, args.vllm_main)
    if not needs_verifier or verifier_path == args.model:
        return main_backend, main_backend
    return main_backend, _load_backend(args, "verifier", verifier_path, args.vllm_verifier)


def write_server_accounting(out: Path, shard, main_backend, verifier_backend) -> None:
    """<out>/server_routing.json (per shard when sharded): each server backend's requests per replica and per
    affinity key (which replica answered the requests carrying the same frames), for the logs and the tests.

    out: the output folder.
    shard: (I, N) or None.
    main_backend: the main model's backend.
    verifier_backend: the verifier's backend.
    """
    roles = {"model": main_backend} | ({} if verifier_backend is main_backend else {"verifier": verifier_backend})
    accounting = {role: b.accounting() for role, b in roles.items() if hasattr(b, "accounting")}
    if not accounting:
        return
    name = "server_routing.json" if shard is None else f"server_routing.shard-{shard[0]}-of-{shard[1]}.json"
    write_json_atomic(out / name, accounting)
    for role, acc in accounting.items():
        log.info("%s servers: %s", role, ", ".join(f"{r['url']} {r['sent']} requests ({r['failed']} failed)"
                                                   for r in acc["replicas"]))


def describe_backends(main_backend, verifier_backend) -> dict:
    """The report's `chat_template` and `backends` blocks for each role; warns of a template without thinking-off.

    main_backend: the main model's backend.
    verifier_backend: the verifier's backend.
    """
    roles = (("model", main_backend), ("verifier", verifier_backend))
    # Whether each model's template honours enable_thinking, and so whether the backend adds the think block itself.
    templates = {role: (backend.template.to_dict() if getattr(backend, "template", None) else None)
                 for role, backend in roles}
    # how each backend reads its scores (vLLM: logprob_token_ids over the whole vocabulary, never a top-k list)
    described = {role: (backend.describe() if hasattr(backend, "describe") else {"name": type(backend).__name__})
                 for role, backend in roles}
    for role, check in templates.items():
        if check and check["think_block_added"]:
            log.warning(
                "the %s's chat template ignores enable_thinking; thinking-off prompts get the empty think block "
                "from cader (recorded in report.json config.chat_template)", role
            )
    return {"chat_template": templates, "backends": described}


@dataclasses.dataclass
class Run:
    """What a run's mode needs once the samples and models are loaded."""

    args: typing.Any             # the checked flags
    out: Path                    # the output folder
    samples: list                # the samples this process runs
    load_errors: list[str]       # the benchmark's unusable rows
    config_record: dict          # the report's `config` block
    compare: list[dict] | None   # another run's records, compared in the report
    main: typing.Any             # the main model's backend
    verifier: typing.Any         # the verifier's backend


def run_variant_rows(run: Run, variant_cfgs: dict[str, CaderConfig]) -> int:
    """Several Table 2 rows in one pass, sharing frames and repeated model calls: <out>/<variant>/predictions.jsonl
    and a report per variant (compared with `full` when it ran), shared_work.json.

    run: the loaded samples and models.
    variant_cfgs: {variant: its CaderConfig}.
    """
    args, out = run.args, run.out
    counts, work = run_variants(run.samples, args.data_root, out, run.main, run.verifier, variant_cfgs,
                                progress=args.progress, group_by_video=args.group_by_video)
    full = read_records(out / "full" / "predictions.jsonl") if "full" in variant_cfgs else None
    for name in variant_cfgs:
        records = read_records(out / name / "predictions.jsonl")
        write_report(out / name, records, run.load_errors, {**run.config_record, "variant": name},
                     run.compare if name == "full" or full is None else full)
    write_json_atomic(out / "shared_work.json", {"counts": counts, **dataclasses.asdict(work)})
    log.info("%d variants: %d model calls made of %d asked, %d frames decoded of %d asked", len(variant_cfgs),
             work.calls, work.calls_asked, work.frames, work.frames_asked)
    return 0


def run_one(run: Run, cfg: CaderConfig, shard: tuple[int, int] | None, rank) -> int:
    """One configuration over the samples (or this shard's): predictions.jsonl, then the report unless sharded.

    run: the loaded samples and models.
    cfg: the configuration.
    shard: (I, N) when this process runs shard I of N, else None.
    rank: (rank, world size, local rank) of a torchrun rank, else None.
    """
    args, out = run.args, run.out
    target = predictions_path(out, shard)
    priors = load_stage1_priors(args.stage1_from) if args.stage1_from else None
    try:
        counts = run_samples(
            run.samples, args.data_root, target, run.main, run.verifier, cfg, progress=args.progress,
            retry_failed=args.retry_failed, stage1_priors=priors, concurrency=args.concurrency,
            group_by_video=args.group_by_video,
        )
    except Stage1ReuseError as err:  # another model's or another setting's Stage 1: refuse, say why
        return refuse(str(err))
    log.info(
        "wrote %s: %d new records (%d failed, %d flagged), %d already there, %d failed records retried, "
        "%d Stage-1 results reused",
        target, counts["ran"], counts["failed"], counts["flagged"], counts["done_before"], counts["retried"],
        counts["stage1_reused"],
    )
    if shard is None:
        records = read_records(target)
        report = write_report(out, records, run.load_errors, run.config_record, run.compare)
        log.info(
            "accuracy %s%% over %d samples (%d failed, %d flagged); report in %s", report["overall"]["accuracy"],
            report["n"], sum(bool(r.get("error")) for r in records), sum(bool(r.get("flags")) for r in records), out,
        )
    elif rank is None:
        log.info("shard done; run with --merge true --out %s once every shard has finished", out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
