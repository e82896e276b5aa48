#!/usr/bin/env bash
# Sets up AsyncWebRL on a fresh Debian/Ubuntu machine or laptop:
#   1. a virtual environment in .venv with the packages of requirements.txt;
#   2. a Chromium that Playwright can drive. Playwright's own build where it can be
#      downloaded; otherwise the system package (apt). AsyncWebRL always launches it
#      through an explicit executable path (asyncwebrl/rollout/browser.py).
# Set ASYNCWEBRL_BROWSER=system to skip the Playwright download attempt (offline CI), and
# JAX_EXTRA=tpu (Cloud TPU VMs) or JAX_EXTRA=cuda12 (NVIDIA GPUs) for JAX's accelerator
# build; without it JAX runs on the CPU.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
"$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11))' || {
  echo "AsyncWebRL needs Python >= 3.11 (set PYTHON=/path/to/python3.11)" >&2; exit 1; }
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -r requirements.txt
if [ -n "${JAX_EXTRA:-}" ]; then
  jax_version=$(.venv/bin/python -c 'import jax; print(jax.__version__)')
  .venv/bin/python -m pip install -q "jax[$JAX_EXTRA]==$jax_version"
fi

have_chromium() { .venv/bin/python -c 'from asyncwebrl.rollout.browser import find_chromium; print(find_chromium())' 2>/dev/null; }

if path=$(have_chromium); then
  echo "Chromium: $path"
  exit 0
fi
if [ "${ASYNCWEBRL_BROWSER:-}" != "system" ] && timeout 300 .venv/bin/python -m playwright install chromium; then
  echo "Chromium: Playwright's build"
else
  echo "Playwright's browser download is unavailable here; installing the system Chromium." >&2
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -q
  $SUDO apt-get install -y -q chromium || $SUDO apt-get install -y -q chromium-browser
fi
path=$(have_chromium) || { echo "Chromium installation failed" >&2; exit 1; }
echo "Chromium: $path"
