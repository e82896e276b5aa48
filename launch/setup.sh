#!/usr/bin/env bash
# Sets up AsyncWebRL on a fresh Debian/Ubuntu machine or laptop:
#   1. a virtual environment in .venv with this project installed editable (pyproject.toml
#      lists the dependencies), so that main.py, the tests and the notebooks run on the
#      working tree as it is;
#   2. a Chromium that Playwright can drive. Playwright's own build where it can be
#      downloaded; otherwise the system package (apt). AsyncWebRL always launches it
#      through an explicit executable path (asyncwebrl/rollout/browser.py).
# Settings (environment):
#   ASYNCWEBRL_EXTRAS  pyproject.toml's extras, comma-separated; default `test` (pytest, and
#                      torch as the transformers reference: a developer machine, CI). Set it
#                      empty (ASYNCWEBRL_EXTRAS=) on GPU hosts and TPU VMs that only train:
#                      torch, a multi-GB download there, is then left out.
#   JAX_EXTRA          tpu (Cloud TPU VMs) or cuda12 (NVIDIA GPUs): JAX's accelerator build;
#                      without it JAX runs on the CPU.
#   ASYNCWEBRL_BROWSER=system  skips the Playwright download attempt (offline CI).
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
"$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11))' || {
  echo "AsyncWebRL needs Python >= 3.11 (set PYTHON=/path/to/python3.11)" >&2; exit 1; }
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
extras=${ASYNCWEBRL_EXTRAS-test}   # (no colon: set but empty means no extras)
case ${JAX_EXTRA:-} in
  "") ;;
  tpu) extras+=,tpu ;;
  cuda12) extras+=,cuda ;;
  *) echo "JAX_EXTRA is tpu or cuda12, not $JAX_EXTRA" >&2; exit 1 ;;
esac
extras=${extras#,}
# One resolve with the accelerator extra, so pip picks a jax that has a matching jaxlib/libtpu
.venv/bin/python -m pip install -q -e ".${extras:+[$extras]}"

have_chromium() { .venv/bin/python -c 'from asyncwebrl.rollout.browser import find_chromium; print(find_chromium(""))' 2>/dev/null; }

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
