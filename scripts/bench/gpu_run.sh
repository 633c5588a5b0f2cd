#!/usr/bin/env bash
# The GPU check in one command (docs/bench.md, "GPU check"): install the carried wheels, make `cader` importable from
# this checkout (it is not installed on the device machine), then run scripts/bench/gpu_run.py, which writes
# $OUT/gpu.json and $OUT/gpu_run.log.
#
#   bash scripts/bench/gpu_run.sh                                 # on the device machine: the tool sets OUT
#   OUT=/tmp/gpu bash scripts/bench/gpu_run.sh --dry_run true     # the same path on a CPU, tiny widths
#
# PYTHON (default python3), GPU_RUN_WHEELS (default <repo>/.whl) and GPU_RUN_SITE (default /tmp/site) point the
# install elsewhere (the tests rehearse it with a fake wheel folder). Exit 2 with a one-line reason when something
# the run needs is missing; otherwise gpu_run.py's status (0, or 1 when a part failed).
set -uo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
python=${PYTHON:-python3}
wheels=${GPU_RUN_WHEELS:-$repo/.whl}
site=${GPU_RUN_SITE:-/tmp/site}

fail() {
    echo "gpu_run: $*" >&2
    exit 2
}

[ -n "${OUT:-}" ] || fail "OUT is not set (the device tool sets it; export OUT=DIR to rehearse)"
mkdir -p "$OUT" || fail "cannot create OUT=$OUT"
log=$OUT/gpu_run.log
compgen -G "$wheels/*.whl" >/dev/null ||
    fail "no wheels in $wheels: download them here first (python scripts/bench/gpu_run.py wheels) and carry .whl"

# the device README's install line, with its two folders as variables
"$python" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$site" \
    "$wheels"/*.whl >>"$log" 2>&1 || fail "installing the wheels in $wheels failed: $(tail -n 1 "$log")"
export PYTHONPATH=$site${PYTHONPATH:+:$PYTHONPATH}

# pyproject's package-dir (cader.vlm <- vlm/, ...) as links under $site/cader, a namespace package like the installed one
"$python" - "$repo" "$site" >>"$log" 2>&1 <<'EOF' || fail "linking the cader packages into $site failed: $(tail -n 1 "$log")"
import sys
import tomllib
from pathlib import Path

repo, site = Path(sys.argv[1]), Path(sys.argv[2])
folders = tomllib.loads((repo / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
for package, folder in folders.items():
    link = site / Path(*package.split("."))
    link.parent.mkdir(parents=True, exist_ok=True)
    if link.is_symlink():
        link.unlink()
    link.symlink_to(repo / folder, target_is_directory=True)
EOF

cd "$repo" || fail "cannot enter $repo"
missing=$("$python" -c 'from cader.scripts.bench.gpu_run import missing_modules; print(", ".join(missing_modules()))' \
    2>>"$log") || fail "cannot import cader.scripts.bench.gpu_run from $repo: $(tail -n 1 "$log")"
[ -z "$missing" ] || fail "missing $missing: carry their wheels (.whl; docs/bench.md, GPU check)"
PYTHONUNBUFFERED=1 "$python" -m cader.scripts.bench.gpu_run run --out "$OUT" --site "$site" "$@"
