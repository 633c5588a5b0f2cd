#!/usr/bin/env bash
# Take upgrades on purpose: re-resolve every environment to the newest versions pyproject.toml (and the side venvs'
# install scripts) allow, run the default test suite on them, and write the new lock only when it passes.
#   bash scripts/upgrade_lock.sh            (from the repository; about 25 minutes on 2 cores)
# It works in a scratch clone of HEAD (commit first), so the checkout's own venvs are left alone; on success it copies
# the new locks/*.txt into this checkout and prints which versions moved (`git diff locks/` shows them too). On a
# failing suite it keeps the scratch folder and its log, and the lock stays as it was.
# $PYTHON: the base interpreter for the new venv (default python3); $UPGRADE_DIR: the scratch folder.
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
WORK="${UPGRADE_DIR:-$(mktemp -d /tmp/cader-upgrade.XXXXXX)}"
BASE_PYTHON="${PYTHON:-python3}"
echo "upgrade_lock: scratch clone in $WORK"
rm -rf "$WORK/repo"
git clone -q "$REPO" "$WORK/repo"
cd "$WORK/repo"
"$BASE_PYTHON" -m venv .venv
# shellcheck disable=SC1091
. .venv/bin/activate
CADER_UNLOCKED=1 bash scripts/install.sh >"$WORK/install.log" 2>&1 || {
  echo "upgrade_lock: the unlocked install failed; see $WORK/install.log" >&2; exit 1; }
python scripts/lock.py write --locks "$WORK/new-locks"
# the suite checks the installed versions against locks/ (tests/test_lock.py): here that is the new lock
cp "$WORK"/new-locks/*.txt locks/
if ! python -m pytest -q -p no:cacheprovider >"$WORK/pytest.log" 2>&1; then
  echo "upgrade_lock: the default suite failed on the new versions; the lock is unchanged." >&2
  echo "upgrade_lock: $(tail -n 1 "$WORK/pytest.log"); failures: grep -E '^(FAILED|ERROR)' $WORK/pytest.log" >&2
  exit 1
fi
echo "upgrade_lock: suite passed: $(tail -n 1 "$WORK/pytest.log")"
echo "upgrade_lock: versions that moved (installed now, against the old lock):"
python scripts/lock.py check --locks "$REPO/locks" || true
cp "$WORK"/new-locks/*.txt "$REPO/locks/"
echo "upgrade_lock: wrote $REPO/locks/; commit it with the note of what moved"
