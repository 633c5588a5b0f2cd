"""Formatter markers only where a formatter runs: the project lints with ruff and formats by hand, so a
`# fmt: skip` / `# fmt: off` comment protects nothing and only says something untrue about the code (issue 37 found
240 of them)."""

import re
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MARKER = re.compile(r"#\s*fmt:\s*(skip|off|on)\b")


def formatter_configured() -> bool:
    text = (REPO / "pyproject.toml").read_text(encoding="utf-8")
    return "[tool.ruff.format]" in text or "[tool.black]" in text


def tracked_python_files() -> list[Path]:
    listed = subprocess.run(["git", "ls-files", "*.py"], cwd=REPO, capture_output=True, text=True, check=False)
    if listed.returncode != 0:  # not a git checkout (an unpacked sdist): every .py under the repository
        return sorted(p for p in REPO.rglob("*.py") if ".venv" not in p.parts)
    return [REPO / line for line in listed.stdout.splitlines()]


def test_no_formatter_marker_without_a_formatter():
    if formatter_configured():
        return
    here = Path(__file__).resolve()   # this file names the markers it looks for
    found = [f"{path.relative_to(REPO)}:{n}" for path in tracked_python_files() if path.is_file() and path != here
             for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1) if MARKER.search(line)]
    assert not found, "formatter markers, but no formatter is configured:\n" + "\n".join(found[:20])


def test_the_marker_pattern_finds_the_spellings_a_formatter_reads():
    assert MARKER.search("x = [1,  2]  # fmt: skip") and MARKER.search("# fmt: off") and MARKER.search("#fmt:on")
    assert not MARKER.search("# format: skip this step")
