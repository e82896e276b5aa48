"""Finding and launching Chromium for Playwright.

Playwright's own browser download is blocked on many machines (and in our CI), so we
always launch through an explicit executable path: the one configured, else
$ASYNCWEBRL_CHROMIUM, else Playwright's downloaded build if present, else the system
package.
"""

from __future__ import annotations

import glob
import os
import shutil

# Background networking off: on a closed network Chromium otherwise keeps trying to
# reach Google's services. Do not pass --user-data-dir here (Playwright rejects it;
# launch() gives every browser a fresh temporary profile).
CHROMIUM_ARGS = (
    "--headless",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--hide-scrollbars",
    "--force-color-profile=srgb",
    # No shared workers: Playwright's routing sees none of their requests, so the URL sandbox
    # could not check them (docs/architecture.md, the hostile review's finding 5).
    "--disable-blink-features=SharedWorker",
)

_SYSTEM_CANDIDATES = (
    "/usr/lib/chromium/chromium",  # Debian's real binary (skips the shell wrapper)
    "/usr/bin/chromium",
    "/usr/bin/chromium-browser",
    "/usr/bin/google-chrome",
    "/snap/bin/chromium",
)


def find_chromium(configured: str) -> str:
    """The Chromium executable to launch: `configured` (browser.executable_path) or, if that
    is "", one found; raises with install advice if none exists."""
    for candidate in (configured, os.environ.get("ASYNCWEBRL_CHROMIUM", "")):
        if candidate:
            if not os.path.isfile(candidate):
                raise FileNotFoundError(f"Chromium executable {candidate!r} does not exist")
            return candidate
    cache = os.environ.get("PLAYWRIGHT_BROWSERS_PATH", os.path.expanduser("~/.cache/ms-playwright"))
    downloaded = sorted(glob.glob(os.path.join(cache, "chromium-*", "chrome-linux*", "chrome")))
    for candidate in [*downloaded[-1:], *_SYSTEM_CANDIDATES, shutil.which("chromium") or ""]:
        if candidate and os.path.isfile(candidate):
            return candidate
    raise FileNotFoundError(
        "No Chromium found. Run launch/setup.sh, or install one (`playwright install chromium`, or "
        "`apt-get install chromium`), or set ASYNCWEBRL_CHROMIUM=/path/to/chrome."
    )


def launch_args() -> list[str]:
    args = list(CHROMIUM_ARGS)
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        args.append("--no-sandbox")  # Chromium refuses to start its sandbox as root
    return args


async def launch_browser(playwright, executable_path: str):
    return await playwright.chromium.launch(
        executable_path=find_chromium(executable_path), headless=True, args=launch_args()
    )
