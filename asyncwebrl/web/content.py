"""Seeded building blocks for site content: names, words, codes, dates, money.

Every function takes an explicit `random.Random`, so a site's content is a pure
function of its seed.
"""

from __future__ import annotations

import datetime
import random

FIRST_NAMES = """Aisha Alberto Amara Anders Anika Arjun Astrid Beatriz Bilal Camille Carmen Chen
Dario Dmitri Elena Emeka Esther Farah Felix Freya Gabriel Hana Hugo Ines Ingrid Isaac Jamal
Jana Jonas Julia Kai Kamala Keiko Lars Leila Lena Luca Malik Marco Maria Mateo Maya Mei Mila
Nadia Nikolai Noor Olga Omar Oscar Pablo Priya Rafael Ravi Rosa Sami Sara Sofia Tariq Teresa
Tomas Uma Valentina Victor Wen Yara Yusuf Zofia""".split()

LAST_NAMES = """Abara Alvarez Andersen Bauer Becker Bianchi Castillo Chowdhury Costa Dubois
Eriksen Fischer Fontaine Garcia Gonzalez Haddad Hansen Hoffmann Ibrahim Ito Jansen Kapoor
Kowalski Kruger Larsen Lindqvist Lopez Mahmoud Marino Meyer Moreau Nakamura Novak Okafor
Oliveira Osei Petrov Quinn Rahman Reyes Rossi Sato Schmidt Silva Suzuki Takahashi Tanaka
Varga Vasquez Weber Wojcik Yamamoto Zhang Zielinski""".split()

ADJECTIVES = """Aurora Summit Nova Vertex Cobalt Ember Harbor Lumen Orbit Pioneer Quartz Ridge
Solstice Tundra Zephyr Atlas Beacon Cascade Delta Falcon Granite Horizon Juniper Meridian
Nimbus Onyx Polar Sierra Timber Willow""".split()

MONTHS = """January February March April May June July August September October November
December""".split()

STREETS = """Oak Maple Cedar Harbor Mill Station Bridge Park Lake River Garden Church""".split()
CITIES = """Lisbon Oslo Porto Tampere Graz Leiden Ghent Aarhus Bergen Lyon Turin Cork""".split()


def unique_names(rng: random.Random, count: int) -> list[str]:
    """`count` distinct "First Last" names."""
    pairs = [(f, l) for f in FIRST_NAMES for l in LAST_NAMES]
    return [f"{f} {l}" for f, l in rng.sample(pairs, count)]


def code(rng: random.Random, prefix: str, used: set[str]) -> str:
    """A product/record code such as "NX-4821", unique within `used`."""
    while True:
        value = f"{prefix}-{rng.randint(1000, 9999)}"
        if value not in used:
            used.add(value)
            return value


def money(cents: int) -> str:
    """12999 -> "$129.99"; 129900 -> "$1,299.00"."""
    return f"${cents // 100:,}.{cents % 100:02d}"


def phone(rng: random.Random, area: int) -> str:
    return f"({area}) {rng.randint(200, 989)}-{rng.randint(1000, 9999)}"


def date_between(rng: random.Random, start: datetime.date, days: int) -> datetime.date:
    return start + datetime.timedelta(days=rng.randrange(days))


def long_date(day: datetime.date) -> str:
    """2026-03-05 -> "March 5, 2026"."""
    return f"{MONTHS[day.month - 1]} {day.day}, {day.year}"


def slug(text: str) -> str:
    return "".join(ch if ch.isalnum() else "-" for ch in text.lower()).strip("-")


def email_local(name: str) -> str:
    first, last = name.lower().split(" ", 1)
    return f"{first}.{last.replace(' ', '')}"
