"""The built wheel, not only the editable install, holds every subpackage and runs (issue: a new subpackage was
missing from the wheel, because pyproject's package list is written by hand and only `pip install -e` was tested)."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import tomllib
from cader.scripts.side_venv import ensure_side_venv

REPO = Path(__file__).resolve().parents[1]


def declared() -> tuple[dict[str, str], list[str]]:
    setup = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    return setup["package-dir"], setup["packages"]


def test_every_folder_with_an_init_is_a_declared_package():
    roots, packages = declared()
    found = set()
    for name, folder in roots.items():
        for init in (REPO / folder).rglob("__init__.py"):
            parts = init.parent.relative_to(REPO / folder).parts
            if "__pycache__" not in parts:
                found.add(".".join([name, *parts]))
    assert sorted(found) == sorted(packages)


@pytest.mark.slow
def test_the_wheel_installs_in_a_fresh_venv_and_runs_a_stage(tmp_path):
    wheels, source = tmp_path / "wheels", tmp_path / "source"
    # built from a copy: setuptools leaves build/ beside the sources, and a stale build/lib in the checkout would
    # carry deleted modules into the next wheel
    shutil.copytree(REPO, source, ignore=shutil.ignore_patterns(".git", ".venv*", "runs", "build", "*.egg-info",
                                                                 "__pycache__", ".pytest_cache", "tests"))
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w",
                    str(wheels), str(source)], check=True, cwd=tmp_path)
    wheel = next(wheels.glob("cader_toolkit-*.whl"))
    env_dir = tmp_path / "venv"
    # the main environment's packages stay visible (torch, transformers: no download); cader comes from the wheel
    ensure_side_venv(env_dir, with_pip=False)  # sees the main environment, a venv or not (scripts/side_venv.py)
    python = env_dir / "bin" / "python"
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "-q",
                    "--ignore-installed", str(wheel)], check=True, cwd=tmp_path)
    where = subprocess.run([str(python), "-c", "import cader.evaluate.judge.compare_cli as m; print(m.__file__)"],
                           check=True, cwd=tmp_path, capture_output=True, text=True).stdout.strip()
    assert where.startswith(str(env_dir)), where  # the wheel's copy, not the checkout's
    cader = env_dir / "bin" / "cader"
    env = {**os.environ, "PYTHONPATH": ""}
    assert "export-lmms" in subprocess.run([str(cader), "--help"], check=True, cwd=tmp_path, env=env,
                                           capture_output=True, text=True).stdout
    from cader.dev.viewer_records import synthetic_records

    run = tmp_path / "run"
    run.mkdir()
    (run / "predictions.jsonl").write_text("".join(__import__("json").dumps(r) + "\n"
                                                   for r in synthetic_records(12, seed=2)))
    done = subprocess.run([str(cader), "export-lmms", str(run), "--out", str(tmp_path / "export")], cwd=tmp_path,
                          env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "export" / "results.json").is_file()
