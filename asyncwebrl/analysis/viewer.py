"""A static trajectory viewer: one HTML page per saved episode, and an index per run.

    python -m asyncwebrl.analysis.viewer runs/default      # (re)write every page of a run

Training writes them as it goes (W/trajectories/index.html and .../update_N/index.html).
A page shows the task, outcome and reward, then for each step the screenshot with the
click drawn where it landed (and, for text observations, the page text with the named
element's line highlighted), the response with its Memory line highlighted, the action,
any action error, and the policy versions that wrote the step. Plain HTML and CSS: it
opens from the disk in any browser, nothing to serve.
"""

from __future__ import annotations

import html
import json
import os
import struct
import sys

_STYLE = """
body { font: 14px/1.4 system-ui, sans-serif; margin: 24px; max-width: 1400px; color: #222 }
.summary { background: #f4f4f8; padding: 12px 16px; border-radius: 6px }
.success { color: #117a2b } .failure { color: #b3261e }
.step { display: grid; grid-template-columns: minmax(300px, 640px) 1fr; gap: 16px; margin: 20px 0;
        border-top: 1px solid #ddd; padding-top: 12px }
.shot { position: relative; display: inline-block; width: 100% }
.shot img { width: 100%; border: 1px solid #ccc; display: block }
.click { position: absolute; width: 18px; height: 18px; margin: -11px 0 0 -11px; border: 3px solid #ff2d7a;
         border-radius: 50%; box-shadow: 0 0 0 2px #fff }
pre { white-space: pre-wrap; word-break: break-word; background: #fafafa; padding: 8px; margin: 6px 0 }
.page { max-height: 480px; overflow: auto; font-size: 12px; border: 1px solid #ccc }
mark { background: #fff2a8 } .error { color: #b3261e } .meta { color: #666 }
table { border-collapse: collapse } td, th { padding: 4px 10px; border-bottom: 1px solid #eee; text-align: left }
"""


def _png_size(path: str) -> tuple[int, int] | None:
    try:
        with open(path, "rb") as f:
            header = f.read(24)
    except OSError:
        return None
    if header[:8] != b"\x89PNG\r\n\x1a\n":
        return None
    return struct.unpack(">II", header[16:24])


def _response_html(response: str) -> str:
    lines = [html.escape(line) for line in response.splitlines()]
    return "\n".join(f"<mark>{line}</mark>" if line.lstrip().startswith("Memory:") else line for line in lines)


def _page_text_html(step: dict) -> str:
    """A text observation, the line of the element the action named highlighted."""
    target = (step.get("action") or {}).get("element_id")
    lines = [html.escape(line) for line in step["page_text"].splitlines()]
    if target is not None:
        lines = [f"<mark>{line}</mark>" if line.startswith(f"[{target}] ") else line for line in lines]
    return f'<pre class="page">{chr(10).join(lines)}</pre>'


def _step_html(folder: str, step: dict) -> str:
    shot = ""
    if step.get("screenshot"):
        click = ""
        size = _png_size(os.path.join(folder, step["screenshot"]))
        if step.get("point") and size:
            left, top = 100 * step["point"][0] / size[0], 100 * step["point"][1] / size[1]
            click = f'<span class="click" style="left:{left:.2f}%;top:{top:.2f}%"></span>'
        shot = f'<div class="shot"><img src="{html.escape(step["screenshot"])}" alt="step {step["index"]}">{click}</div>'
    action = step.get("action") or {}
    arguments = ", ".join(f"{k}={json.dumps(v, ensure_ascii=False)}" for k, v in action.items() if k != "name")
    error = f'<p class="error">action error: {html.escape(step["action_error"])}</p>' if step.get("action_error") else ""
    versions = ", ".join(str(v) for v in step.get("versions") or []) or "none (no model)"
    page = _page_text_html(step) if step.get("page_text") else ""
    return (f'<section class="step" id="step-{step["index"]}"><div>{shot}{page}</div><div>'
            f'<h3>Step {step["index"]}: {html.escape(str(action.get("name", "?")))}({html.escape(arguments)})</h3>'
            f'<p class="meta">{html.escape(step.get("url", ""))}<br>policy versions: {versions}; '
            f'{step.get("response_tokens", 0)} response tokens</p>{error}'
            f'<pre>{_response_html(step.get("response", ""))}</pre></div></section>')


def episode_page(folder: str) -> str:
    """Write folder/index.html from folder/trajectory.json (RunDirectory.save_trajectory); returns its path."""
    with open(os.path.join(folder, "trajectory.json")) as f:
        episode = json.load(f)
    reward = episode.get("reward")
    verdict = "unknown" if reward is None else ("success" if reward > 0 else "failure")
    summary = (f'<div class="summary"><h1>{html.escape(episode.get("instruction", ""))}</h1>'
               f'<p>task <code>{html.escape(episode["task_id"])}</code>, episode {html.escape(episode["episode_id"])}'
               f'<br>outcome <b>{html.escape(episode["outcome"])}</b>, reward '
               f'<b class="{verdict}">{reward} ({verdict})</b>, {len(episode["steps"])} steps, {episode["seconds"]} s'
               f'<br>answer: {html.escape(episode.get("answer") or "(none)")}'
               f'<br>judge: {html.escape(episode.get("judge_note") or "")}'
               + (f'<br><span class="error">error: {html.escape(episode["error"])}</span>' if episode.get("error") else "")
               + "</p></div>")
    body = summary + "".join(_step_html(folder, step) for step in episode["steps"])
    return _write(os.path.join(folder, "index.html"), f"Episode {episode['episode_id']}", body)


def run_index(run_dir: str) -> str:
    """Write W/trajectories/index.html: one row per saved episode, linking to its page."""
    root = os.path.join(run_dir, "trajectories")
    rows = []
    for name in sorted(os.listdir(root)):
        path = os.path.join(root, name, "trajectory.json")
        if not os.path.exists(path):
            continue
        with open(path) as f:
            episode = json.load(f)
        rows.append(f'<tr><td><a href="{html.escape(name)}/index.html">{html.escape(name)}</a></td>'
                    f'<td>{html.escape(episode.get("instruction", ""))}</td><td>{html.escape(episode["outcome"])}</td>'
                    f'<td>{episode.get("reward")}</td><td>{len(episode["steps"])}</td></tr>')
    body = ("<h1>Saved episodes</h1><table><tr><th>episode</th><th>task</th><th>outcome</th><th>reward</th>"
            "<th>steps</th></tr>" + "".join(rows) + "</table>")
    return _write(os.path.join(root, "index.html"), "Saved episodes", body)


def _write(path: str, title: str, body: str) -> str:
    partial = path + ".partial"
    # A model can write any string, a lone surrogate ("\ud800") included, which UTF-8 cannot
    # encode: shown as its escape rather than failing the page (and the training update).
    with open(partial, "w", encoding="utf-8", errors="backslashreplace") as f:
        f.write(f'<!doctype html><html><head><meta charset="utf-8"><title>{html.escape(title)}</title>'
                f"<style>{_STYLE}</style></head><body>{body}</body></html>")
    os.replace(partial, path)
    return path


def write_viewer(run_dir: str) -> str:
    """Every saved episode's page and the run's index; returns the index path."""
    root = os.path.join(run_dir, "trajectories")
    if not os.path.isdir(root):
        raise FileNotFoundError(f"{root} does not exist: is {run_dir} a training run's directory?")
    for name in sorted(os.listdir(root)):
        if os.path.exists(os.path.join(root, name, "trajectory.json")):
            episode_page(os.path.join(root, name))
    return run_index(run_dir)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit("usage: python -m asyncwebrl.analysis.viewer RUN_DIR")
    print(write_viewer(sys.argv[1]))
