"""Each wrong formula that once passed the whole suite must now fail a fast test.

A copy of the package gets one one-line change at a time (the change a careless edit would make), and the fast test
file that guards it runs against the copy in a fresh process: it must fail. The processes are forked from one server
that has imported the third-party libraries (torch, transformers, pytest) and nothing of cader, so each change pays
for its own test run and cader's import, not for torch's (about 8 s of every run before).
"""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

# (what the change does, file under the repository, text, wrong text, the test file that must fail)
LISTED = [
    (
        "accept on P_yes > delta",
        "evaluate/method/stage2.py",
        "accepted = p_yes >= cfg.delta",
        "accepted = p_yes > cfg.delta",
        "test_method_algorithm1.py",
    ),
    (
        "Stage 1 at 2 fps (config)",
        "contracts/paper.py",
        "r1: float = cite(1.0,",
        "r1: float = cite(2.0,",
        "test_method_algorithm1.py",
    ),
    (
        "Stage 1 at 2 fps (sampler)",
        "evaluate/method/stage1.py",
        "reader.sample_uniform(cfg.r1,",
        "reader.sample_uniform(2.0,",
        "test_method_algorithm1.py",
    ),
    (
        "P_yes renormalised by default",
        "contracts/paper.py",
        '"p_yes_mode": Departure("vocab",',
        '"p_yes_mode": Departure("yes_no",',
        "test_method_algorithm1.py",
    ),
    (
        "P_yes always renormalised",
        "evaluate/method/stage2.py",
        'if self.cfg.p_yes_mode == "yes_no":',
        "if True:",
        "test_method_algorithm1.py",
    ),
    (
        "final answer on F1",
        "evaluate/method/stage2.py",
        "out = self._generate(system, user, clip, self.cfg.max_new_tokens_answer)",
        "out = self._generate(system, user, self.f1, self.cfg.max_new_tokens_answer)",
        "test_method_algorithm1.py",
    ),
    (
        "thinking on in Stage 1",
        "evaluate/method/stage1.py",
        "enable_thinking=False",
        "enable_thinking=True",
        "test_method_algorithm1.py",
    ),
    (
        "crop clipped at the edges by default",
        "contracts/paper.py",
        '"crop_edge": Departure("shift",',
        '"crop_edge": Departure("clip",',
        "test_method_algorithm1.py",
    ),
    (
        "Table 4: top edge 0.99",
        "evaluate/report.py",
        '(">=0.995", 0.995, float("inf"))',
        '(">=0.995", 0.99, float("inf"))',
        "test_report.py",
    ),
    (
        "Table 4: edge 0.96",
        "evaluate/report.py",
        '("[0.97,0.99)", 0.97, 0.99)',
        '("[0.97,0.99)", 0.96, 0.99)',
        "test_report.py",
    ),
    (
        "Table 4: bins closed above",
        "evaluate/report.py",
        'lo <= r["stage1"]["margin"] < hi',
        'lo < r["stage1"]["margin"] <= hi',
        "test_report.py",
    ),
    (
        "Table 5: band (0.90, tau)",
        "evaluate/report.py",
        "lambda m, t: 0.90 <= m < t",
        "lambda m, t: 0.90 < m < t",
        "test_report.py",
    ),
    (
        "Table 5: band [0.90, tau]",
        "evaluate/report.py",
        "lambda m, t: 0.90 <= m < t",
        "lambda m, t: 0.90 <= m <= t",
        "test_report.py",
    ),
    (
        "Table 5: band <= 0.90",
        "evaluate/report.py",
        "lambda m, t: m < min(0.90, t)",
        "lambda m, t: m <= min(0.90, t)",
        "test_report.py",
    ),
    ("Figure 4: last proposal", "evaluate/report.py", "verifies[0]", "verifies[-1]", "test_report.py"),
    (
        "Table 3: only samples that cropped",
        "evaluate/report.py",
        'stage2 = [r for r in ok if r.get("route") == "stage2"]',
        'stage2 = [r for r in ok if (r.get("stage2") or {}).get("cycles", 0) >= 1]',
        "test_report.py",
    ),
    (
        "Table 3: micro accuracy for MLVU",
        "evaluate/report.py",
        '"accuracy": summary["m_avg"] if macro else summary["accuracy"]',
        '"accuracy": summary["accuracy"]',
        "test_report.py",
    ),
    (
        "Table 7: depth 0 included",
        "evaluate/report.py",
        'if r["stage2"].get("cycles", 0) >= 1:',
        'if r["stage2"].get("cycles", 0) >= 0:',
        "test_report.py",
    ),
]


@pytest.fixture(scope="module")
def package_copy(tmp_path_factory):
    """The five package folders under `cader/` (imported ahead of the installed package via PYTHONPATH); contracts/
    holds the paper's values, the defaults of the method."""
    root = tmp_path_factory.mktemp("mutant")
    ignore = shutil.ignore_patterns("__pycache__")
    for name in ("evaluate", "calibrate", "vlm", "train", "contracts"):
        shutil.copytree(REPO / name, root / "cader" / name, ignore=ignore)
    shutil.copytree(REPO / "tests", root / "tests", ignore=ignore)
    # the copy, not the installed package, must be the one under test: checked once for every mutated module (one
    # interpreter start, not one per mutant)
    modules = sorted({"cader." + rel[:-3].replace("/", ".") for _, rel, *_ in LISTED})
    code = f"import importlib\nfor m in {modules!r}:\n    print(importlib.import_module(m).__file__)"
    files = subprocess.run([sys.executable, "-c", code], cwd=root, env={**os.environ, "PYTHONPATH": str(root)},
                           capture_output=True, text=True, check=True).stdout.split()
    assert len(files) == len(modules) and all(f.startswith(str(root)) for f in files), files
    return root


# The fork server: reads one job per line ({"test": <pytest target>, "log": <file>}), forks, runs pytest in the
# child against the package copy (PYTHONPATH) and answers {"code": <exit status>}. It imports no cader module, so
# each child imports the copy as it is at that moment, mutation included.
FORK_SERVER = r"""
import json, os, sys
import numpy, pytest, torch, transformers
from transformers.models.qwen3_vl import modeling_qwen3_vl, processing_qwen3_vl
print(json.dumps({"ready": True}), flush=True)
for line in sys.stdin:
    job = json.loads(line)
    pid = os.fork()
    if pid == 0:
        log = os.open(job["log"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(log, 1)
        os.dup2(log, 2)
        code = pytest.main(["-q", "-x", "-p", "no:cacheprovider", job["test"]])
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(int(code))
    _, status = os.waitpid(pid, 0)
    print(json.dumps({"code": os.waitstatus_to_exitcode(status)}), flush=True)
"""


@pytest.fixture(scope="module")
def run_in_fork(package_copy):
    server = subprocess.Popen([sys.executable, "-c", FORK_SERVER], cwd=package_copy, text=True,
                              env={**os.environ, "PYTHONPATH": str(package_copy)}, stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE)
    assert json.loads(server.stdout.readline()) == {"ready": True}

    def run(test_file: str, log: Path) -> tuple[int, str]:
        server.stdin.write(json.dumps({"test": f"tests/{test_file}", "log": str(log)}) + "\n")
        server.stdin.flush()
        return json.loads(server.stdout.readline())["code"], log.read_text(errors="replace")

    yield run
    server.stdin.close()
    server.wait(timeout=60)


@pytest.mark.slow
def test_the_fork_server_runs_the_unchanged_copy_green(package_copy, run_in_fork, tmp_path):
    """The baseline every mutant is judged against: the copy as it is passes, so a mutant's failure is its own."""
    for test_file in sorted({m[-1] for m in LISTED}):
        code, log = run_in_fork(test_file, tmp_path / f"{test_file}.log")
        assert code == 0, f"the unchanged copy fails {test_file}:\n{log[-2000:]}"


@pytest.mark.slow
@pytest.mark.parametrize("name, rel, text, wrong, test_file", LISTED, ids=[m[0] for m in LISTED])
def test_listed_wrong_formula_fails_a_fast_test(package_copy, run_in_fork, tmp_path, name, rel, text, wrong,
                                                test_file):
    path = package_copy / "cader" / rel
    original = path.read_text()
    assert text in original, f"{name}: the guarded line changed; update LISTED"
    path.write_text(original.replace(text, wrong))
    try:
        code, log = run_in_fork(test_file, tmp_path / "pytest.log")
    finally:
        path.write_text(original)
    assert code == 1, f"{name} passed {test_file}:\n{log[-2000:]}"
