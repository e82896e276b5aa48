"""A page of the local web without a browser: load, click, type, go back.

The local sites are plain HTML and forms (no scripts), so a browser's part in an episode
is small and exact: follow a link, toggle a radio or checkbox, fill a field and submit
its form (Enter), submit a form by its button, keep a history. This class does that
over the local web's own request handler, in process (no sockets), and reads each page
with the one text-observation function (web/page_text.py).

Used by the browser-free episode driver (rollout/http_tab.py) and by the plan walker
(web/walker.py). Every action returns "" or what went wrong, as the browser driver does.
"""

from __future__ import annotations

import urllib.parse

from asyncwebrl.web.page_text import Control, ParsedPage, cannot_type, parse_page
from asyncwebrl.web.server import EPISODE_COOKIE, LOGICAL_ORIGIN, LocalWeb

_REDIRECTS = (301, 302, 303, 307, 308)
MAX_REDIRECTS = 5


class HttpPage:
    """One tab of one episode (its cookie names the episode's server state)."""

    def __init__(self, web: LocalWeb, episode_id: str):
        self.web = web
        self.episode_id = episode_id
        self.url = ""  # logical URL (http://awr.local/...) of the page shown
        self.status = 0
        self.page: ParsedPage | None = None
        self.history: list[tuple[str, list]] = []  # earlier pages (URL, form state as left), for go_back
        self.requests = 0

    # -- loading -------------------------------------------------------------------------
    def open(self, url: str, method: str = "GET", body: bytes = b"", *, remember: bool = True) -> str:
        """Load a logical URL (following redirects, as a browser does after a POST)."""
        if not url.startswith(LOGICAL_ORIGIN + "/"):
            return f"navigation blocked: only {LOGICAL_ORIGIN}/ is reachable, not {url!r}"
        previous = self.url
        for _ in range(MAX_REDIRECTS + 1):
            parts = urllib.parse.urlsplit(url)
            target = parts.path + (f"?{parts.query}" if parts.query else "")
            self.requests += 1
            status, headers, payload = self.web.serve(method, target, body, f"{EPISODE_COOKIE}={self.episode_id}")
            if status in _REDIRECTS and "Location" in headers:
                url, method, body = urllib.parse.urljoin(url, headers["Location"]), "GET", b""
                continue
            if remember and previous:
                self.history.append((previous, self._form_state()))
            self.url, self.status = url.split("#")[0], status
            self.page = parse_page(payload.decode("utf-8", "replace"))
            self.changed: set[int] = set()  # controls the agent changed since this page loaded
            return ""
        return f"too many redirects from {url}"

    def go_back(self) -> str:
        """The previous page, loaded again, with the form state it was left in (a browser
        restores typed values and checked boxes on going back)."""
        if not self.history:
            return "no previous page"
        url, state = self.history.pop()
        error = self.open(url, remember=False)
        if not error:
            self._restore_form_state(state)
        return error

    def _form_state(self) -> tuple[list, dict]:
        """The page's field layout and the fields the agent changed on this visit (a
        browser saves only those: a value restored on going back is not saved again)."""
        layout = self._field_layout()
        changed = {i: (c.attrs.get("value"), "checked" in c.attrs, c.text)
                   for i, c in enumerate(self.page.controls) if i in self.changed}
        return layout, changed

    def _field_layout(self) -> list[tuple]:
        return [(c.tag, c.attrs.get("name"), c.type) for c in self.page.controls]

    def _restore_form_state(self, state: tuple[list, dict]) -> None:
        layout, changed = state
        if layout != self._field_layout():
            return  # the page came back with other fields: nothing to restore onto
        for index, (value, checked, text) in changed.items():
            control = self.page.controls[index]
            if control.type in ("radio", "checkbox"):
                control.attrs.pop("checked", None)
                if checked:
                    control.attrs["checked"] = ""
            else:
                if value is not None:
                    control.attrs["value"] = value
                control.text = text

    # -- acting --------------------------------------------------------------------------
    def control_of(self, element_id: int) -> Control | None:
        element = self.page.element(element_id)
        return element.control if element else None

    def click(self, control: Control) -> str:
        if control.tag == "a":
            href = control.attrs.get("href", "")
            if not href or href.startswith("#"):
                return ""  # a link within the page: nothing to load
            return self.open(urllib.parse.urljoin(self.url, href))
        if control.tag == "label" or (control.tag == "input" and control.type in ("radio", "checkbox")):
            target = control if control.tag == "input" else self._labelled(control)
            if target is not None:
                self._toggle(target)
            return ""
        if "disabled" in control.attrs:
            return ""  # a disabled control ignores clicks
        if control.tag == "button" or (control.tag == "input" and control.type in ("submit", "image", "reset")):
            if control.form is None or control.type in ("button", "reset"):
                return ""  # a button outside a form, a plain or a reset button: no script runs here
            return self.submit(control.form, submitter=control)
        return ""  # clicking a field focuses it; nothing else happens without scripts

    def type(self, control: Control, text: str) -> str:
        """Select the field's text, type, press Enter (which submits its form). Typing
        nothing leaves the selected text in place, as in the browser."""
        refused = cannot_type(control.tag, control.type)
        if refused:
            return refused
        if text and control.tag == "textarea":
            control.text = text + "\n"   # Enter in a text area is a new line
        elif text:
            control.attrs["value"] = text
        if text:
            self.changed.add(self.page.controls.index(control))
        if control.tag == "textarea" or control.form is None:
            return ""  # Enter in a textarea is a newline; without a form nothing is submitted
        return self.submit(control.form)

    def submit(self, form_index: int, submitter: Control | None = None) -> str:
        form = self.page.forms[form_index]
        pairs = []
        for index in form.fields:
            field = self.page.controls[index]
            name, kind = field.attrs.get("name"), field.type
            if not name or "disabled" in field.attrs:
                continue
            if field.tag == "button" or kind in ("submit", "button", "reset", "image"):
                if field is submitter:  # the clicked button's own name=value goes too
                    pairs.append((name, field.attrs.get("value", "")))
                continue
            if kind in ("radio", "checkbox"):
                if "checked" in field.attrs:
                    pairs.append((name, field.attrs.get("value", "on")))
                continue
            value = field.text if field.tag == "textarea" else field.attrs.get("value", "")
            pairs.append((name, value))
        encoded = urllib.parse.urlencode(pairs)
        action = urllib.parse.urljoin(self.url, form.action or self.url)
        if form.method == "POST":
            return self.open(action, "POST", encoded.encode())
        return self.open(action.split("?")[0] + "?" + encoded)

    def _labelled(self, label: Control) -> Control | None:
        if label.control is not None:
            return self.page.controls[label.control]
        target = label.attrs.get("for")
        return next((c for c in self.page.controls if target and c.attrs.get("id") == target), None)

    def _toggle(self, target: Control) -> None:
        self.changed.add(self.page.controls.index(target))
        if target.type == "radio":
            for index, other in enumerate(self.page.controls):
                if other.form == target.form and other.attrs.get("name") == target.attrs.get("name"):
                    other.attrs.pop("checked", None)
                    self.changed.add(index)
            target.attrs["checked"] = ""
        elif "checked" in target.attrs:
            del target.attrs["checked"]
        else:
            target.attrs["checked"] = ""
