"""Page frames shared by all local sites.

Three page frames: "topbar", "sidebar" and "compact-right". They differ where agents
notice: where the navigation sits (top bar, left sidebar, right-hand menu), where search
is, colours, fonts and density. A site's layout (web/site.py: Site.layout) names its
frame; kinds add their own pages, listings and wording inside it.
"""

from __future__ import annotations

import dataclasses

from asyncwebrl.web.site import esc


@dataclasses.dataclass(frozen=True)
class Frame:
    css: str
    nav_position: str  # top | left | right


_BASE_CSS = """
* { box-sizing: border-box; }
body { margin: 0; }
a { text-decoration: none; }
table { border-collapse: collapse; }
td, th { padding: 6px 10px; text-align: left; vertical-align: top; }
.error { color: #b00020; font-weight: bold; }
.notice { padding: 10px 14px; margin: 10px 0; }
.pager a, .pager span { display: inline-block; padding: 6px 12px; margin-right: 6px; }
input[type=text], input[type=email], input[type=search], textarea { font-size: 16px; padding: 7px; }
button, input[type=submit] { font-size: 16px; padding: 7px 16px; cursor: pointer; }
label { cursor: pointer; }
"""

FRAMES = {
    "topbar": Frame(
        _BASE_CSS
        + """
body { font-family: Arial, Helvetica, sans-serif; background: #f4f6f9; color: #1d2330; }
header { background: #1f4e8c; color: white; padding: 14px 28px; display: flex; align-items: center; gap: 28px; }
header .brand { font-size: 24px; font-weight: bold; color: white; }
header form { margin-left: auto; }
nav.top { background: #dde6f3; padding: 8px 28px; }
nav.top a { color: #1f4e8c; margin-right: 22px; font-size: 16px; }
main { padding: 18px 28px; max-width: 1100px; }
main a { color: #1f4e8c; }
th { background: #dde6f3; }
tr:nth-child(even) td { background: #eef2f8; }
.notice { background: #e3f1e5; border: 1px solid #7cb487; }
.pager a { background: #1f4e8c; color: white; border-radius: 4px; }
footer { color: #667; padding: 20px 28px; font-size: 13px; }
""",
        "top",
    ),
    "sidebar": Frame(
        _BASE_CSS
        + """
body { font-family: Georgia, 'Times New Roman', serif; background: #fbfaf5; color: #2b2b22; display: flex; }
aside { width: 230px; min-height: 100vh; background: #2f5d50; color: #f2efe2; padding: 18px 16px; }
aside .brand { font-size: 22px; font-weight: bold; color: #f2efe2; display: block; margin-bottom: 18px; }
aside a { display: block; color: #f2efe2; padding: 6px 0; font-size: 15px; }
aside form input[type=search] { width: 100%; margin-bottom: 6px; }
.content { flex: 1; }
main { padding: 22px 32px; max-width: 960px; }
main a { color: #2f5d50; text-decoration: underline; }
th { border-bottom: 2px solid #2f5d50; }
td { border-bottom: 1px solid #ddd8c4; }
.notice { background: #f2ecd0; border-left: 5px solid #c6a100; }
.pager a { border: 1px solid #2f5d50; color: #2f5d50; }
footer { color: #777; padding: 18px 32px; font-size: 12px; font-style: italic; }
""",
        "left",
    ),
    "compact-right": Frame(
        _BASE_CSS
        + """
body { font-family: Verdana, Tahoma, sans-serif; background: #17191e; color: #e6e6e6; font-size: 14px; }
header { padding: 10px 20px; border-bottom: 3px solid #e39b2d; display: flex; align-items: center; }
header .brand { font-size: 20px; color: #e39b2d; font-weight: bold; letter-spacing: 1px; }
.wrap { display: flex; flex-direction: row-reverse; }
nav.side { width: 210px; padding: 14px; background: #22252c; min-height: 90vh; }
nav.side a { display: block; color: #f0c27a; padding: 5px 0; }
nav.side form { margin-bottom: 14px; }
nav.side input[type=search] { width: 100%; background: #30343c; color: #eee; border: 1px solid #555; }
main { flex: 1; padding: 14px 24px; }
main a { color: #7fc4ff; }
th { color: #e39b2d; border-bottom: 1px solid #555; }
td { border-bottom: 1px solid #30343c; }
.notice { background: #263a2b; border: 1px solid #4f8f5f; }
.pager a { background: #30343c; color: #f0c27a; }
footer { color: #888; padding: 12px 24px; font-size: 11px; }
input, textarea, button { background: #30343c; color: #eee; border: 1px solid #666; }
""",
        "right",
    ),
}


@dataclasses.dataclass
class SearchBox:
    action: str  # href of the results page (GET, parameter q)
    placeholder: str
    button: str
    query: str = ""


def link(label: str, href: str, oid: str = "") -> str:
    oid_attr = f' data-oid="{esc(oid)}"' if oid else ""
    return f'<a href="{esc(href)}"{oid_attr}>{esc(label)}</a>'


def search_form(box: SearchBox) -> str:
    return (
        f'<form method="get" action="{esc(box.action)}">'
        f'<input type="search" name="q" value="{esc(box.query)}" placeholder="{esc(box.placeholder)}"'
        f' data-oid="search" aria-label="{esc(box.placeholder)}">'
        f' <button type="submit">{esc(box.button)}</button></form>'
    )


def menu_position(frame: str) -> str:
    """Where a page of this frame shows its menu and search box, as page text says it
    ("search the catalogue above"): the words follow the frame a site really has."""
    return {"top": "above", "left": "on the left", "right": "on the right"}[FRAMES[frame].nav_position]


def render_page(
    frame: str,
    *,
    brand: str,
    home_href: str,
    title: str,
    nav: list[tuple[str, str, str]],
    body: str,
    search: SearchBox | None = None,
    footer: str = "",
) -> str:
    """A whole HTML document in one of FRAMES. `nav` is a list of (label, href, oid)."""
    style = FRAMES[frame]
    brand_link = f'<a class="brand" href="{esc(home_href)}" data-oid="home">{esc(brand)}</a>'
    nav_links = "".join(link(label, href, oid) for label, href, oid in nav)
    search_html = search_form(search) if search else ""
    footer_html = f"<footer>{esc(footer)}</footer>" if footer else ""
    if style.nav_position == "top":
        frame = (
            f"<header>{brand_link}{search_html}</header>"
            f'<nav class="top">{nav_links}</nav>'
            f"<main>{body}</main>{footer_html}"
        )
    elif style.nav_position == "left":
        frame = (
            f"<aside>{brand_link}{search_html}{nav_links}</aside>"
            f'<div class="content"><main>{body}</main>{footer_html}</div>'
        )
    else:
        frame = (
            f"<header>{brand_link}</header>"
            f'<div class="wrap"><nav class="side">{search_html}{nav_links}</nav>'
            f"<main>{body}</main></div>{footer_html}"
        )
    return (
        "<!doctype html><html><head><meta charset='utf-8'>"
        f"<title>{esc(title)} - {esc(brand)}</title><style>{style.css}</style></head>"
        f"<body>{frame}</body></html>"
    )


def table(headers: list[str], rows: list[list[str]]) -> str:
    """Rows hold ready HTML (escape text cells with esc())."""
    head = "".join(f"<th>{esc(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{cell}</td>" for cell in row) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def pager(page: int, pages: int, href_of_page, labels: tuple[str, str]) -> str:
    """Previous / page x of n / next, with oids "prev" and "next"."""
    if pages <= 1:
        return ""
    parts = []
    if page > 1:
        parts.append(link(labels[0], href_of_page(page - 1), "prev"))
    parts.append(f"<span>{page} / {pages}</span>")
    if page < pages:
        parts.append(link(labels[1], href_of_page(page + 1), "next"))
    return f'<div class="pager">{"".join(parts)}</div>'
