"""Observing a Chromium page and acting on it, in both interaction modes.

`coordinates`: the model points on a 0..1000 grid (docs/algorithm.md#actions), mapped to the viewport.
`set_of_marks`: visible interactive elements get numbers, drawn as boxes on the
screenshot and listed as text; the model names an element id.

Either way an observation lists the interactive elements with their boxes; the list is
what set-of-marks prompts show and what the oracle uses to find its targets.

Text observations (observe_text) read the live DOM through web/page_text.py instead:
every element of the whole page gets its text id, boxes drawn with the same ids on the
screenshot (text+screenshot), and an action's element is found again by its stamp.
"""

from __future__ import annotations

import asyncio

from playwright.async_api import Error as PlaywrightError

from asyncwebrl.rollout.observation import Element, Observation, grid_to_pixels, text_elements
from asyncwebrl.rollout.response import ELEMENT_INTERACTIONS, Action
from asyncwebrl.rollout.screenshots import ScreenshotStore
from asyncwebrl.web.page_text import NODE_ATTRIBUTE, STAMPED_SELECTOR, cannot_type, parse_page

# Interactive elements, their boxes in viewport pixels, and (optionally) numbered boxes
# drawn over them. A label that wraps a radio or checkbox stands for it; a label that
# wraps a text field is left out (the field itself is listed).
_SCAN_JS = r"""
(drawMarks) => {
  DRAW_MARKS
  document.querySelectorAll('[data-awr-overlay]').forEach(e => e.remove());
  const vw = window.innerWidth, vh = window.innerHeight;
  const selector = 'a[href], button, input:not([type=hidden]), textarea, select, label, [role=button], [role=link], [onclick]';
  const elements = [];
  let mark = 0;
  for (const el of document.querySelectorAll(selector)) {
    const tag = el.tagName.toLowerCase();
    const type = (el.getAttribute('type') || '').toLowerCase();
    if (tag === 'label' && !el.querySelector('input[type=radio], input[type=checkbox]')) continue;
    if ((type === 'radio' || type === 'checkbox') && el.closest('label')) continue;
    const r = el.getBoundingClientRect();
    if (r.width < 1 || r.height < 1) continue;
    const style = getComputedStyle(el);
    if (style.visibility === 'hidden' || style.display === 'none') continue;
    const cx = r.left + r.width / 2, cy = r.top + r.height / 2;
    const visible = cx >= 0 && cx < vw && cy >= 0 && cy < vh;
    const box = el.querySelector('input[type=radio], input[type=checkbox]');
    const text = (tag === 'input' || tag === 'textarea')
      ? (el.getAttribute('aria-label') || el.getAttribute('placeholder') || el.getAttribute('name') || '')
      : (el.innerText || el.getAttribute('aria-label') || el.value || '');
    elements.push({
      mark: visible ? ++mark : 0, tag, type,
      text: text.trim().replace(/\s+/g, ' ').slice(0, 80),
      value: (tag === 'input' || tag === 'textarea') && type !== 'radio' && type !== 'checkbox' ? el.value : '',
      checked: !!(el.checked || (box && box.checked)),
      x: r.left, y: r.top, width: r.width, height: r.height,
      oid: el.getAttribute('data-oid') || '',
    });
  }
  if (drawMarks) drawAwrMarks(elements.filter(e => e.mark), vw);
  return {elements, scrollY: window.scrollY, pageHeight: document.documentElement.scrollHeight,
          title: document.title};
}
"""
# Numbered boxes over elements ({mark, x, y, width, height} in viewport pixels). The number
# sits just right of the box (where list items and links leave blank space), or inside its
# right end at the edge of the screen: never on the text.
_DRAW_MARKS_FN = r"""
  function drawAwrMarks(marks, vw) {
    const layer = document.createElement('div');
    layer.setAttribute('data-awr-overlay', '');
    layer.style.cssText = 'position:fixed;left:0;top:0;width:100%;height:100%;pointer-events:none;z-index:2147483647';
    for (const e of marks) {
      const b = document.createElement('div');
      b.style.cssText = `position:absolute;left:${e.x}px;top:${e.y}px;width:${e.width}px;height:${e.height}px;` +
        'border:2px solid #ff2d7a;box-sizing:border-box';
      const tag = document.createElement('span');
      tag.textContent = e.mark;
      const side = e.x + e.width + 28 < vw ? 'left:100%' : 'right:0';
      tag.style.cssText = `position:absolute;${side};top:-2px;background:#ff2d7a;color:#fff;` +
        'font:bold 12px/14px monospace;padding:0 3px';
      b.appendChild(tag);
      layer.appendChild(b);
    }
    document.documentElement.appendChild(layer);
  }
"""
_SCAN_JS = _SCAN_JS.replace("DRAW_MARKS", _DRAW_MARKS_FN)

# The text observation's input: the live DOM with its form state copied into attributes
# (what was typed, what is checked), and every element that may be listed stamped with
# an ordinal (data-awr-n), so that an element id can be clicked without a second scan.
_DOM_JS = r"""
({selector, attribute}) => {
  document.querySelectorAll('[data-awr-overlay]').forEach(e => e.remove());
  let n = 0;
  for (const el of document.querySelectorAll(selector)) el.setAttribute(attribute, String(++n));
  for (const el of document.querySelectorAll('input')) {
    const type = (el.getAttribute('type') || '').toLowerCase();
    if (type === 'checkbox' || type === 'radio') el.toggleAttribute('checked', el.checked);
    else if (type !== 'file' && type !== 'password') el.setAttribute('value', el.value);
  }
  for (const el of document.querySelectorAll('textarea')) el.textContent = el.value;
  for (const el of document.querySelectorAll('option')) el.toggleAttribute('selected', el.selected);
  return {html: document.documentElement.outerHTML, scrollY: window.scrollY,
          pageHeight: document.documentElement.scrollHeight};
}
"""
# Text+screenshot: boxes with the text ids over the listed elements now in the viewport.
_MARK_TEXT_ELEMENTS_JS = r"""
({pairs, attribute}) => {
  DRAW_MARKS
  const vw = window.innerWidth, vh = window.innerHeight, marks = [];
  for (const [node, mark] of pairs) {
    const el = document.querySelector(`[${attribute}="${node}"]`);
    if (!el) continue;
    const r = el.getBoundingClientRect();
    const cx = r.left + r.width / 2, cy = r.top + r.height / 2;
    if (r.width >= 1 && r.height >= 1 && cx >= 0 && cx < vw && cy >= 0 && cy < vh)
      marks.push({mark, x: r.left, y: r.top, width: r.width, height: r.height});
  }
  drawAwrMarks(marks, vw);
}
""".replace("DRAW_MARKS", _DRAW_MARKS_FN)
# Where to click a text element: scrolled into view first, its centre in viewport pixels.
_LOCATE_JS = r"""
({node, attribute}) => {
  const el = document.querySelector(`[${attribute}="${node}"]`);
  if (!el) return null;
  el.scrollIntoView({block: 'center', inline: 'center'});
  const r = el.getBoundingClientRect();
  if (r.width < 1 || r.height < 1) return null;
  return [r.left + r.width / 2, r.top + r.height / 2];
}
"""
_REMOVE_MARKS_JS = "() => document.querySelectorAll('[data-awr-overlay]').forEach(e => e.remove())"
_SCROLL_JS = "(dy) => window.scrollBy(0, dy)"

SCROLL_OVERLAP_PX = 50  # a scroll moves one viewport minus this (docs/algorithm.md#actions)
NAVIGATION_GRACE_S = 0.05  # a click starts its navigation within this on a local page


async def observe(page, store: ScreenshotStore, *, interaction: str, step: int, shown_url: str,
                  last_error: str = "") -> Observation:
    """Scan, screenshot (into `store`: the caller owns one reference to the key)."""
    marks = interaction in ELEMENT_INTERACTIONS
    scan = await _evaluate_settled(page, _SCAN_JS, marks)
    png = await page.screenshot(type="png")
    if marks:
        await page.evaluate(_REMOVE_MARKS_JS)
    viewport = page.viewport_size
    return Observation(
        url=shown_url,
        title=scan["title"],
        screenshot_key=await store.aput(png),
        elements=[Element(**e) for e in scan["elements"]],
        scroll_y=scan["scrollY"],
        page_height=scan["pageHeight"],
        viewport=(viewport["width"], viewport["height"]),
        step=step,
        last_error=last_error,
    )


async def _evaluate_settled(page, script: str, argument):
    for attempt in range(3):
        try:
            return await page.evaluate(script, argument)
        except PlaywrightError as error:  # a late navigation replaced the document: wait for it
            if "context was destroyed" not in str(error) or attempt == 2:
                raise
            await page.wait_for_load_state("load")


async def observe_text(page, store: ScreenshotStore, *, screenshot: bool, step: int, shown_url: str,
                       last_error: str = "") -> Observation:
    """The text observation of the live DOM (web/page_text.py), and with `screenshot` the
    screenshot too, its visible elements boxed with their text ids."""
    dom = await _evaluate_settled(page, _DOM_JS, {"selector": STAMPED_SELECTOR, "attribute": NODE_ATTRIBUTE})
    parsed = parse_page(dom["html"])
    elements = text_elements(parsed)
    key = ""
    if screenshot:
        pairs = [[e.node, e.mark] for e in elements if e.node]
        await page.evaluate(_MARK_TEXT_ELEMENTS_JS, {"pairs": pairs, "attribute": NODE_ATTRIBUTE})
        key = await store.aput(await page.screenshot(type="png"))
        await page.evaluate(_REMOVE_MARKS_JS)
    viewport = page.viewport_size
    return Observation(url=shown_url, title=parsed.title, screenshot_key=key, elements=elements,
                       scroll_y=dom["scrollY"], page_height=dom["pageHeight"],
                       viewport=(viewport["width"], viewport["height"]), step=step, last_error=last_error,
                       text=parsed.text)


async def locate_text_element(page, element: Element) -> tuple[float, float] | None:
    """The viewport point of a text observation's element, scrolled into view (None: it is
    gone or not displayed)."""
    point = await page.evaluate(_LOCATE_JS, {"node": element.node, "attribute": NODE_ATTRIBUTE})
    return tuple(point) if point else None


class NavigationWatch:
    """Counts main-frame navigations started and pages loaded, so an action can wait for
    the page it opened. (wait_for_load_state would return at once: the old document is
    already loaded when the new one is still on its way.)"""

    def __init__(self, page):
        self.started = 0
        self.loaded = 0  # navigations that ended: a page loaded, or it failed, or became a download
        self._load_event = asyncio.Event()
        page.on("request", self._on_request)
        page.on("load", self._on_end)
        page.on("download", self._on_end)
        page.on("requestfailed", self._on_failed)

    @staticmethod
    def _is_main_navigation(request) -> bool:
        return request.is_navigation_request() and request.frame.parent_frame is None

    def _on_request(self, request) -> None:
        if self._is_main_navigation(request):
            self.started += 1

    def _on_failed(self, request) -> None:
        if self._is_main_navigation(request):
            self._on_end(request)

    def _on_end(self, _event) -> None:
        self.loaded += 1
        self._load_event.set()

    async def settle(self, page, started_before: int, loaded_before: int, timeout_s: float) -> None:
        """After an action: if it started a navigation, wait until a new page has loaded.

        Playwright's request event can arrive late on a busy machine, so the page is also
        asked whether it is being unloaded (LEAVING_FLAG_JS marks it on beforeunload).
        Events and replies come in order, so once the reply is here the counters are
        current too."""
        await asyncio.sleep(NAVIGATION_GRACE_S)
        try:
            leaving = await page.evaluate("() => !!window.__awrLeaving")
        except PlaywrightError:  # the old document is gone: a navigation is under way
            leaving = True
        if not leaving and self.started == started_before:
            return
        async with asyncio.timeout(timeout_s):
            while self.loaded == loaded_before:
                self._load_event.clear()
                await self._load_event.wait()


# Installed in every document (context.add_init_script): marks a page being unloaded.
LEAVING_FLAG_JS = "window.addEventListener('beforeunload', () => { window.__awrLeaving = true; });"


async def execute(page, action: Action, observation: Observation, *, watch: NavigationWatch,
                  resolve_url, timeout_s: float) -> str:
    """Run one action in the page; return an error message ("" if it went through).

    `resolve_url(url)` returns the browser URL for a `navigate` target, or raises
    ValueError when the URL is not allowed."""
    started_before, loaded_before = watch.started, watch.loaded
    if action.name in ("left_click", "type"):
        point = action_point(action, observation)
        if observation.text and action.name == "type" and not isinstance(point, str):
            element = _element_of(action, observation)   # the same refusal as the browser-free driver's
            point = cannot_type(element.tag, element.type) or point
        if observation.text and not isinstance(point, str):  # text ids: the element, wherever it is now
            point = await locate_text_element(page, _element_of(action, observation)) or \
                f"element {action.args['element_id']} is not displayed"
        if isinstance(point, str):
            return point
        await page.mouse.click(*point)
        if action.name == "type":
            await page.keyboard.press("Control+A")
            await page.keyboard.type(action.args["text"])
            await page.keyboard.press("Enter")
    elif action.name == "scroll":
        step = observation.viewport[1] - SCROLL_OVERLAP_PX
        await page.evaluate(_SCROLL_JS, step if action.args["direction"] == "down" else -step)
    elif action.name == "wait":
        await asyncio.sleep(action.args["time"])
    elif action.name in ("go_back", "navigate"):
        try:
            if action.name == "go_back":
                if await page.go_back(wait_until="load", timeout=timeout_s * 1000) is None:
                    return "no previous page"
            else:
                await page.goto(resolve_url(action.args["url"]), wait_until="load", timeout=timeout_s * 1000)
        except ValueError as error:  # the sandbox refused the URL
            return str(error)
        except PlaywrightError as error:  # a failed load (a blocked redirect, say) is the agent's problem...
            if page.is_closed():  # ...a dead page is not
                raise
            return f"navigation failed: {str(error).splitlines()[0]}"
    else:
        raise ValueError(f"cannot execute action {action.name!r}")
    await watch.settle(page, started_before, loaded_before, timeout_s)
    return ""


def _element_of(action: Action, observation: Observation) -> Element | None:
    return next((e for e in observation.marked() if e.mark == action.args["element_id"]), None)


def action_point(action: Action, observation: Observation) -> tuple[float, float] | str:
    """Where a click or type action lands, in viewport pixels (or why it cannot). Text
    observations have no layout: their elements' centres are placeholders, found again
    in the page when the action runs."""
    if "coordinate" in action.args:
        return grid_to_pixels(action.args["coordinate"], observation.viewport)
    element = _element_of(action, observation)
    if element is None:
        where = "on the page" if observation.text else "on screen"
        return f"no element with id {action.args['element_id']} {where}"
    return element.centre
