"""Judge throughput: 200 trajectories against a loopback OpenAI-compatible judge that answers after
a fixed delay, at concurrency 16 and at concurrency 1 in the same run. Goal: >= 8x.

    python scripts/bench/judge_throughput.py [--n 200] [--delay 0.05] [--concurrency 16]
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

from cader.dev.judge_inputs import synthetic_benchmark
from cader.dev.synthetic.train_mix import write_jsonl
from cader.evaluate.judge.pipeline import JudgeRun, judge_predictions, read_judgments
from cader.evaluate.judge.providers import LOOPBACK_MODEL, make_provider
from cader.evaluate.judge.questions import load_predictions, load_questions
from jsonargparse import CLI


def _timed_run(base_url: str, root: Path, out: str, concurrency: int) -> tuple[float, int, int]:
    questions, _ = load_questions(root / "questions.jsonl")
    predictions, _ = load_predictions(root / "predictions.jsonl")
    provider = make_provider("openai", LOOPBACK_MODEL, base_url, timeout=30.0)
    start = time.perf_counter()
    counts = judge_predictions(provider, questions, predictions, root / out, framework="cader",
                               run=JudgeRun(concurrency=concurrency, cache=False, progress=False))
    elapsed = time.perf_counter() - start
    rows = read_judgments(root / out / "judgments.jsonl")
    return elapsed, counts["judged"], sum(1 for r in rows.values() if r.get("error"))


@contextmanager
def loopback_process(delay: float, root: Path):
    """The loopback judge in its own process, as a real judge server would be (it must not share our GIL)."""
    url_file = root / "judge_url"
    proc = subprocess.Popen([sys.executable, "-m", "cader.dev.judge_double", "--delay", str(delay),
                             "--url_file", str(url_file)], stdout=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while not url_file.exists():
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("loopback judge server did not start")
            time.sleep(0.05)
        yield url_file.read_text().strip()
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def main(n: int = 200, delay: float = 0.05, concurrency: int = 16) -> dict:
    """Time judging `n` synthetic trajectories with a judge that takes `delay` seconds per call."""
    os.environ.setdefault("OPENAI_API_KEY", "loopback-dummy-key")
    questions, predictions = synthetic_benchmark(n, seed=0)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        write_jsonl(root / "questions.jsonl", questions)
        write_jsonl(root / "predictions.jsonl", predictions)
        with loopback_process(delay, root) as base_url:
            parallel_s, parallel_ok, parallel_err = _timed_run(base_url, root, "parallel", concurrency)
            serial_s, serial_ok, serial_err = _timed_run(base_url, root, "serial", 1)
    result = {"n": n, "delay_s": delay, "concurrency": concurrency, "parallel_s": round(parallel_s, 3),
              "serial_s": round(serial_s, 3), "speedup": round(serial_s / parallel_s, 2),
              "judged": [parallel_ok, serial_ok], "errors": [parallel_err, serial_err]}
    print(f"{n} trajectories, judge delay {delay * 1000:.0f} ms/call: concurrency {concurrency}: {parallel_s:.2f} s, "
          f"concurrency 1: {serial_s:.2f} s, speedup {serial_s / parallel_s:.1f}x (goal >= 8x); "
          f"judged {parallel_ok}/{serial_ok}, errors {parallel_err}/{serial_err}")
    return result


if __name__ == "__main__":
    CLI(main, as_positional=False)
