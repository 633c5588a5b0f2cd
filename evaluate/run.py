"""Run CADER on one benchmark and write predictions.jsonl, report.json and report.md.

    python evaluate/run.py --config configs/eval/cader.yaml --model PATH --benchmark NAME --data_root DIR \
        --out DIR [--verifier PATH | --verifier main_model] [--calibration FILE | --temperature T --tau TAU] \
        [--variant V] [--limit N] [--shard I/N]
    python evaluate/run.py --merge true --out DIR        # join shard files, then write the report

The run's own flags (models, inputs, outputs, runtime, parallelism) are the fields of
cader.evaluate.run_options.RunOptions. The verifier is the paper's Qwen3-VL-4B-Instruct unless --verifier names
another model; --verifier main_model has the main model verify its own crops (not the paper's Stage 2), and
report.json and every Stage-2 record say which verifier ran. Weights load in bf16, the paper's precision, unless
--dtype (or a CPU config's `dtype`) says otherwise. Every CADER constant (r1, temperature, tau, delta,
k_reflections, f_min, n_budget, r_min, r_max, min_crop, breadth limits, frame/pixel budgets, ...) is also a flag; see
cader.evaluate.method.config.CaderConfig; the paper's values and the code's departures are cader.contracts.paper.
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
from cader.contracts.paper import is_self_verifier
from cader.evaluate.backends.server import ServerOptions
from cader.evaluate.backends.vllm import VLLMEngineConfig
from cader.evaluate.benchmarks import available as available_benchmarks
from cader.evaluate.launch import done_marker, launch, launched_rank, rank_device, wait_for_shards
from cader.evaluate.method.config import CROP_EDGE_MODES, P_YES_MODES, VARIANTS, CaderConfig
from cader.evaluate.method.stage1_reuse import Stage1ReuseError
from cader.evaluate.report import write_report
from cader.evaluate.run_checks import argument_problems, calibration_binding, path_problems
from cader.evaluate.run_models import (
    RunError,
    describe_backends,
    load_backends,
    verifier_path,
    write_server_accounting,
)
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
        "verifier": verifier_path(args),
        "verifier_is_main_model": is_self_verifier(args.verifier, args.model),
        "dtype": args.dtype,
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
