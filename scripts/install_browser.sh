#!/usr/bin/env bash
# Headless Chromium for the viewer's browser test (tests/test_view_browser.py): Debian's `chromium` package.
# Idempotent: does nothing when a chromium binary is already on PATH. Needs root (or sudo) and the Debian mirrors.
# Usage: bash scripts/install_browser.sh
set -euo pipefail
for name in chromium chromium-browser; do
  if command -v "$name" >/dev/null 2>&1; then
    echo "already installed: $(command -v "$name") ($("$name" --version 2>/dev/null || echo 'version unknown'))"
    exit 0
  fi
done
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update
# fonts-dejavu-core: without a font the screenshot's text renders as nothing (a blank-looking page)
$SUDO apt-get install -y --no-install-recommends chromium fonts-dejavu-core
chromium --version
