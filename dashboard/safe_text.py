"""Data is text, never markup: every string from a store (names, descriptions, instance ids, error texts)
goes through here before a Streamlit element that renders Markdown (expander labels, captions, alerts).

``literal(s)`` backslash-escapes every ASCII punctuation character (CommonMark allows it for all of them),
so Markdown, Streamlit's directives (``:red[...]``, ``:material/...:``), LaTeX (``$...$``) and inline
HTML render as the literal characters. GFM autolinks (``http://...``, ``www.``, ``a@b.org``) are found
after escapes are resolved, so an invisible WORD JOINER (U+2060) is put inside ``://``, ``www.`` and
after ``@``: the text reads the same, and nothing from data can make a link, load an image or colour
the page. Newlines become spaces (a label is one line). ``no_addresses(s)``
replaces URLs and host:port pairs with a placeholder: viewers do not see internal model server addresses.

Prefer ``st.text`` / ``st.dataframe`` (never Markdown) for data; use these only where Streamlit offers no
plain-text variant. Pure functions, no Streamlit import: shared by every page (and by other dashboard
code such as sign-in banners).
"""

from __future__ import annotations

import re
import string

_ESCAPE = {ord(c): "\\" + c for c in string.punctuation}
_URL = re.compile(r"(?i)\b(?:[a-z][a-z0-9+.\-]*://|www\.)\S+")
_HOSTPORT = re.compile(r"\b(?:\d{1,3}(?:\.\d{1,3}){3}|[a-z0-9\-]+(?:\.[a-z0-9\-]+)+|localhost):\d{2,5}\b", re.I)
HIDDEN = "[address hidden]"
MAX_LABEL = 200


def one_line(text: object, limit: int | None = None) -> str:
    flat = " ".join(str(text).split())
    if limit is not None and len(flat) > limit:
        flat = flat[: limit - 1] + "…"
    return flat


_JOIN = "\u2060"
_AUTOLINK = re.compile(r"(?i)(:)(//)|(www)(\.)|(@)")


def literal(text: object, limit: int | None = MAX_LABEL) -> str:
    """``text`` for a Markdown-rendering element: shown as written (plus invisible joiners), one line."""
    flat = _AUTOLINK.sub(lambda m: _JOIN.join(g for g in m.groups() if g) + (_JOIN if m.group(5) else ""),
                         one_line(text, limit))
    return flat.translate(_ESCAPE)


def no_addresses(text: object) -> str:
    """``text`` with URLs and host:port pairs replaced (error texts name internal servers)."""
    return _HOSTPORT.sub(HIDDEN, _URL.sub(HIDDEN, str(text)))
