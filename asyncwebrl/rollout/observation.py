"""What an agent is shown of a page: the observation record and its elements.

No browser here: both episode drivers (Chromium, rollout/page.py; the browser-free one,
rollout/http_tab.py) fill the same record, and policies and prompts read only it.
"""

from __future__ import annotations

import dataclasses
import hashlib

from asyncwebrl.rollout.response import GRID, Action, noop
from asyncwebrl.web.page_text import squash_spaces

OBSERVATIONS = ("screenshot", "text", "text+screenshot")


def check_observation(observation: str) -> str:
    if observation not in OBSERVATIONS:
        raise ValueError(f"agent.observation must be one of {OBSERVATIONS}, got {observation!r}")
    return observation


@dataclasses.dataclass
class Element:
    mark: int  # set-of-marks id; 0 when the element's centre is outside the viewport
    tag: str
    type: str
    text: str
    value: str
    checked: bool
    x: float
    y: float
    width: float
    height: float
    oid: str  # data-oid, for the oracle only; never shown to a model
    node: str = ""  # text observations in Chromium: the element's data-awr-n stamp (where to click)

    @property
    def label(self) -> str:
        """Its text with runs of whitespace squashed to one space: what a `labels` action names."""
        return squash_spaces(self.text)

    @property
    def centre(self) -> tuple[float, float]:
        return self.x + self.width / 2, self.y + self.height / 2

    def describe(self) -> str:
        """One line of the set-of-marks element list."""
        kind = {"a": "link", "textarea": "text field", "label": self.type or "option"}.get(self.tag, self.tag)
        if self.tag == "input":
            kind = {"radio": "radio", "checkbox": "checkbox", "submit": "button"}.get(self.type, "text field")
        state = " (checked)" if self.checked else ""
        value = f' value="{self.value}"' if self.value else ""
        return f'[{self.mark}] {kind} "{self.text}"{value}{state}'


@dataclasses.dataclass
class Observation:
    url: str  # as the agent is shown it (the logical URL on the local web)
    title: str
    screenshot_key: str  # the PNG (marks drawn in set-of-marks mode) in the ScreenshotStore
    elements: list[Element]
    scroll_y: float
    page_height: float
    viewport: tuple[int, int]
    step: int
    last_error: str = ""
    # Text observations (web/page_text.py): the whole page in reading order; every listed
    # element then has an id (its `mark`) whether or not it is in the viewport.
    text: str = ""

    @property
    def fingerprint(self) -> str:
        """What changes when the page the agent sees changes."""
        if self.screenshot_key:
            return self.screenshot_key
        return hashlib.sha256(f"{self.url}\n{self.text}".encode()).hexdigest()[:32]

    def marked(self) -> list[Element]:
        return [e for e in self.elements if e.mark]

    def labelled(self, label: str) -> Element | None:
        """The first listed element (in page order) whose label is exactly `label`, spaces
        squashed: what an action of the `labels` interaction names."""
        wanted = squash_spaces(label)
        return next((e for e in self.marked() if e.label == wanted), None)

    def element_list(self) -> str:
        return "\n".join(e.describe() for e in self.marked())


def resolve_label(action: Action, observation: Observation) -> Action:
    """An action that names its element by label (the `labels` interaction) with that
    element's id on this page added, as every driver acts on ids; one whose label no listed
    element carries becomes a counted no-op. Other actions pass unchanged."""
    label = action.args.get("element")
    if label is None:
        return action
    element = observation.labelled(label)
    if element is None:
        return noop(f"{action.name}: no element labelled {label!r} on the page")
    return Action(action.name, {**action.args, "element_id": element.mark})


def text_elements(page) -> list[Element]:
    """A ParsedPage's listed elements as observation elements (no boxes: no layout)."""
    return [Element(mark=e.id, tag=e.control.tag, type=e.state.type, text=e.label, value=e.value or "",
                    checked=bool(e.checked), x=0.0, y=0.0, width=0.0, height=0.0, oid=e.oid, node=e.node)
            for e in page.elements]


def grid_to_pixels(point: list[float], viewport: tuple[int, int]) -> tuple[float, float]:
    width, height = viewport
    x = min(point[0] / GRID * width, width - 1)
    y = min(point[1] / GRID * height, height - 1)
    return x, y


def pixels_to_grid(x: float, y: float, viewport: tuple[int, int]) -> list[int]:
    return [round(x / viewport[0] * GRID), round(y / viewport[1] * GRID)]
