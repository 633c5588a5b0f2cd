#!/usr/bin/env bash
# lmms-eval 0.7.3 for `cader` as an lmms-eval model (docs/lmms_eval.md), in its own virtual environment.
# Why a side environment: `pip install --dry-run lmms-eval==0.7.3` in the main one would downgrade av 18.1 -> 15.1
# (lmms-eval pins av<16) and add ~60 packages (wandb, timm, sentence-transformers, the HF `evaluate` package, ...);
# torch and transformers would stay. The venv sees the main environment's site-packages (scripts/side_venv.py: the
# environment of the `python` running this script, or $PYTHON, whether a venv or the system interpreter), so it
# reuses its torch, transformers and friends, and only lmms-eval's own dependencies land in the venv. cader is
# installed into it again (editable, no dependencies) so that its `lmms_eval.models` entry point is in the venv's
# metadata.
# -P: the repo root must not be on sys.path, or its evaluate/ folder shadows the HF `evaluate` package lmms-eval imports.
# Idempotent: a venv that already imports lmms_eval 0.7.3 and resolves the `cader` model is left as it is.
# Usage: bash scripts/install_lmms_eval.sh [VENV]   (default: <repo>/.venv-lmms)
set -euo pipefail
REPO="$(cd "$(dirname "$0")/.." && pwd)"
VENV="${1:-$REPO/.venv-lmms}"
PY="${PYTHON:-python}"
check='import importlib.metadata as m
assert m.version("lmms_eval") == "0.7.3", m.version("lmms_eval")
import filelock._api
from lmms_eval.models import get_model
print("lmms-eval", m.version("lmms_eval"), "->", get_model("cader").__name__)'
# Creates the venv when absent; always (re)points it at the main environment, which may have moved since the last run.
LOCK=(-c "$REPO/locks/lmms-eval.txt")   # the versions the suite passed on (scripts/lock.py)
marker="$VENV/.cader-lmms-$(sha256sum "$REPO/locks/lmms-eval.txt" | cut -c1-12)"   # a changed lock installs again
if [ "${CADER_UNLOCKED:-0}" = 1 ]; then LOCK=(); marker="$VENV/.cader-lmms-unlocked"; fi
"$PY" "$REPO/scripts/side_venv.py" "$VENV"
if [ -f "$marker" ] && "$VENV/bin/python" -P -c "$check" 2>/dev/null; then
  echo "already installed: $VENV"
  exit 0
fi
# Without the main environment's torch, pip would resolve a second one (CUDA wheels) into the venv.
if ! seen="$("$VENV/bin/python" -P -c "import torch, transformers" 2>&1)"; then
  echo "install_lmms_eval: error: $VENV cannot import torch and transformers from the main environment" \
       "($("$PY" -c 'import sys; print(sys.prefix)')): $(tail -n 1 <<<"$seen"); install that first (pip install -e \".[dev]\")" >&2
  exit 1
fi
# filelock<4: lmms-eval 0.7.3's evaluator imports filelock._api, which filelock 4 (the main environment's) removed
"$VENV/bin/python" -m pip install "${LOCK[@]}" "lmms-eval==0.7.3" "filelock<4"
"$VENV/bin/python" -m pip install --no-deps --no-build-isolation -e "$REPO"
"$VENV/bin/python" -P -c "$check"
rm -f "$VENV"/.cader-lmms-*
touch "$marker"
