"""Data is text, never markup: every string from a store (names, descriptions, instance ids, error texts)
goes through here before a Streamlit element that renders Markdown (expander labels, captions, alerts).

``literal(s)`` backslash-escapes every ASCII punctuation character (CommonMark allows it for all of them),
so Markdown, Streamlit's directives (``:red[...]``, ``:material/...:``), LaTeX (``$...$``) and inline
HTML render as the literal characters. GFM autolinks (``http://...``, ``www.``, ``a@b.org``) are found
after escapes are resolved, so an invisible WORD JOINER (U+2060) is put inside ``://``, ``www.`` and
after ``@``: the text reads the same, and nothing from data can make a link, load an image or colour
the page. Newlines become spaces (a label is one line). ``no_addresses(s)``
replaces URLs and host:port pairs with a placeholder: viewers do not see internal model server addresses.
``visible(s)`` shows invisible controls as what they are (``⟨U+202E⟩``): bidirectional embeddings, overrides
and isolates (a name could otherwise display reversed, "Trojan Source" style) and C0/C1 control characters.
``literal`` applies it; so do the tables (``safe_frames.py``) and the pages' choice labels.

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


# bidi embeddings/overrides/isolates (U+202A-E, U+2066-9) and C0/C1 controls; tab/newline only where kept.
# The implicit marks (LRM, RLM, ALM) stay: right-to-left text in names legitimately uses them.
_CONTROLS = re.compile("[\u202a-\u202e\u2066-\u2069\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")
_CONTROLS_ALL = re.compile("[\u202a-\u202e\u2066-\u2069\x00-\x1f\x7f-\x9f]")


def visible(text: object, *, keep_lines: bool = False) -> str:
    """``text`` with bidi controls and control characters shown as ``⟨U+XXXX⟩`` (tabs/newlines kept if asked)."""
    pattern = _CONTROLS if keep_lines else _CONTROLS_ALL
    return pattern.sub(lambda m: f"⟨U+{ord(m.group()):04X}⟩", str(text))


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
                         visible(one_line(text, limit)))
    return flat.translate(_ESCAPE)


def no_addresses(text: object) -> str:
    """``text`` with URLs and host:port pairs replaced (error texts name internal servers)."""
    return _HOSTPORT.sub(HIDDEN, _URL.sub(HIDDEN, str(text)))
