"""What the vLLM parity benches share (vllm_parity.py, vllm_records.py): where the vLLM venv is, the CPU engine's
settings, the child-process environment and how a result is printed. Its own module so that neither bench imports
the other back."""

from __future__ import annotations

import json
import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DEFAULT_VLLM_PYTHON = str(REPO / ".venv-vllm" / "bin" / "python")
CPU_ENGINE_ARGS = "--vllm_main.enforce_eager true --vllm_main.max_model_len 4096"


def vllm_env() -> dict:
    """The environment of a vLLM child process: engine in-process (no spawn), a small CPU KV cache."""
    env = dict(os.environ)
    env.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    env.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")  # GiB; vLLM's CPU default takes a share of the machine's memory
    env.setdefault("TOKENIZERS_PARALLELISM", "false")
    return env


def emit(result: dict, json_out: str | None) -> None:
    """Print `result` as JSON, and write it to `json_out` too when given."""
    text = json.dumps(result, indent=2)
    print(text)
    if json_out:
        Path(json_out).parent.mkdir(parents=True, exist_ok=True)
        Path(json_out).write_text(text + "\n")
