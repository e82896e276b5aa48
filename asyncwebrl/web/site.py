"""What every local site is: a deterministic model of content plus an HTTP handler.

A site instance is fixed by (kind, variant, seed). The seed decides the content
(products, people, records) together with the variant. The variant decides the split
and the site's look: train and test splits use disjoint variants, so a test site's look
is never seen in training (WebGym's out-of-distribution split). A test site (variant 3)
has its variant's layout, navigation and wording. A training site (variant 1 or 2)
draws each layout aspect (listing order, page size, page frame, which pages exist, how
plans get around; a kind's LAYOUT) and each label (its WORDING) from one of the two
training variants, by a random stream of its own id (Site.layout, Site.wording): with
only two fixed looks per kind a policy would learn the looks, not the task. Layout code
and plans read the site's choices (`self.look`), never its variant; only content and a
few sentences (a shop's welcome line, a library's name) still go with the variant.

Sites also write their own tasks, because only the site knows which pages a task
needs: each task carries a rubric (facts) and an oracle plan, the list of UI moves
that solves it through the agent's own action interface. Plan moves name elements by
their `data-oid` attribute, which the agent never sees (it sees pixels and, in
set-of-marks mode, visible text only).
"""

from __future__ import annotations

import dataclasses
import html
import random
import urllib.parse
from typing import Any, Callable

from asyncwebrl.records import difficulty_level

TRAIN_VARIANTS = (1, 2)
TEST_VARIANTS = (3,)


def split_of_variant(variant: int) -> str:
    if variant in TRAIN_VARIANTS:
        return "train"
    if variant in TEST_VARIANTS:
        return "test"
    raise ValueError(f"unknown site variant {variant}")


@dataclasses.dataclass
class Request:
    """One HTTP request as a site sees it: the path inside the site, decoded."""

    method: str
    path: str  # inside the site, always starting with "/"
    query: dict[str, str]
    form: dict[str, list[str]]
    session: dict[str, Any]  # per-episode server state for this site (cart, submissions)

    def arg(self, name: str, default: str = "") -> str:
        return self.query.get(name, default)

    def field(self, name: str) -> str:
        values = self.form.get(name) or [""]
        return values[0].strip()


@dataclasses.dataclass
class Response:
    body: str
    status: int = 200
    location: str | None = None  # set for redirects (303 after a successful POST)


class NotFound(Exception):
    pass


# A plan move. `op` is one of click | type | note | answer. Moves carry the subtask key
# they belong to (for the oracle's Progress/Intention) and the sentence the oracle writes
# under "Action:".
def click(oid: str, say: str, subtask: str) -> dict:
    return {"op": "click", "oid": oid, "say": say, "subtask": subtask}


def type_into(oid: str, text: str, say: str, subtask: str) -> dict:
    return {"op": "type", "oid": oid, "text": text, "say": say, "subtask": subtask}


def note(memory: dict[str, str], subtask: str) -> dict:
    """Facts read from the page now on screen; the oracle adds them to its Memory."""
    return {"op": "note", "memory": memory, "subtask": subtask}


def answer(text: str, subtask: str = "answer") -> dict:
    return {"op": "answer", "text": text, "say": "Submit the final answer.", "subtask": subtask}


@dataclasses.dataclass
class Fact:
    """One rubric fact of a local task and how it is checked.

    source "answer": `value` must appear (normalised, as `type`) in the final answer.
    source "state": server state at `key` must equal `value` (a form field, a cart line).
    source "state_echo": the value stored in server state at `key` (a confirmation code
      the server issued during the episode) must appear in the final answer.
    `vocab` names a site vocabulary (e.g. "person_name"); the evaluator uses it to
    reject answers that list more values of that vocabulary than the task asks for.
    """

    value: str
    type: str = "text"  # text | number | code | email | phone | date
    source: str = "answer"
    key: str = ""
    vocab: str = ""


@dataclasses.dataclass
class FactGroup:
    description: str
    facts: list[Fact]


@dataclasses.dataclass
class TaskDraft:
    """A task as a site proposes it; tasks.py turns it into a WebGym-format row."""

    template: str  # e.g. "shop.price"
    instruction: str
    groups: list[FactGroup]
    plan: list[dict]
    start_path: str = "/"
    definite_answer: str = ""

    @property
    def level(self) -> str:
        return difficulty_level(sum(len(group.facts) for group in self.groups))


class Site:
    """Base class. Subclasses set `kind`, build content in `__init__` and implement
    `route`, `draft_tasks`, `short_tasks` and `vocabulary`."""

    kind: str = ""
    domain: str = ""
    subdomain: str = ""

    def __init__(self, variant: int, seed: int):
        self.variant = variant
        self.seed = seed
        self.split = split_of_variant(variant)
        # Content is a pure function of (kind, variant, seed): a test site never shares
        # products or people with a training site.
        self.rng = random.Random(f"{self.kind}:{variant}:{seed}")

    @property
    def site_id(self) -> str:
        return site_id_of(self.kind, self.variant, self.seed)

    def wording(self, by_variant: dict[int, Any]) -> Any:
        """This site's labels, from a kind's wording per variant (a dataclass of labels, or
        a dict label name -> text).

        A test site keeps its own variant's. A training site draws each label from one of
        the training variants (fixed by its id, apart from its content's random stream):
        otherwise each label goes with one layout, and a policy can learn the layout in
        place of the label. Test sites stay as they were, with words training never shows."""
        return self._mix("wording", by_variant)

    def layout(self, by_variant: dict[int, Any]) -> Any:
        """This site's layout, from a kind's layout per variant: a dataclass with one field
        per aspect (listing order, page size, where the menu sits, which pages exist).

        As with wording, a test site keeps its own variant's layout, and a training site
        draws each aspect from one of the training variants: with only two layouts per kind
        a policy learns the two layouts instead of the task. An aspect that only the test
        variant has is never drawn, so the held-out layout stays unseen. Aspects that must
        agree (a page's links and the plan that clicks them) are one field, so a mix never
        pairs them inconsistently; plans read the site's choice, never its variant."""
        return self._mix("layout", by_variant)

    def _mix(self, stream: str, by_variant: dict[int, Any]) -> Any:
        """Own variant's table for a test site; for a training site, each entry (a dataclass
        field or dict key) drawn from a training variant by a random stream of this site's
        id (apart from its content's, so content stays as it was)."""
        own = by_variant[self.variant]
        if self.split != "train":
            return own
        rng = random.Random(f"{stream}:{self.site_id}")
        if isinstance(own, dict):
            return {name: by_variant[rng.choice(TRAIN_VARIANTS)][name] for name in own}
        fields = {f.name: getattr(by_variant[rng.choice(TRAIN_VARIANTS)], f.name) for f in dataclasses.fields(own)}
        return dataclasses.replace(own, **fields)

    @property
    def base_path(self) -> str:
        return f"/{self.site_id}"

    def href(self, path: str, **query: Any) -> str:
        """An absolute-path link inside this site; works on any origin."""
        url = self.base_path + path
        if query:
            url += "?" + urllib.parse.urlencode(query)
        return url

    def handle(self, request: Request) -> Response:
        handler, args = self.route(request.method, request.path)
        return handler(request, *args)

    def route(self, method: str, path: str) -> tuple[Callable[..., Response], tuple]:
        raise NotImplementedError

    def draft_tasks(self, rng: random.Random) -> list[TaskDraft]:
        raise NotImplementedError

    def short_tasks(self, rng: random.Random) -> list[TaskDraft]:
        """The short tier (tasks.TIERS): tasks whose plan is one choice, the link the
        instruction names among its siblings (a department, an event, a category, a
        subject), then one or two facts read on the page it opens. That choice is the one
        the warm start makes at chance on new sites (BENCHMARKS.md "Why the warm start
        fails"), and in a task of 7+ moves its reward is diluted by every other move."""
        raise NotImplementedError

    def vocabulary(self, name: str) -> list[str]:
        """All values of a named vocabulary on this site (for anti-stuffing checks)."""
        raise KeyError(name)


def site_id_of(kind: str, variant: int, seed: int) -> str:
    """The id of the site (kind, variant, seed), e.g. "shop-v1-s03" (without building it)."""
    return f"{kind}-v{variant}-s{seed:02d}"


def esc(text: Any) -> str:
    return html.escape(str(text), quote=True)
