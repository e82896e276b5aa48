"""URLs read the way browsers read them: the WHATWG URL Standard (https://url.spec.whatwg.org)
for special URLs (http, https, ws, wss), as far as the sandbox needs it. That is which
scheme, host and port a string names, relative references resolved against a base URL,
and a serialization that every WHATWG parser (Chromium, Node) reads back to the same host.

Python's urllib reads some strings differently from browsers, so a check made with it can
be about another host than the one the browser then requests: in special URLs `\\` is a
path separator (`http://127.0.0.1:1\\@site/` is 127.0.0.1 port 1 to a browser, `site` to
urllib), hosts are percent-decoded and mapped (`%31%32%37.0.0.1` and full-width digits are
127.0.0.1), and IPv4 numbers have many spellings (`0x7f.1`, `2130706433`, `0177.0.0.1`).

Other schemes are only recognised (the sandbox refuses them), never parsed further.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import re
import urllib.parse

import idna

DEFAULT_PORTS = {"http": 80, "https": 443, "ws": 80, "wss": 443}  # the special schemes the sandbox reads
_SCHEME = re.compile(r"^([a-zA-Z][a-zA-Z0-9+\-.]*):")
_C0_OR_SPACE = "".join(map(chr, range(0x21)))
_FORBIDDEN_DOMAIN = set("\x00\t\n\r #/:<>?@[\\]^|%\x7f") | set(map(chr, range(0x20)))
_AUTHORITY_END = re.compile(r"[/\\?#]")
_DECIMAL, _OCTAL, _HEX = re.compile(r"[0-9]+"), re.compile(r"[0-7]*"), re.compile(r"[0-9a-fA-F]*")


class NoScheme(ValueError):
    """The string is a relative reference and there is no base to resolve it against."""


@dataclasses.dataclass(frozen=True)
class Url:
    scheme: str
    host: str = ""  # lowercase ASCII domain, dotted-decimal IPv4 or [IPv6]; "" outside special schemes
    port: int | None = None  # None: the scheme's default
    userinfo: str = ""  # as written, "" if none
    tail: str = ""  # path, query and fragment; in special URLs the path starts with "/"

    @property
    def special(self) -> bool:
        return self.scheme in DEFAULT_PORTS

    @property
    def effective_port(self) -> int | None:
        return self.port if self.port is not None else DEFAULT_PORTS.get(self.scheme)

    def __str__(self) -> str:
        if not self.special:
            return f"{self.scheme}:{self.tail}"
        userinfo = self.userinfo.replace("@", "%40") + "@" if self.userinfo else ""
        port = f":{self.port}" if self.port is not None else ""
        return f"{self.scheme}://{userinfo}{self.host}{port}{self.tail}"


def parse_url(text: str, base: Url | None = None) -> Url:
    """The URL a browser reads in `text` (relative to `base`, a special URL, if given).
    ValueError (saying why) where a browser finds no URL."""
    text = text.strip(_C0_OR_SPACE).replace("\t", "").replace("\n", "").replace("\r", "")
    scheme_match = _SCHEME.match(text)
    if scheme_match is None:
        if base is None or not base.special:
            raise NoScheme("no scheme")
        return _relative(text, base)
    scheme, rest = scheme_match.group(1).lower(), text[scheme_match.end():]
    if scheme not in DEFAULT_PORTS:
        return Url(scheme, tail=rest)
    if base is not None and base.scheme == scheme and not rest.startswith("//"):
        return _relative(rest, base)  # "http:path" against an http base is relative
    return _authority(scheme, rest.lstrip("/\\"))


def _relative(rest: str, base: Url) -> Url:
    """The spec's relative state: `rest` resolved against `base`."""
    if rest[:1] in ("/", "\\"):
        if rest[1:2] in ("/", "\\"):
            return _authority(base.scheme, rest.lstrip("/\\"))
        return dataclasses.replace(base, tail=_special_tail(rest))
    base_path, base_query = _split_tail(base.tail)
    if rest == "":
        return dataclasses.replace(base, tail=base_path + base_query)
    if rest.startswith("#"):
        return dataclasses.replace(base, tail=base_path + base_query + rest)
    if rest.startswith("?"):
        return dataclasses.replace(base, tail=base_path + rest)
    directory = base_path[:base_path.rfind("/") + 1] or "/"
    return dataclasses.replace(base, tail=_special_tail(directory + rest))


def _split_tail(tail: str) -> tuple[str, str]:
    """(path, query without the fragment) of a tail."""
    without_fragment = tail.split("#", 1)[0]
    path, question, query = without_fragment.partition("?")
    return path, question + query


def _special_tail(tail: str) -> str:
    """A special URL's tail: the path never empty, `\\` in the path read as `/`."""
    end = min((i for i in (tail.find("?"), tail.find("#")) if i >= 0), default=len(tail))
    path = tail[:end].replace("\\", "/")
    return (path if path.startswith("/") else "/" + path) + tail[end:]


def _authority(scheme: str, rest: str) -> Url:
    """`rest` starts with the authority (userinfo@host:port) of a special URL."""
    end = _AUTHORITY_END.search(rest)
    authority, tail = (rest[:end.start()], rest[end.start():]) if end else (rest, "")
    userinfo, at, host_port = authority.rpartition("@")  # the last @ ends the userinfo
    raw_host, port = split_host_port(host_port)
    return Url(scheme, canonical_host(raw_host), None if port == DEFAULT_PORTS[scheme] else port,
               userinfo if at else "", _special_tail(tail))


def split_host_port(host_port: str) -> tuple[str, int | None]:
    """(host as written, port or None) of HOST, HOST:PORT, [IPv6] or [IPv6]:PORT."""
    if host_port.startswith("["):
        close = host_port.find("]")
        raw_host, port_part = (host_port[:close + 1], host_port[close + 1:]) if close >= 0 else (host_port, "")
    else:
        raw_host, colon, port = host_port.partition(":")  # the first colon ends the host
        port_part = colon + port
    if port_part and not port_part.startswith(":"):
        raise ValueError(f"invalid host {host_port!r}")
    return raw_host, _port(port_part[1:])


def _port(text: str) -> int | None:
    if text == "":
        return None
    if not _DECIMAL.fullmatch(text) or int(text) > 65535:
        raise ValueError(f"invalid port {text!r}")
    return int(text)


def canonical_host(raw: str) -> str:
    """The host a browser reads in `raw` (from a special URL), in canonical form:
    percent-decoded, mapped and lowercased (IDNA, UTS #46), IPv4 in dotted decimal,
    IPv6 compressed in brackets. ValueError where a browser finds no host."""
    if raw == "":
        raise ValueError("missing host")
    if raw.startswith("["):
        if not raw.endswith("]") or "%" in raw:  # browsers take no zone identifiers
            raise ValueError(f"invalid IPv6 host {raw!r}")
        try:
            return f"[{ipaddress.IPv6Address(raw[1:-1]).compressed}]"
        except ValueError:
            raise ValueError(f"invalid IPv6 host {raw!r}") from None
    domain = _domain_to_ascii(urllib.parse.unquote_to_bytes(raw).decode("utf-8", errors="replace"))
    if any(c in _FORBIDDEN_DOMAIN for c in domain):
        raise ValueError(f"forbidden character in host {domain!r}")
    if _ends_in_a_number(domain):
        return str(parse_ipv4(domain))
    return domain


def _domain_to_ascii(domain: str) -> str:
    """UTS #46 mapping (lowercase, full-width forms, ideographic full stops) and Punycode."""
    if domain.isascii():
        labels = domain.lower().split(".")
    else:
        try:
            labels = idna.uts46_remap(domain, std3_rules=False, transitional=False).split(".")
        except idna.IDNAError as error:
            raise ValueError(f"invalid host {domain!r}: {error}") from None
    return ".".join(label if label.isascii() else "xn--" + label.encode("punycode").decode("ascii")
                    for label in map(_checked_label, labels))


def _checked_label(label: str) -> str:
    if label.startswith("xn--"):
        try:
            label[4:].encode("ascii").decode("punycode")
        except (UnicodeError, ValueError):
            raise ValueError(f"invalid Punycode label {label!r}") from None
    return label


def _ends_in_a_number(domain: str) -> bool:
    """The spec's test for a host the IPv4 parser must read (and may reject)."""
    labels = domain.split(".")
    if labels[-1] == "" and len(labels) > 1:
        labels.pop()
    last = labels[-1]
    return bool(_DECIMAL.fullmatch(last)) or _ipv4_number(last) is not None


def _ipv4_number(part: str) -> int | None:
    """One dotted part as a number (decimal, 0x hex or leading-zero octal), None if it is none."""
    if part[:2] in ("0x", "0X"):
        digits, pattern, radix = part[2:], _HEX, 16
    elif len(part) > 1 and part.startswith("0"):
        digits, pattern, radix = part[1:], _OCTAL, 8
    else:
        digits, pattern, radix = part, _DECIMAL, 10
    if not pattern.fullmatch(digits) or (radix == 10 and digits == ""):
        return None
    return int(digits, radix) if digits else 0


def parse_ipv4(host: str) -> ipaddress.IPv4Address:
    """The spec's IPv4 parser: 1 to 4 parts, the last filling the remaining bytes
    ("127.1", "2130706433"). ValueError for a host that ends in a number but is no address."""
    parts = host.split(".")
    if parts[-1] == "" and len(parts) > 1:
        parts.pop()
    numbers = [_ipv4_number(part) for part in parts]
    if len(parts) > 4 or None in numbers:
        raise ValueError(f"invalid IPv4 host {host!r}")
    *leading, last = numbers
    if any(n > 255 for n in leading) or last >= 256 ** (5 - len(numbers)):
        raise ValueError(f"invalid IPv4 host {host!r}")
    return ipaddress.IPv4Address(sum(n << 8 * (3 - i) for i, n in enumerate(leading)) + last)
