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


# this tracker's numbers are bare ("issue 35"); an upstream project's are cited with "#" ("vLLM issue #41485")
TRACKER_REFERENCE = re.compile(r"\b(issue|task)s? \d+\b|\bstop \d+\b", re.IGNORECASE)


def test_product_files_say_the_fact_not_the_tracker():
    """A product file (not tests/, not docs/) states what it means instead of citing this project's tracker
    ("issue 35: ..."): the tracker is not shipped, and its numbers mean nothing to a reader of the code."""
    listed = subprocess.run(["git", "ls-files", "*.py", "*.sh", "*.yaml", ".ci/run"], cwd=REPO, capture_output=True,
                            text=True, check=True).stdout.splitlines()
    found = [f"{name}:{n}: {line.strip()}" for name in listed if not name.startswith(("tests/", "docs/"))
             and (REPO / name).is_file()
             for n, line in enumerate((REPO / name).read_text(encoding="utf-8").splitlines(), 1)
             if TRACKER_REFERENCE.search(line)]
    assert not found, "tracker references in product files:\n" + "\n".join(found[:20])


def test_the_tracker_pattern():
    assert TRACKER_REFERENCE.search("(issue 35: ~17 CPU-s)") and TRACKER_REFERENCE.search("see issues 12 and 13")
    assert not TRACKER_REFERENCE.search("an issue with 35 frames") and not TRACKER_REFERENCE.search("stop_tokens 2")
    assert not TRACKER_REFERENCE.search("vLLM issue #41485 reports")
