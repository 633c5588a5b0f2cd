#!/usr/bin/env bash
# lmms-eval 0.7.3 for `cader` as an lmms-eval model (docs/lmms_eval.md), in its own virtual environment.
# Why a side environment: `pip install --dry-run lmms-eval==0.7.3` in the main one would downgrade av 18.1 -> 15.1
# (lmms-eval pins av<16) and add ~60 packages (wandb, timm, sentence-transformers, the HF `evaluate` package, ...);
# torch and transformers would stay. --system-site-packages reuses the main environment's torch, transformers and
# friends, so only lmms-eval's own dependencies land in the venv. cader is installed into it again (editable, no
# dependencies) so that its `lmms_eval.models` entry point is in the venv's metadata.
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
if [ -x "$VENV/bin/python" ] && "$VENV/bin/python" -P -c "$check" 2>/dev/null; then
  echo "already installed: $VENV"
  exit 0
fi
[ -x "$VENV/bin/python" ] || "$PY" -m venv --system-site-packages "$VENV"
# filelock<4: lmms-eval 0.7.3's evaluator imports filelock._api, which filelock 4 (the main environment's) removed
"$VENV/bin/python" -m pip install "lmms-eval==0.7.3" "filelock<4"
"$VENV/bin/python" -m pip install --no-deps --no-build-isolation -e "$REPO"
"$VENV/bin/python" -P -c "$check"
