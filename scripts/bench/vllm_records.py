"""evaluate/run.py under the HF and the vLLM backend on the same samples: equal records, and each one's speed.

    python scripts/bench/vllm_parity.py records --model M --data_root D --out DIR --json_out J
    python scripts/bench/vllm_parity.py runs --hf_run A --vllm_run B

`records` runs `evaluate/run.py --backend hf` and `--backend vllm --concurrency N` on the same samples and compares
the records (letters, routes, windows, fallbacks, errors); the JSON row has each backend's samples/s (from the first
sample's start to the last record, model loading left out; see `samples_per_s`) and the speed-up. `runs` compares
two whole run folders written by the two backends. Both are subcommands of vllm_parity.py.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from cader.contracts.jsonl import read_jsonl
from cader.evaluate.runner import read_timings, timings_path
from cader.scripts.bench.harness import CPU_ENGINE_ARGS, DEFAULT_VLLM_PYTHON, REPO, emit, vllm_env


def record_view(record: dict) -> dict:
    """What must be equal between the two backends' records of one sample: letters, route, windows, outcome."""
    stage2 = record.get("stage2") or {}
    return {
        "pred": record.get("pred"),
        "stage1_pred": (record.get("stage1") or {}).get("pred"),
        "route": record.get("route"),
        "accepted": stage2.get("accepted"),
        "fallback": stage2.get("fallback"),
        "windows": [step.get("window") for step in stage2.get("steps", []) if step.get("phase") == "propose"],
        "failed": record.get("error") is not None,
    }


def compare_records(hf_records: list[dict], vllm_records: list[dict]) -> list[str]:
    """One line per sample whose records differ in `record_view` (or that only one backend has)."""
    def key(r):
        return f"{r.get('benchmark')}/{r.get('sample_id')}"

    a, b = {key(r): record_view(r) for r in hf_records}, {key(r): record_view(r) for r in vllm_records}
    failures = [f"{k}: only in the {'HF' if k in a else 'vLLM'} records" for k in sorted(set(a) ^ set(b))]
    for k in sorted(set(a) & set(b)):
        diff = {f: (a[k][f], b[k][f]) for f in a[k] if a[k][f] != b[k][f]}
        if diff:
            failures.append(f"{k}: " + "; ".join(f"{f} HF {x!r} vs vLLM {y!r}" for f, (x, y) in diff.items()))
    return failures


def timed_run(cmd: list[str], predictions: Path, env: dict | None = None, timeout_s: float = 3600) -> dict:
    """Run one evaluate/run.py afresh (a rerun must not resume from, and so skip, the last run's records): its
    records, wall time, when each record reached predictions.jsonl and each sample's own seconds (timings.jsonl),
    in seconds."""
    predictions.unlink(missing_ok=True)
    timings_path(predictions).unlink(missing_ok=True)
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    arrivals: list[float] = []
    while True:
        done = proc.poll() is not None
        n = sum(1 for line in predictions.open() if line.strip()) if predictions.exists() else 0
        arrivals += [time.perf_counter() - t0] * (n - len(arrivals))
        if done:
            break
        if time.perf_counter() - t0 > timeout_s:
            proc.kill()
            raise TimeoutError(f"{cmd[:3]} ran past {timeout_s} s")
        time.sleep(0.05)
    stderr = proc.stderr.read()
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd[:4])} ... failed (exit {proc.returncode}):\n{stderr[-4000:]}")
    wall_s = time.perf_counter() - t0
    rows = read_jsonl(predictions)
    clock = read_timings(predictions)   # each sample's wall-clock time, beside its record
    return {"records": rows, "wall_s": wall_s, "arrivals_s": arrivals,
            "seconds": [clock.get((str(r["benchmark"]), str(r["sample_id"])), 0.0) for r in rows]}


def samples_per_s(arrivals_s: list[float], seconds: list[float], skip: int = 0) -> float | None:
    """Evaluation rate with model loading left out: samples over the time from the first one's start to the last
    record's arrival. A sample started at its arrival minus its own seconds in timings.jsonl (the runner's per-sample
    clock), so this holds for samples run one at a time and for N in flight alike. `skip`: leave out the first
    records to arrive (the first wave pays the engine's one-time warm-up of its first requests)."""
    if len(arrivals_s) != len(seconds):
        return None
    kept = sorted(zip(arrivals_s, seconds))[skip:]
    if not kept:
        return None
    span = max(a for a, _ in kept) - min(a - s for a, s in kept)
    return len(kept) / span if span > 0 else None


def verdict(result: dict, json_out: str | None) -> dict:
    """`result` printed and written (`emit`); exit status 1 when it names failures."""
    emit(result, json_out)
    if result["failures"]:
        sys.exit(1)
    return result


def ratio(a: float | None, b: float | None) -> float | None:
    """a / b, None unless both were measured."""
    return a / b if a and b else None


def records(model: str, data_root: str, out: str, benchmark: str = "synthetic", limit: int = 8,
            concurrency: int = 4, config: str = "configs/eval/cader_tiny.yaml", extra_args: str = "",
            vllm_args: str = CPU_ENGINE_ARGS, vllm_python: str = DEFAULT_VLLM_PYTHON,
            json_out: str | None = None, verifier: str | None = None) -> dict:
    """evaluate/run.py --backend hf and --backend vllm --concurrency N: equal records, and each one's samples/s.

    Exit status 1 when the records differ.

    Args:
        model: An HF folder of the main model, e.g. runs/tiny/sft/export.
        data_root: --data_root of evaluate/run.py.
        out: A folder for the two runs (hf/ and vllm/); an earlier run's predictions there are removed first.
        benchmark: A benchmark name of the registry.
        limit: Samples run.
        concurrency: Samples in flight in the vLLM run (the HF run uses 1).
        config: --config of both runs (sets fp32 and the tiny budgets for the default).
        extra_args: More arguments for both runs, space separated (e.g. "--variant uniform_stage2").
        vllm_args: More arguments for the vLLM run. The default suits a tiny model on a CPU: eager mode (no
            torch.compile warm-up) and a 4096-token context (vLLM profiles its encoder cache with a video of the
            longest context: minutes and GBs on a CPU at the 32K default). On a GPU with the real models: "".
        vllm_python: The interpreter with vLLM.
        json_out: Also write the result here.
        verifier: An HF folder of the verifier, e.g. runs/tiny/verifier (default: the main model verifies itself).
    """
    out_dir = Path(out)
    base = ["evaluate/run.py", "--config", config, "--model", model, "--verifier", verifier or model,
            "--benchmark", benchmark, "--data_root", data_root, "--limit", str(limit), "--progress", "false",
            *extra_args.split()]
    runs = {}
    for name, python, args, env in (
        ("hf", sys.executable, ["--backend", "hf"], None),
        ("vllm", vllm_python, ["--backend", "vllm", "--concurrency", str(concurrency), *vllm_args.split()],
         vllm_env()),
    ):
        run = timed_run([python, *base, "--out", str(out_dir / name), *args], out_dir / name / "predictions.jsonl",
                        env)
        first_wave = concurrency if name == "vllm" else 1
        runs[name] = {**run, "samples_per_s": samples_per_s(run["arrivals_s"], run["seconds"]),
                      "warm_samples_per_s": samples_per_s(run["arrivals_s"], run["seconds"], skip=first_wave)}
    failures = compare_records(runs["hf"]["records"], runs["vllm"]["records"])
    result = {
        "model": model, "benchmark": benchmark, "n": len(runs["hf"]["records"]), "concurrency": concurrency,
        "routes": {r: sum(x["route"] == r for x in runs["hf"]["records"]) for r in ("exit", "stage2")},
        **{f"{name}_{k}": runs[name][k] for name in runs for k in ("samples_per_s", "warm_samples_per_s", "wall_s")},
        "speedup": ratio(runs["vllm"]["samples_per_s"], runs["hf"]["samples_per_s"]),
        "warm_speedup": ratio(runs["vllm"]["warm_samples_per_s"], runs["hf"]["warm_samples_per_s"]),
        "threads": os.environ.get("OMP_NUM_THREADS"),
        "failures": failures,
    }
    return verdict(result, json_out)


def runs(hf_run: str, vllm_run: str, json_out: str | None = None) -> dict:
    """Two whole runs of the same work, e.g. `bash scripts/quickstart.sh A` and `BACKEND=vllm bash
    scripts/quickstart.sh B` on the same model and data: every predictions.jsonl under `hf_run` against the one at
    the same place under `vllm_run` (`compare_records`); exit status 1 on any difference or missing file.

    Args:
        hf_run: A run folder written with the HF backend (e.g. A/runs/tiny/eval).
        vllm_run: The same run written with the vLLM backend.
        json_out: Also write the result here.
    """
    hf_root, vllm_root = Path(hf_run), Path(vllm_run)
    files, failures, n, stage2 = [], [], 0, 0
    for hf_file in sorted(hf_root.rglob("predictions.jsonl")):
        where = hf_file.relative_to(hf_root)
        vllm_file = vllm_root / where
        if not vllm_file.exists():
            failures.append(f"{where}: no such file under {vllm_root}")
            continue
        hf_rows, vllm_rows = read_jsonl(hf_file), read_jsonl(vllm_file)
        failures += [f"{where}: {f}" for f in compare_records(hf_rows, vllm_rows)]
        n += len(hf_rows)
        stage2 += sum(r.get("route") == "stage2" for r in hf_rows)
        files.append(str(where))
    result = {"hf_run": hf_run, "vllm_run": vllm_run, "files": len(files), "records": n, "stage2": stage2,
              "failures": failures}
    return verdict(result, json_out)
