"""The page as text: HTML (the DOM as serialised) -> reading-order text and its elements.

This is the one definition of the text observation (agent.observation = text or
text+screenshot). Chromium feeds it the live DOM (form state copied into attributes
first, rollout/page.py); the browser-free driver (web/http_page.py) feeds it the HTTP
response body. Both therefore show the model the same bytes for the same page.

    # Harbor Depot                           headings: one '#' per level
    Welcome to Harbor Depot. Browse ...      paragraphs, list items, table rows: one line each
    [3] link "Cameras"                       every interactive element on its own line:
    [7] textbox "Search products" value=""   [id] role "label" (+ value= / checked=)
    Name | Price | Colour                    table cells joined by " | "

Ids are what `element_id` actions name: the numbers 1..n of a page's n listed elements,
shuffled by a hash of what the page lists (its title, roles and labels). Shuffled, since
a model trained on ids in document order learns positions ("the contact link is [4]")
that a new layout breaks, where it should read the labels; hashed, so one page always
gets the same ids (the same under both drivers, and when typing or toggling changes only
values). The whole page is listed, not only what a viewport would show.
"""

from __future__ import annotations

import dataclasses
import hashlib
import html.parser
import json
import random
import re
from typing import Callable

# Subtrees that are never shown.
_HIDDEN_TAGS = {"head", "script", "style", "template", "noscript", "title", "svg"}
# Tags that end a line of text before and after them.
_BLOCK_TAGS = {"address", "article", "aside", "blockquote", "br", "caption", "dd", "details", "dialog", "div", "dl",
               "dt", "fieldset", "figcaption", "figure", "footer", "form", "h1", "h2", "h3", "h4", "h5", "h6",
               "header", "hr", "legend", "li", "main", "nav", "ol", "p", "pre", "section", "summary", "table",
               "tbody", "tfoot", "thead", "tr", "ul"}
_VOID_TAGS = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"}
_CELL_TAGS = {"td", "th"}
_BUTTON_TYPES = {"submit", "button", "reset", "image"}
_TOGGLE_TYPES = {"checkbox", "radio"}
# Tags the Chromium side stamps with data-awr-n (a superset of what can be listed).
STAMPED_SELECTOR = "a, button, input, textarea, select, label, [role], [onclick]"
NODE_ATTRIBUTE = "data-awr-n"
_ELEMENT_LINE = re.compile(r"^\[(\d+)\] ")


@dataclasses.dataclass
class Control:
    """An element that can be listed or submitted: links, buttons, fields, labels."""

    tag: str
    attrs: dict[str, str]  # mutable: typing and toggling change "value" and "checked"
    form: int | None  # index of the enclosing form
    text: str = ""  # its own text content (a link's words, a label's words)
    control: int | None = None  # a label: the index (in controls) of the input it wraps
    id: int = 0  # its element id when listed; 0 when not (hidden inputs, labels of text fields)

    @property
    def type(self) -> str:
        return self.attrs.get("type", "").lower()

    @property
    def oid(self) -> str:
        return self.attrs.get("data-oid", "")


@dataclasses.dataclass
class Form:
    method: str
    action: str
    fields: list[int] = dataclasses.field(default_factory=list)  # indexes into controls


@dataclasses.dataclass
class PageElement:
    """One listed element as the text shows it. Its value and checked state are read
    from the controls, so typing and toggling show at once (as in a live DOM)."""

    id: int
    role: str  # link | button | textbox | checkbox | radio | combobox | clickable
    label: str
    control: Control  # the element itself
    state: Control  # where value / checked live: the element, or the input a label wraps

    @property
    def oid(self) -> str:  # data-oid: the oracle's handle, never shown to a model
        return self.control.oid

    @property
    def node(self) -> str:  # data-awr-n as stamped by Chromium ("" on a raw HTTP body)
        return self.control.attrs.get(NODE_ATTRIBUTE, "")

    @property
    def value(self) -> str | None:
        if self.role != "textbox":
            return None
        return self.state.text if self.state.tag == "textarea" else self.state.attrs.get("value", "")

    @property
    def checked(self) -> bool | None:
        return "checked" in self.state.attrs if self.role in _TOGGLE_TYPES else None

    def line(self) -> str:
        parts = [f"[{self.id}] {self.role} {_quote(self.label)}"]
        if self.value is not None:
            parts.append(f"value={_quote(self.value)}")
        if self.checked is not None:
            parts.append(f"checked={'true' if self.checked else 'false'}")
        return " ".join(parts)


@dataclasses.dataclass
class ParsedPage:
    title: str
    items: list[str | PageElement]  # reading order: text lines and listed elements
    elements: list[PageElement]  # listed, in reading order (their ids shuffled)
    controls: list[Control]
    forms: list[Form]

    def element(self, element_id: int) -> PageElement | None:
        return next((e for e in self.elements if e.id == element_id), None)

    @property
    def lines(self) -> list[str]:
        return [item if isinstance(item, str) else item.line() for item in self.items]

    @property
    def text(self) -> str:
        return "\n".join(self.lines)


def cannot_type(tag: str, kind: str) -> str:
    """Why an element takes no typed text ("" if it does: text fields and text areas).
    Both drivers refuse the same elements with the same words."""
    if tag == "textarea" or (tag == "input" and kind not in _BUTTON_TYPES | _TOGGLE_TYPES | {"hidden", "file"}):
        return ""
    return f"cannot type into a {tag if tag != 'a' else 'link'} element"


def _quote(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)


def squash_spaces(text: str) -> str:
    """Runs of whitespace as one space, none at the ends (how a label is shown and compared)."""
    return " ".join(text.split())


def _style_hides(attrs: dict[str, str]) -> bool:
    style = attrs.get("style", "").replace(" ", "").lower()
    return "display:none" in style or "visibility:hidden" in style


class _Reader(html.parser.HTMLParser):
    """One pass over the document: controls, forms, and a list of items (text lines and
    references to controls) in reading order. Labels are resolved after the pass, since
    a <label for=...> may come after its field."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.controls: list[Control] = []
        self.forms: list[Form] = []
        self.items: list[str | int] = []  # finished text lines, or control indexes
        self.title = ""
        self._line = ""  # the line being built
        self._prefix = ""  # heading marks for the line being built
        self._form: int | None = None
        self._stack: list[str] = []  # open tags
        self._hidden = 0  # depth inside never-shown subtrees
        self._in_title = False
        self._capture: list[int] = []  # controls whose text content is being collected
        self._label: int | None = None  # the open <label>
        self._cells = 0  # cells opened in the current table row

    # -- lines -------------------------------------------------------------------------
    def _flush(self) -> None:
        line = squash_spaces(self._line)
        if line:
            self.items.append(self._prefix + line)
        self._line, self._prefix = "", ""

    def _emit_control(self, index: int) -> None:
        self._flush()
        self.items.append(index)

    # -- parser callbacks ----------------------------------------------------------------
    def handle_starttag(self, tag, attrs):
        attrs = {k: v or "" for k, v in attrs}
        if tag == "title":
            self._in_title = True
        if self._hidden or tag in _HIDDEN_TAGS or "hidden" in attrs or _style_hides(attrs):
            if tag not in _VOID_TAGS:
                self._hidden += 1
                self._stack.append(tag)
            self._hidden_control(tag, attrs)
            return
        if tag not in _VOID_TAGS:
            self._stack.append(tag)
        if tag in _BLOCK_TAGS and not self._capture:
            self._flush()
        if tag in ("h1", "h2", "h3", "h4", "h5", "h6") and not self._capture:
            self._prefix = "#" * int(tag[1]) + " "
        if tag == "tr":
            self._cells = 0
        if tag in _CELL_TAGS and not self._capture:
            if self._cells and squash_spaces(self._line):
                self._line += " | "
            elif self._cells:
                self._line = "| "
            self._cells += 1
        if tag == "form":
            self.forms.append(Form(attrs.get("method", "get").upper(), attrs.get("action", "")))
            self._form = len(self.forms) - 1
        self._open_control(tag, attrs)

    def handle_startendtag(self, tag, attrs):
        self.handle_starttag(tag, attrs)
        if tag not in _VOID_TAGS:
            self.handle_endtag(tag)

    def handle_endtag(self, tag):
        if tag == "title":
            self._in_title = False
        if tag not in self._stack:  # a stray end tag: ignore, as browsers do
            return
        while self._stack:  # close whatever was left open inside it
            open_tag = self._stack.pop()
            if self._hidden:
                self._hidden -= 1
            else:
                self._close(open_tag)
            if open_tag == tag:
                break

    def handle_data(self, data):
        if self._in_title:
            self.title += data
        if self._hidden:
            return
        for index in self._capture:
            self.controls[index].text += data
        if not self._capture:
            self._line += data

    # -- controls ------------------------------------------------------------------------
    def _add(self, tag: str, attrs: dict[str, str]) -> int:
        self.controls.append(Control(tag, attrs, self._form))
        index = len(self.controls) - 1
        if tag in ("input", "textarea", "button", "select") and self._form is not None:
            self.forms[self._form].fields.append(index)
        return index

    def _hidden_control(self, tag: str, attrs: dict[str, str]) -> None:
        """A hidden input still goes with its form; nothing hidden is listed."""
        if tag == "input" and self._form is not None:
            self._add(tag, attrs)

    def _open_control(self, tag: str, attrs: dict[str, str]) -> None:
        if tag == "input":
            index = self._add(tag, attrs)
            if self._label is not None and self.controls[self._label].control is None:
                self.controls[self._label].control = index
            if self.controls[index].type != "hidden" and not self._capture_wraps_toggle(index):
                self._emit_control(index)
            return
        if tag in ("a", "button", "textarea", "select", "label") or "onclick" in attrs or \
                attrs.get("role") in ("button", "link"):
            if tag == "a" and "href" not in attrs and "onclick" not in attrs and "role" not in attrs:
                return
            index = self._add(tag, attrs)
            if tag == "label":
                self._label = index
                self._flush()
            self._capture.append(index)

    def _capture_wraps_toggle(self, index: int) -> bool:
        """A radio or checkbox inside a label is listed as that label."""
        return self._label is not None and self.controls[index].type in _TOGGLE_TYPES

    def _close(self, tag: str) -> None:
        if self._capture and self.controls[self._capture[-1]].tag == tag:
            index = self._capture.pop()
            control = self.controls[index]
            if tag == "label":
                self._label = None
                wrapped = control.control
                if wrapped is None or self.controls[wrapped].type not in _TOGGLE_TYPES:
                    # a label of a text field (or of nothing) is plain text; the field is listed
                    self._line += control.text
                    self._flush()
                    return
            if not self._capture:
                self._emit_control(index)
            return
        if tag == "form":
            self._form = None
        if tag in _BLOCK_TAGS and not self._capture:
            self._flush()


def _role(controls: list[Control], control: Control) -> str:
    if control.tag == "a":
        return "link"
    if control.tag == "label":  # listed only when it wraps a radio or checkbox
        return controls[control.control].type
    if control.tag == "button" or (control.tag == "input" and control.type in _BUTTON_TYPES):
        return "button"
    if control.tag == "input" and control.type in _TOGGLE_TYPES:
        return control.type
    if control.tag in ("input", "textarea"):
        return "textbox"
    if control.tag == "select":
        return "combobox"
    return control.attrs["role"] if control.attrs.get("role") in ("button", "link") else "clickable"


def _field_labels(controls: list[Control]) -> dict[int, str]:
    """Text of the <label> naming each field, by `for` or by wrapping."""
    by_id = {c.attrs["id"]: i for i, c in enumerate(controls) if c.attrs.get("id")}
    labels: dict[int, str] = {}
    for control in controls:
        if control.tag != "label":
            continue
        target = by_id.get(control.attrs.get("for", ""), control.control)
        if target is not None and target not in labels:
            labels[target] = squash_spaces(control.text)
    return labels


def _element(controls: list[Control], index: int, labels: dict[int, str]) -> PageElement:
    control = controls[index]
    attrs = control.attrs
    state = control
    if control.tag == "label":
        state = controls[control.control]
        label = control.text
    elif control.tag == "input" and control.type in _TOGGLE_TYPES:
        label = attrs.get("aria-label") or labels.get(index) or attrs.get("value", "")
    elif control.tag == "input" and control.type in _BUTTON_TYPES:
        label = attrs.get("value") or attrs.get("aria-label") or control.type
    elif control.tag in ("input", "textarea", "select"):
        label = attrs.get("aria-label") or labels.get(index) or attrs.get("placeholder") or attrs.get("name", "")
    else:
        label = squash_spaces(control.text) or attrs.get("aria-label", "") or attrs.get("title", "")
    return PageElement(id=0, role=_role(controls, control), label=squash_spaces(label), control=control, state=state)


def _number(title: str, elements: list[PageElement], ordered: bool) -> None:
    """Give the listed elements their ids: 1..n, shuffled by a hash of the page's title,
    roles and labels (or in reading order, for a reader who asks)."""
    ids = list(range(1, len(elements) + 1))
    if not ordered:
        listing = "\n".join([title] + [f"{e.role} {e.label}" for e in elements])
        random.Random(hashlib.sha256(listing.encode()).digest()).shuffle(ids)
    for element, element_id in zip(elements, ids):
        element.id = element.control.id = element_id


def parse_page(document: str, *, ordered: bool = False) -> ParsedPage:
    """The text observation of an HTML document, and what a driver needs to act on it.
    ordered=True numbers the elements in reading order (for people reading a page; a
    policy always sees shuffled ids)."""
    reader = _Reader()
    reader.feed(document)
    reader.close()
    reader._flush()
    labels = _field_labels(reader.controls)
    items: list[str | PageElement] = []
    elements: list[PageElement] = []
    for item in reader.items:
        if isinstance(item, int):
            item = _element(reader.controls, item, labels)
            elements.append(item)
        items.append(item)
    _number(squash_spaces(reader.title), elements, ordered)
    return ParsedPage(title=squash_spaces(reader.title), items=items, elements=elements, controls=reader.controls,
                      forms=reader.forms)


def cut_lines(lines: list[str], budget: int, count_tokens: Callable[[str], int]) -> tuple[str, str]:
    """The first lines of a page text that fit `budget` tokens, and a note saying where
    the cut fell ("" when the whole page fits). A cut ends with a visible marker line."""
    total, kept = 0, 0
    for line in lines:
        cost = count_tokens(line + "\n")
        if total + cost > budget:
            break
        total, kept = total + cost, kept + 1
    if kept == len(lines):
        return "\n".join(lines), ""
    last_id = next((m[1] for m in map(_ELEMENT_LINE.match, reversed(lines[:kept])) if m), None)
    where = f"after element [{last_id}]" if last_id else "before the first element"
    marker = f"[... page cut here: {len(lines) - kept} more lines not shown ...]"
    note = f"The page text was cut at {budget} tokens, {where} (line {kept} of {len(lines)})."
    return "\n".join(lines[:kept] + [marker]), note
