"""Run one function of the benches in a fresh interpreter: the memory benches measure what a new process costs, and
the vLLM side of the parity bench runs under the interpreter vLLM is installed in.

    python -m cader.scripts.bench.in_fresh_process --function cader.scripts.bench.mix_memory:measure \
        --kwargs '{"way": "arrow", ...}' [--out result.json]

The child is a jsonargparse function CLI like every other script; `command()` builds its command line, so callers
never hand-roll an argv protocol of their own.
"""

from __future__ import annotations

import importlib
import json
import sys


def command(function: str, kwargs: dict, python: str = sys.executable, out: str | None = None) -> list[str]:
    """The command line that calls `function` (`package.module:name`) with `kwargs` in a fresh `python`.

    function: the function, by module path (importable in `python`) and name.
    kwargs: its keyword arguments, JSON-serialisable.
    python: the interpreter to run it in.
    out: where the child writes the function's JSON result (None: its last line of stdout).
    """
    if ":" not in function or function.startswith("__main__:"):
        raise ValueError(f"{function!r}: give the function as importable_module:name")
    line = [python, "-m", "cader.scripts.bench.in_fresh_process", "--function", function, "--kwargs", json.dumps(kwargs)]
    return line + (["--out", out] if out else [])


def call(function: str, kwargs: str = "{}", out: str | None = None) -> None:
    """Call a function with keyword arguments and hand back its JSON result.

    Args:
        function: The function as importable_module:name.
        kwargs: A JSON object of its keyword arguments.
        out: Write the result here, atomically (default: print it as the last line of stdout).
    """
    module, name = function.split(":", 1)
    result = getattr(importlib.import_module(module), name)(**json.loads(kwargs))
    if out:
        from cader.vlm.files import write_json_atomic

        write_json_atomic(out, result)
    else:
        print(json.dumps(result))


if __name__ == "__main__":
    from jsonargparse import CLI

    CLI(call, as_positional=False)
