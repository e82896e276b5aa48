"""The programmatic judge for local tasks (docs/algorithm.md#the-programmatic-judge).

Each rubric fact is checked on its own: answer facts must appear in the final answer
after type-aware normalisation (case, whitespace, thousands separators, currency,
dates, phone formatting); state facts are compared with the episode's server state.

Rule against answer stuffing (RL will find any hole): an answer may not name more
distinct values of a kind than the task asks for. Kinds are the typed values the
extractor recognises (numbers, codes, e-mails, phones, dates, times) and the site's own
vocabularies (person names, titles, ...). "Rosa Silva, Omar Ito or Mei Sato" for a
one-name task fails even though the right name is inside; so does a price list for a
one-price task. Answers are also capped in length relative to the facts they carry.
"""

from __future__ import annotations

import dataclasses
import datetime
import re
import unicodedata
from typing import Any

from asyncwebrl.records import Task
from asyncwebrl.web.content import MONTHS

TYPED_KINDS = ("email", "date", "time", "phone", "code", "number")  # extraction order matters

_EMAIL = re.compile(r"[\w.+-]+@[\w-]+(?:\.[\w-]+)+")
_MONTH = "|".join(m[:3] + f"(?:{m[3:]})?" if len(m) > 3 else m for m in MONTHS)
_DATE_ISO = re.compile(r"\b(\d{4})-(\d{1,2})-(\d{1,2})\b")
_DATE_MDY = re.compile(rf"\b({_MONTH})\.?\s+(\d{{1,2}})(?:st|nd|rd|th)?,?\s+(\d{{4}})\b", re.I)
_DATE_DMY = re.compile(rf"\b(\d{{1,2}})(?:st|nd|rd|th)?\s+({_MONTH})\.?,?\s+(\d{{4}})\b", re.I)
_TIME = re.compile(r"(?<![\d:])([01]?\d|2[0-3]):([0-5]\d)(?:\s*([ap])\.?m\.?)?(?![\d:])", re.I)
_PHONE = re.compile(r"(?<![\w-])(?:\+?1[\s.-]?)?\(?\d{3}\)?[\s.-]?\d{3}[\s.-]?\d{4}(?![\w-])")
_CODE = re.compile(r"(?<![\w-])[A-Za-z]{1,5}-\d{2,8}(?![\w-])")
_NUMBER = re.compile(r"(?<![\w.,-])-?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?![\w-]|[.,]\d)")


@dataclasses.dataclass
class Judgement:
    reward: float | None         # None: unknown (a judge that could not decide); the episode is dropped
    fact_results: list[bool]
    note: str = ""
    blocked: bool = False        # the site refused the agent (anti-bot): left out of reported success
    # Partial credit (rl.reward=facts): the share of the rubric's facts the episode got right,
    # 1 exactly when the reward is 1. None: the share of fact_results (the reward where there
    # are none); a judge with rules beyond the facts (answer stuffing) sets 0 when they fail
    credit: float | None = None

    def __post_init__(self):
        if self.credit is None and self.reward is not None:
            self.credit = sum(self.fact_results) / len(self.fact_results) if self.fact_results else self.reward
        if self.reward is not None and not (self.reward >= 1) == (self.credit >= 1):
            raise ValueError(f"credit {self.credit} disagrees with reward {self.reward}: full credit is success")


def _month_number(name: str) -> int:
    return [m[:3].lower() for m in MONTHS].index(name[:3].lower()) + 1


def _iso(year: str, month: int, day: str) -> str | None:
    try:
        return datetime.date(int(year), month, int(day)).isoformat()
    except ValueError:
        return None


def _clock(match: re.Match) -> str:
    """"9:30", "09:30", "9:30 am" -> "09:30"; "6:30 pm" -> "18:30"."""
    hour, minute, half = int(match[1]), match[2], (match[3] or "").lower()
    if half == "p" and hour < 12:
        hour += 12
    elif half == "a" and hour == 12:
        hour = 0
    return f"{hour:02d}:{minute}"


def normalize_text(text: str) -> str:
    """Lowercase, NFKC, punctuation to spaces, whitespace collapsed."""
    text = unicodedata.normalize("NFKC", text).lower()
    return " ".join(re.sub(r"[^\w@.+-]+", " ", text).replace("_", " ").split()).strip(" .")


def normalize_value(value: str, kind: str) -> str | None:
    """One value of a typed kind -> its canonical form (None if it is not one)."""
    value = value.strip()
    if kind == "email":
        return value.lower() if _EMAIL.fullmatch(value) else None
    if kind == "date":
        found = extract(value)["date"]
        return found[0] if len(found) == 1 else None
    if kind == "time":
        found = extract(value)["time"]
        return found[0] if len(found) == 1 else None
    if kind == "phone":
        digits = re.sub(r"\D", "", value)
        return digits[-10:] if len(digits) >= 10 else None
    if kind == "code":
        return value.upper() if _CODE.fullmatch(value) else None
    if kind == "number":
        found = _NUMBER.search(value.replace("$", " ").replace("€", " ").replace("£", " "))
        if not found:
            return None
        number = float(found.group().replace(",", ""))
        return f"{number:.6f}".rstrip("0").rstrip(".")
    return normalize_text(value)


def extract(answer: str) -> dict[str, list[str]]:
    """Every typed value in an answer, canonical, in order of appearance per kind.

    Kinds are pulled out one after another and their spans blanked, so the digits of a
    date, phone or code are not counted again as numbers."""
    found: dict[str, list[str]] = {kind: [] for kind in TYPED_KINDS}
    text = answer

    def take(pattern: re.Pattern, kind: str, canonical) -> None:
        nonlocal text
        for match in pattern.finditer(text):
            value = canonical(match)
            if value is not None:
                found[kind].append(value)
        text = pattern.sub(" ", text)

    take(_EMAIL, "email", lambda m: m.group().lower())
    take(_DATE_ISO, "date", lambda m: _iso(m[1], int(m[2]), m[3]))
    take(_DATE_MDY, "date", lambda m: _iso(m[3], _month_number(m[1]), m[2]))
    take(_DATE_DMY, "date", lambda m: _iso(m[3], _month_number(m[2]), m[1]))
    take(_TIME, "time", _clock)
    take(_PHONE, "phone", lambda m: re.sub(r"\D", "", m.group())[-10:])
    take(_CODE, "code", lambda m: m.group().upper())
    text = re.sub(r"[$€£]", " ", text)
    take(_NUMBER, "number", lambda m: normalize_value(m.group(), "number"))
    return found


def _contains_phrase(haystack: str, phrase: str) -> bool:
    return bool(phrase) and f" {phrase} " in f" {haystack} "


def state_value(session: dict[str, Any], key: str) -> Any:
    """Dotted path into the episode's session; the segment "#" means len()."""
    node: Any = session
    for part in key.split("."):
        if part == "#":
            return len(node) if isinstance(node, (dict, list)) else None
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node


def task_checks(task: Task) -> list[dict]:
    """The per-fact check specs of a local task, aligned with task.facts."""
    if not task.local:
        raise ValueError(f"task {task.task_id} is not a local task")
    checks = task.local["checks"]
    if len(checks) != len(task.facts):
        raise ValueError(f"task {task.task_id}: {len(checks)} checks for {len(task.facts)} facts")
    return checks


def judge(task: Task, answer: str, session: dict[str, Any], vocabularies: dict[str, list[str]] | None = None) -> Judgement:
    """Score a local task. `session` is the episode's server state on the task's site;
    `vocabularies` maps a vocabulary name to all its values on the site."""
    checks = task_checks(task)
    answer = answer or ""
    typed = extract(answer)
    plain = normalize_text(answer)
    results, notes = [], []
    required: dict[str, set[str]] = {}  # kind -> canonical values the answer must carry
    for value, check in zip(task.facts, checks):
        kind, source = check["type"], check["source"]
        if source == "state":
            actual = state_value(session, check["key"])
            ok = actual is not None and normalize_value(str(actual), kind) == normalize_value(str(value), kind)
        else:
            if source == "state_echo":
                value = state_value(session, check["key"])
                if value is None:
                    results.append(False)
                    notes.append(f"nothing in server state at {check['key']}")
                    continue
            canonical = normalize_value(str(value), kind)
            if canonical is None:
                raise ValueError(f"task {task.task_id}: fact {value!r} is not a valid {kind}")
            required.setdefault(check["vocab"] or kind, set()).add(canonical)
            ok = canonical in typed[kind] if kind in typed else _contains_phrase(plain, canonical)
        results.append(ok)
    # Anti-stuffing: no more distinct values of a required kind than asked for. Typed values
    # the instruction itself names may be repeated ("the event on March 5 costs $12");
    # a vocabulary value inside a longer name the instruction quotes ("Workshop" in
    # "Pottery Workshop") is part of that name, not a second value.
    given = extract(task.task_name)
    quoted = [normalize_text(q) for q in re.findall(r'"([^"]+)"', task.task_name)]
    for kind, wanted in required.items():
        if kind in typed:
            named = set(typed[kind]) - (set(given[kind]) - wanted)
        elif vocabularies and kind in vocabularies:
            named = {v for v in map(normalize_text, vocabularies[kind]) if _contains_phrase(plain, v)
                     and not any(v != q and _contains_phrase(q, v) and _contains_phrase(plain, q) for q in quoted)}
        else:
            continue
        if len(named) > len(wanted):
            notes.append(f"answer names {len(named)} {kind} values, the task asks for {len(wanted)}")
    fact_chars = sum(len(v) for kind in required.values() for v in kind)
    if len(answer) > 160 + 4 * fact_chars:
        notes.append(f"answer too long ({len(answer)} chars)")
    broke_a_rule = bool(notes)   # stuffing or a too-long answer earns nothing, whatever it carries
    reward = 1.0 if all(results) and not broke_a_rule else 0.0
    credit = 0.0 if broke_a_rule else None   # None: the share of the facts right (Judgement)
    failed = [i for i, ok in enumerate(results) if not ok]
    if failed:
        notes.insert(0, f"facts not supported: {failed}")
    return Judgement(reward, results, "; ".join(notes), credit=credit)


def judge_local_episode(web, task: Task, answer: str, episode_id: str) -> Judgement:
    """Judge an episode of a local task against its own server state on `web` (LocalWeb)."""
    site = web.site(task.local["site"])
    names = {check["vocab"] for check in task.local["checks"] if check["vocab"]}
    return judge(task, answer, web.session(episode_id, site.site_id), {n: site.vocabulary(n) for n in names})
