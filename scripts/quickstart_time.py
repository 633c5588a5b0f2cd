"""The quickstart's step times (scripts/quickstart.sh's run_time.jsonl -> run_time.json): kept apart from
summary.json, which holds no wall-clock time and is the same on every machine."""

from __future__ import annotations

import json
from pathlib import Path

from cader.vlm.files import write_atomic


def read_json(path: Path) -> dict | None:
    """A JSON file's object, or None when it is missing or unreadable (a step not run, not a failure)."""
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return None


# the quickstart's timed keys in order (scripts/quickstart.sh, STEP_KEYS), with what each ran
STEP_NAMES = {
    "model": "tiny model and tiny verifier (scripts/make_tiny_model.py: build, pre-training passes)",
    "data": "synthetic data (scripts/make_synthetic_data.py)",
    "sft": "tiny SFT (train/sft.py)",
    "heldout": "Stage 1 on the held-out split",
    "calibrate": "calibration (calibrate/fit.py)",
    "full": "full CADER on every benchmark layout",
    "ablations": "ablations and the frontier",
    "judge": "AgentVidBench judge",
    "view": "viewer (cader view)",
    "summary": "summary",
}
MAIN_JOB = ("model", "data", "sft")   # the README's main job: its third command line


def machine_class() -> dict:
    """What the run's time depends on: architecture, CPU, cores, memory, and how loaded the machine was."""
    import os
    import platform

    cpu = next((line.split(":", 1)[1].strip() for line in _lines("/proc/cpuinfo") if line.startswith("model name")),
               platform.processor() or None)
    memory = next((int(line.split()[1]) / 2**20 for line in _lines("/proc/meminfo") if line.startswith("MemTotal")),
                  None)
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return {"arch": platform.machine(), "cpu": cpu, "cores": usable,
            "memory_gib": None if memory is None else round(memory, 1),
            "load_average_at_end": [round(x, 2) for x in os.getloadavg()]}


def _lines(path: str) -> list[str]:
    try:
        return Path(path).read_text().splitlines()
    except OSError:
        return []


def run_time_of(lines: list[dict], settings: str | None, machine: dict) -> dict:
    """run_time.json from the quickstart's run_time.jsonl lines: seconds per key (commands that ran), the keys a
    resumed run skipped, the main job's and the whole run's time (None unless every command of it ran)."""
    start = next((line for line in lines if "key" not in line), {})
    steps, skipped = {}, []
    for line in (line for line in lines if "key" in line):
        if line.get("ran"):
            steps[line["key"]] = steps.get(line["key"], 0) + int(line["seconds"])
        else:
            skipped.append(line["key"])
    complete = not skipped and all(key in steps for key in STEP_NAMES)
    main_job = sum(steps[k] for k in MAIN_JOB) if all(k in steps and k not in skipped for k in MAIN_JOB) else None
    return {"settings": settings, "complete": complete, "steps": steps, "step_names": STEP_NAMES,
            "main_job": list(MAIN_JOB), "skipped": sorted(set(skipped)),
            "main_job_seconds": main_job, "total_seconds": sum(steps.values()) if complete else None,
            "machine": {**machine, "load_average_at_start": start.get("load_average")}}


def reference_step_lines(path: str | Path, settings: str | None) -> list[str]:
    """'<key> <seconds>' per step of a measured run_time.json, when it is complete and had these settings (its
    step times are then the progress line's reference); nothing otherwise."""
    measured = read_json(Path(path)) or {}
    if not measured.get("complete") or measured.get("settings") != settings:
        return []
    return [f"{key} {seconds}" for key, seconds in measured.get("steps", {}).items()]


def write_run_time(base: Path, settings: str | None) -> Path:
    from cader.contracts.jsonl import read_jsonl

    out = base / "run_time.json"
    write_atomic(out, json.dumps(run_time_of(read_jsonl(base / "run_time.jsonl"), settings, machine_class()),
                                 indent=1) + "\n")
    return out
