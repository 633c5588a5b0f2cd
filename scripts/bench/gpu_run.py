"""The GPU check in one call: SFT steps, scoring forwards and F1's decode on one lent device machine, every figure
under $OUT as JSON (`gpu.json`) plus a short log (`gpu_run.log`).

    bash scripts/bench/gpu_run.sh                                   # on the device machine (docs/bench.md: the call)
    OUT=/tmp/gpu bash scripts/bench/gpu_run.sh --dry_run true       # the same path on a CPU at tiny widths
    python scripts/bench/gpu_run.py wheels                          # here, once: the wheels the device lacks

`gpu_run.sh` installs the carried wheels (`WHEELS`) and makes `cader` importable from the checkout; `run` then
1. checks what the run needs (`gpu_run.sh` the modules, `run` a CUDA device) and exits 2 with a one-line reason
   when something is missing;
2. probes the device in a fresh process and picks two depths from its free memory (`gpu_sft_step.choose_depths`);
3. starts writing B14's 30-minute video in the background (`gpu_decode.write_segmented_clip`, one encoder for
   every two cores);
4. runs the parts in order, each in a fresh process (an empty GPU, a crash or a hang contained), while the time
   budget lasts: SFT under ZeRO-3 at both depths, F1's decode, the Stage-1 and verifier scoring forwards, then
   the plain bf16 AdamW baseline at both depths. A part that would overrun the budget is skipped, and one that
   overruns it is stopped; either is recorded, and `gpu.json` is rewritten after every part, so what was measured
   comes back even when the call is cut short.
Exit status: 0 when no part failed, 1 when one did (the last line names them), 2 when the run could not start.
"""

from __future__ import annotations

import datetime
import importlib
import importlib.util
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

# What the device image lacks (the device README's package list), pinned to this project's venv: name -> (version,
# MiB of the downloaded wheel). deepspeed has no wheel on PyPI: `wheels` builds its sdist here into a pure-Python
# one (DS_BUILD_OPS=0, DS_ACCELERATOR=cuda; its ops are JIT-built on first use, and this check uses none).
WHEELS = {"av": ("18.1.0", 34.2), "deepspeed": ("0.19.8", 2.1), "pydantic_core": ("2.50.5", 2.2),
          "pydantic": ("2.14.4", 0.5), "jsonargparse": ("4.53.0", 0.2), "hjson": ("3.1.0", 0.1),
          "typing_extensions": ("4.16.0", 0.1), "typing_inspection": ("0.4.5", 0.1), "annotated_types": ("0.8.0", 0.1)}
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64",
             "manylinux1_x86_64")
TRAVEL_LIMIT_MIB = 64  # the working tree a device call carries: tracked files and the wheels together
REQUIRED_MODULES = ("torch", "transformers", "lightning", "deepspeed", "jsonargparse", "av", "pydantic", "hjson")
BUDGET_S = 420  # the parts' share of an 8-minute call (the wheels install first, and a part is stopped at the end)
SEQ_LEN, STAGE1_FRAMES, CROP_FRAMES, VIDEO_SECONDS = 10_240, 768, 512, 1800
BENCH = "cader.scripts.bench"


@dataclass
class Part:
    name: str
    function: str  # module:function, called with kwargs (in a fresh process on the device)
    kwargs: dict
    estimate_s: float  # expected device seconds, interpreter start included: a part that would overrun is skipped


def plan_parts(depths: list[int], dry_run: bool) -> list[Part]:
    """The parts in the order they run (the baseline last: it runs only if the time allows)."""
    tiny = {"shape": "tiny", "seq_len": 300, "steps": 1} if dry_run else {"shape": "8b", "seq_len": SEQ_LEN, "steps": 3}
    score = {"repeats": 1} if dry_run else {"repeats": 2}
    sft = [Part(f"sft_{engine}_{d}", f"{BENCH}.gpu_sft_step:run_depth",
                {**tiny, "layers": d, "deepspeed": "zero3" if engine == "zero3" else "none"}, 40 + 5 * d)
           for engine in ("zero3", "plain") for d in depths]
    return [*sft[:2],
            Part("decode", f"{BENCH}.gpu_decode:measure_f1", {}, 40),
            Part("scoring_stage1", f"{BENCH}.gpu_scoring:run_scoring",
                 {"role": "stage1", "shape": "tiny" if dry_run else "8b", "depths": depths,
                  "frames": 4 if dry_run else STAGE1_FRAMES, **score}, 100),
            Part("scoring_verifier", f"{BENCH}.gpu_scoring:run_scoring",
                 {"role": "verifier", "shape": "tiny" if dry_run else "4b", "depths": depths,
                  "frames": 2 if dry_run else CROP_FRAMES, **score}, 70),
            *sft[2:]]


def missing_modules(names: tuple[str, ...] = REQUIRED_MODULES) -> list[str]:
    """The modules of `names` that cannot be found (none imported)."""
    return [name for name in names if importlib.util.find_spec(name) is None]


def installed_wheels(site: str) -> list[str]:
    """'name version' of every distribution installed under `site` (the carried wheels)."""
    from importlib.metadata import distributions

    return sorted(f"{d.metadata['Name']} {d.version}" for d in distributions(path=[site]))


def probe_device() -> dict:
    """The machine as this check sees it (run in a fresh process, so the orchestrator holds no CUDA context)."""
    import platform
    from importlib.metadata import distributions

    import psutil
    import torch

    installed = {(d.metadata["Name"] or "").lower(): d.version for d in distributions()}
    facts = {"torch": torch.__version__, "cuda": torch.version.cuda, "python": platform.python_version(),
             "cores": len(os.sched_getaffinity(0)), "host_memory_gib": round(psutil.virtual_memory().total / 2**30, 1),
             **{name: installed.get(name) for name in ("transformers", "deepspeed", "av", "lightning")}}
    if torch.cuda.is_available():
        free, total = torch.cuda.mem_get_info()
        props = torch.cuda.get_device_properties(0)
        facts.update(device=props.name, multiprocessors=props.multi_processor_count,
                     gpu_free_gib=round(free / 2**30, 1), gpu_total_gib=round(total / 2**30, 1))
    else:
        facts.update(device="cpu", gpu_free_gib=None, gpu_total_gib=None)
    return facts


class Log:
    """Lines to stdout and appended to `path` (the short log that comes back with the results)."""

    def __init__(self, path: Path):
        self.path, self.start = path, time.monotonic()

    def __call__(self, line: str) -> None:
        stamped = f"[{time.monotonic() - self.start:6.1f} s] {line}"
        print(stamped, flush=True)
        with self.path.open("a") as handle:
            handle.write(stamped + "\n")


def call(part: Part, fresh: bool, timeout: float, log: Log) -> tuple[dict | None, str | None]:
    """(result, None) or (None, the error in one line) of one part, in a fresh interpreter or in this one."""
    from cader.scripts.bench.harness import FreshProcessError, run_fresh

    try:
        if fresh:
            return run_fresh(part.function, part.kwargs, timeout=timeout), None
        module, name = part.function.split(":")
        return getattr(importlib.import_module(module), name)(**part.kwargs), None
    except subprocess.TimeoutExpired:
        return None, f"stopped after {timeout:.0f} s (the budget's end)"
    except FreshProcessError as err:
        log("\n".join(["  " + line for line in err.tail]))
        last = next((line for line in reversed(err.tail) if line.strip()), "no output")
        return None, f"exit {err.returncode}: {last.strip()}"[:400]
    except Exception as err:  # noqa: BLE001 - a part's failure is recorded, the next part still runs
        return None, f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"[:400]


def wait_writer(writer, timeout: float) -> dict:
    """The result of the writer (a `harness.Fresh`), waiting at most `timeout`; RuntimeError with its log's last
    line when it failed."""
    from cader.scripts.bench.harness import FreshProcessError

    try:
        return writer.result(max(1.0, timeout))
    except subprocess.TimeoutExpired:
        raise RuntimeError(f"the video was not written within {timeout:.0f} s") from None
    except FreshProcessError as err:
        raise RuntimeError(f"writing the video failed (exit {err.returncode}): {(err.tail or ['no output'])[-1]}"
                           ) from None


def run_parts(parts: list[Part], record: dict, writer, budget_s: float, fresh: bool, save, log: Log) -> None:
    """Each part while the budget lasts, its entry in `record["parts"]`, `save()` after each."""
    start = time.monotonic()
    for part in parts:
        left = budget_s - (time.monotonic() - start)
        if part.estimate_s > left:
            record["parts"][part.name] = {"status": "skipped", "reason": f"{left:.0f} s of the budget left, "
                                                                         f"needs ~{part.estimate_s:.0f} s"}
            log(f"{part.name}: skipped ({left:.0f} s left)")
            continue
        began = time.monotonic()
        if part.name == "decode":
            try:
                video = wait_writer(writer, left - part.estimate_s)
            except RuntimeError as err:
                record["parts"][part.name] = {"status": "failed", "error": str(err)}
                log(f"decode: failed: {err}")
                save()
                continue
            record["video"] = video
            part.kwargs["video"] = video["path"]
            left = budget_s - (time.monotonic() - start)
        log(f"{part.name}: {part.function.split(':')[1]}({', '.join(f'{k}={v}' for k, v in part.kwargs.items())})")
        result, error = call(part, fresh, left, log)
        seconds = round(time.monotonic() - began, 1)
        entry = {"status": "ok", "seconds": seconds, "result": result} if error is None else \
            {"status": "failed", "seconds": seconds, "error": error}
        record["parts"][part.name] = entry
        log(f"{part.name}: {entry['status']} in {seconds} s" + (f": {error}" if error else ""))
        save()


def run(out: str, dry_run: bool = False, budget_s: float | None = None, parts: list[str] | None = None,
        site: str = "/tmp/site", fresh: bool | None = None, free_gib: float | None = None) -> int:
    """Run the GPU check and write `out`/gpu.json and `out`/gpu_run.log; returns the exit status.

    Args:
        out: Folder for the results ($OUT on the device machine).
        dry_run: Rehearse on a CPU at tiny widths (1 step, a 2-second video), the parts in this process.
        budget_s: Seconds the parts may take together (default: 420 on the device; a dry run, whose CPU may JIT-build
            DeepSpeed's shared-memory op for ZeRO-3, 3x that).
        parts: Run only these parts (names as in gpu.json; default: all).
        site: Where gpu_run.sh installed the carried wheels (listed in gpu.json).
        fresh: Each part in a fresh process (default: on the device, not in a dry run).
        free_gib: GPU memory to plan the depths for (default: the device's free memory; 78 in a dry run).
    """
    from cader.scripts.bench.gpu_sft_step import TINY_TEXT, TINY_VISION, choose_depths, plan_memory
    from cader.scripts.bench.gpu_sft_step import shapes as sft_shapes
    from cader.scripts.bench.harness import Fresh
    from cader.vlm.files import write_json_atomic

    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    log = Log(folder / "gpu_run.log")
    fresh = (not dry_run) if fresh is None else fresh
    budget_s = budget_s or (3 if dry_run else 1) * BUDGET_S
    if dry_run:  # a CPU's threads spin against each other on a loaded machine: one each, the tiny models need no more
        import torch

        torch.set_num_threads(1)
        os.environ["OMP_NUM_THREADS"] = "1"
    device, error = (probe_device(), None) if dry_run else call(Part("probe", f"{BENCH}.gpu_run:probe_device", {}, 0),
                                                                True, 120, log)
    if device is None:
        return fail(log, f"probing the device failed: {error}")
    if not dry_run and device["device"] == "cpu":
        return fail(log, f"no CUDA device (torch {device['torch']} sees none); --dry_run true rehearses on a CPU")
    shapes = (TINY_TEXT, TINY_VISION) if dry_run else ()
    try:
        depths = choose_depths(free_gib or device["gpu_free_gib"] or 78.0, *shapes)
    except ValueError as err:
        return fail(log, str(err))
    record = {"what": "GPU check (scripts/bench/gpu_run.py): SFT steps, scoring forwards, F1 decode",
              "date": datetime.date.today().isoformat(), "dry_run": dry_run, **device,
              "wheels": installed_wheels(site), "budget_s": budget_s, "depths": depths,
              "plan": [plan_memory(*(shapes or sft_shapes("8b", None)), d) for d in depths], "parts": {}}
    log(f"{device['device']}, torch {device['torch']}, {device['cores']} cores; depths {depths} "
        f"({device['gpu_free_gib']} GiB free); wheels: {', '.join(record['wheels']) or 'none'}")
    planned = plan_parts(depths, dry_run)
    todo = [p for p in planned if not parts or p.name in parts]
    if not todo:
        return fail(log, f"no part named {', '.join(parts)}: the parts are {', '.join(p.name for p in planned)}")

    def save():
        record["summary"] = summarize(record)
        write_json_atomic(folder / "gpu.json", record)

    with tempfile.TemporaryDirectory(prefix="gpu_video_") as media:
        # B14's video written in the background by one encoder (two x264 threads) for every two cores, niced: the
        # GPU's feeders keep their cores
        video = {"folder": media, "seconds": 2 if dry_run else VIDEO_SECONDS, "workers": max(1, device["cores"] // 2)}
        writer = (Fresh(f"{BENCH}.gpu_decode:write_segmented_clip", video, log=Path(media) / "writer.log")
                  if any(p.name == "decode" for p in todo) else None)
        try:
            run_parts(todo, record, writer, budget_s, fresh, save, log)
        finally:
            if writer is not None:
                writer.stop()
    save()
    failed = [name for name, p in record["parts"].items() if p["status"] == "failed"]
    skipped = [name for name, p in record["parts"].items() if p["status"] == "skipped"]
    log(f"gpu_run: {len(record['parts']) - len(failed) - len(skipped)} parts ok, skipped: {', '.join(skipped) or 'none'}, "
        f"failed: {', '.join(failed) or 'none'}; results in {folder / 'gpu.json'}")
    from cader.scripts.update_readme import render_gpu

    for line in render_gpu(record).splitlines():
        log(line)
    return 1 if failed else 0


def fail(log: Log, reason: str) -> int:
    """The one line a run that cannot start ends with: on stderr, and in the log."""
    with log.path.open("a") as handle:
        handle.write(f"gpu_run: {reason}\n")
    print(f"gpu_run: {reason}", file=sys.stderr, flush=True)
    return 2


SFT_KEYS = ("layers", "step_seconds", "tokens_per_s", "peak_memory_gib", "mfu_lm", "mfu_lm_plus_vit")
SCORING_KEYS = ("forward_s", "vision_s", "prefill_tokens_per_s", "peak_over_weights_gib", "mfu_lm_plus_vit", "error")


def summarize(record: dict) -> dict:
    """The headline figures of a run, as the README shows them (the parts' full results stay beside them)."""
    from cader.scripts.bench.gpu_sft_step import extrapolated

    ok = {name: p["result"] for name, p in record["parts"].items() if p["status"] == "ok"}
    summary = {"sft": {}, "scoring": {}, "problems": [],
               "not_run": {name: p.get("error") or p.get("reason") for name, p in record["parts"].items()
                           if p["status"] != "ok"}}
    for engine in ("zero3", "plain"):
        runs = [ok[f"sft_{engine}_{d}"] for d in record["depths"] if f"sft_{engine}_{d}" in ok]
        if runs:
            rows = [{key: run[key] for key in SFT_KEYS} for run in runs]
            if len(runs) >= 2:
                rows.append(extrapolated(runs, runs[0]["shape"], runs[0]["seq_len"]))
            summary["sft"][engine] = {"seq_len": runs[0]["seq_len"], "rows": rows}
    for role in ("stage1", "verifier"):
        result = ok.get(f"scoring_{role}")
        if not result:
            continue
        deepest = max(row["layers"] for row in result["runs"])
        summary["scoring"][role] = {
            "shape": result["shape"], "frames": result["frames"], "prompt_tokens": result["prompt_tokens"],
            "layers": deepest, "extrapolated": result["extrapolated"],
            "kernels": {row["kernel"]: {key: row[key] for key in SCORING_KEYS if key in row}
                        for row in result["runs"] if row["layers"] == deepest}}
        shapes = {tuple(row["logits_shape"]) for row in result["runs"] if "logits_shape" in row}
        if any(len(shape) != 1 for shape in shapes):
            summary["problems"].append(
                f"{role} scoring: HFBackend._last_logits gave each prompt logits of shape {sorted(shapes)}, not one "
                f"vector over the vocabulary, so letter_logits and yes_no cannot index them on transformers "
                f"{record.get('transformers')} (its 2-D logits_to_keep is an index into the positions)")
    if "decode" in ok:
        summary["decode"] = {**decode_summary(ok["decode"], summary["scoring"].get("stage1")),
                             "video_seconds": (record.get("video") or {}).get("seconds")}
    return summary


def decode_summary(decode: dict, stage1: dict | None) -> dict:
    """F1's decode on the default decoders and on every core, and its CPU-seconds per GPU-second of the 36-layer
    Stage-1 forward: measured, and as B14 assumes it (40 % MFU of 989 TFLOP/s)."""
    from cader.scripts.bench.decode_once import stage1_gpu_seconds

    first = decode["runs"][0]
    assumed_s, _ = stage1_gpu_seconds(first["frames"], *first["frame_hw"], 0.4, 989.0)
    out = {"frames": first["frames"], "frame_hw": first["frame_hw"], "cores": decode["cores"],
           "runs": [{key: run[key] for key in ("decoders", "cpu_s", "wall_s")} for run in decode["runs"]],
           "b14_assumed_gpu_s": assumed_s, "cpu_s_per_gpu_s_b14_assumption": first["cpu_s"] / assumed_s}
    forward = ((stage1 or {}).get("extrapolated") or {}).get("default")
    if forward:
        out["stage1_gpu_s"] = forward["forward_s"]
        out["cpu_s_per_gpu_s"] = first["cpu_s"] / forward["forward_s"]
    return out


def download_commands(folder: str, python: str = sys.executable) -> list[tuple[list[str], dict]]:
    """(argv, extra environment) of each download: a binary wheel for Python 3.12 / manylinux x86-64 each, and
    deepspeed's sdist built into a wheel."""
    binary = [python, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--python-version", "3.12",
              "--implementation", "cp", *[f"--platform={p}" for p in PLATFORMS], "-d", folder]
    commands = [([*binary, f"{name}=={version}"], {}) for name, (version, _) in WHEELS.items() if name != "deepspeed"]
    sdist = str(Path(tempfile.gettempdir()) / "gpu_run_sdist")
    version = WHEELS["deepspeed"][0]
    commands.append(([python, "-m", "pip", "download", "--no-deps", "--no-binary=:all:", "-d", sdist,
                      f"deepspeed=={version}"], {}))
    commands.append(([python, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-w", folder,
                      f"{sdist}/deepspeed-{version}.tar.gz"], {"DS_BUILD_OPS": "0", "DS_ACCELERATOR": "cuda"}))
    return commands


def wheels(folder: str = ".whl") -> None:
    """Download the wheels the device lacks into `folder` (here, with network; ignored by git: add /.whl/ to
    .git/info/exclude) and print their total size.

    Args:
        folder: Where the wheels go (the `carry` path of the device call).
    """
    for argv, env in download_commands(folder):
        print(" ".join(f"{k}={v}" for k, v in env.items()), " ".join(argv), flush=True)
        subprocess.run(argv, env={**os.environ, **env}, check=True)
    total = sum(f.stat().st_size for f in Path(folder).glob("*.whl"))
    print(f"{folder}: {total / 2**20:.1f} MiB (the limit with the tracked files: {TRAVEL_LIMIT_MIB} MiB)")


if __name__ == "__main__":
    from jsonargparse import CLI

    sys.exit(CLI([run, wheels], as_positional=False))
