"""The report page's building blocks: its CSS (screen and paged media), escaping (``esc``: every value from the
store passes it), number, interval, date and path spellings, tables with ``<th scope>`` headers, and plots as
inline SVG (matplotlib, text kept as text; the same input gives the same bytes).

Failure semantics: matplotlib missing is a ``ConfigError`` naming the extra to install
(``medhelm-k8s[report]``) from ``pyplot()``, which the CLI calls before anything is written.
"""

from __future__ import annotations

import html
import io
import math
import re
from collections.abc import Iterable, Sequence
from datetime import date, datetime
from typing import Any

from medhelm.errors import ConfigError
from medhelm.store.intervals import METHOD

CSS = """
body{font-family:system-ui,-apple-system,'Segoe UI',Roboto,Arial,sans-serif;margin:2rem auto;max-width:72rem;
color:#1b1b1b;line-height:1.45;padding:0 1rem}
h1{font-size:1.6rem}h2{font-size:1.25rem;margin-top:2.2rem;border-bottom:1px solid #ccc}h3{font-size:1.05rem}
table{border-collapse:collapse;margin:.6rem 0 1.2rem;font-size:.88rem;display:block;max-width:100%;overflow-x:auto}
th,td{border:1px solid #bbb;padding:.25rem .5rem;text-align:left;vertical-align:top}
th{background:#f0f0f0}td.n{text-align:right;font-variant-numeric:tabular-nums}
.note{color:#444;font-size:.9rem}.drop{color:#a00;font-weight:bold}.gain{color:#060}
figure{margin:1rem 0}figure svg{max-width:100%;height:auto}code{font-size:.85rem;word-break:break-all}
"""
# paged media (a browser's print, and the PDF: report/pdf.py lays out this same page): A4 landscape, numbered
# pages, smaller type, headings kept with what follows, wide tables across the page, long tables split between
# rows with their header repeated, figures whole
PRINT_CSS = """
@media print{
@page{size:A4 landscape;margin:14mm 12mm 16mm;
@bottom-left{content:string(release);font:7pt sans-serif;color:#555}
@bottom-right{content:"page " counter(page) " of " counter(pages);font:7pt sans-serif;color:#555}}
h1{string-set:release content(text);font-size:15pt;margin-top:0}
body{margin:0;max-width:none;padding:0;font-size:9pt}
h2{font-size:12pt;margin-top:1.1rem}h3{font-size:10pt}
h2,h3,p.note{break-after:avoid}
table{display:table;font-size:7.5pt;overflow:visible;break-inside:auto}table.wide{width:100%}
caption{text-align:left;font-weight:bold;padding:.2rem 0;break-after:avoid}
thead{display:table-header-group}tr{break-inside:avoid}
th,td{padding:.12rem .3rem}tbody th,tbody td{overflow-wrap:anywhere}.note{font-size:8.5pt}
figure{break-inside:avoid}figure svg{max-height:160mm}
code{font-size:7pt}
}
"""


def esc(value: Any) -> str:
    return html.escape("" if value is None else str(value), quote=True)


def num(x: Any, digits: int = 3) -> str:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "–"
    if isinstance(x, bool):
        return "yes" if x else "no"
    if isinstance(x, int):
        return str(x)
    return f"{float(x):.{digits}f}"


def ci(low: Any, high: Any, digits: int = 3) -> str:
    return "–" if low is None or high is None else f"[{num(low, digits)}, {num(high, digits)}]"


def table(caption: str, headers: Sequence[str], rows: Iterable[Sequence[Any]], numeric: Sequence[bool] = ()) -> str:
    """A table; cells are escaped here unless given as ``Raw``. The first column heads each row."""
    body = []
    for row in rows:
        cells = []
        for i, v in enumerate(row):
            text = v.html if isinstance(v, Raw) else esc(v)
            if i == 0:
                cells.append(f'<th scope="row">{text}</th>')
            else:
                cls = ' class="n"' if i < len(numeric) and numeric[i] else ""
                cells.append(f"<td{cls}>{text}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    if not body:
        return f'<p class="note">{esc(caption)}: none.</p>'
    head = "".join(f'<th scope="col">{esc(h)}</th>' for h in headers)
    wide = ' class="wide"' if len(headers) >= 7 else ""  # across the printed page (render's PRINT_CSS)
    return (f"<table{wide}><caption>{esc(caption)}</caption><thead><tr>{head}</tr></thead><tbody>"
            + "".join(body) + "</tbody></table>")


class Raw:
    def __init__(self, markup: str) -> None:
        self.html = markup


def pyplot():
    try:
        import matplotlib
    except ImportError:
        raise ConfigError("the report's plots need matplotlib: pip install 'medhelm-k8s[report]'") from None
    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def svg(fig: Any, label: str) -> str:
    """The figure as inline SVG: text as text (selectable), no date, ids fixed (the same input, the same bytes)."""
    plt = pyplot()
    buf = io.StringIO()
    with plt.rc_context({"svg.fonttype": "none", "svg.hashsalt": "medhelm-report"}):
        fig.savefig(buf, format="svg", bbox_inches="tight", metadata={"Date": None, "Creator": None})
    plt.close(fig)
    text = buf.getvalue()
    text = text[text.index("<svg"):]
    return text.replace("<svg ", f'<svg role="img" aria-label="{esc(label)}" ', 1)


ROWS_PER_FIGURE = 18  # a figure of at most this many rows fits a printed A4 landscape page at full size


def interval_plot(title: str, labels: Sequence[str], values: Sequence[float | None],
                  lows: Sequence[float | None], highs: Sequence[float | None], xlabel: str) -> str:
    """Points with 95 % intervals, one row per label (top to bottom in the given order); more rows than
    ``ROWS_PER_FIGURE`` are drawn as several figures of about equal size on one shared score axis."""
    n = len(labels)
    parts = max(1, math.ceil(n / ROWS_PER_FIGURE))
    size = math.ceil(n / parts) if n else 0
    ends = [float(v) for v in (*values, *lows, *highs) if v is not None and math.isfinite(float(v))]
    pad = (max(ends) - min(ends)) * 0.04 or 0.05 if ends else 0.05
    xlim = (min(ends) - pad, max(ends) + pad) if ends else None
    out = []
    for i in range(parts):
        part = slice(i * size, (i + 1) * size)
        name = title if parts == 1 else f"{title} ({i + 1} of {parts})"
        out.append(_interval_figure(name, labels[part], values[part], lows[part], highs[part], xlabel, xlim))
    return "".join(out)


def _interval_figure(title: str, labels: Sequence[str], values: Sequence[float | None],
                     lows: Sequence[float | None], highs: Sequence[float | None], xlabel: str,
                     xlim: tuple[float, float] | None) -> str:
    plt = pyplot()
    # names are data: a "$" would start matplotlib's math mode (and an unbalanced one raise), so it is escaped
    labels = [str(label).replace("$", r"\$") for label in labels]
    caption, title = title, title.replace("$", r"\$")
    n = len(labels)
    fig, ax = plt.subplots(figsize=(7.5, 0.8 + 0.28 * n))
    ys = list(range(n))[::-1]
    for y, v, lo, hi in zip(ys, values, lows, highs):
        if v is None:
            continue
        if lo is not None and hi is not None:
            ax.plot([lo, hi], [y, y], color="#1f4e79", linewidth=2)
        ax.plot([v], [y], marker="o", color="#1f4e79", markersize=4)
    ax.set_yticks(ys)
    ax.set_yticklabels(labels, fontsize=8)
    ax.set_xlabel(xlabel, fontsize=9)
    ax.set_title(title, fontsize=10)
    ax.grid(axis="x", color="#ddd")
    ax.set_ylim(-0.7, n - 0.3)
    if xlim is not None:
        ax.set_xlim(*xlim)
    return f"<figure>{svg(fig, caption)}<figcaption>{esc(caption)}: points with their {esc(METHOD)}." \
           "</figcaption></figure>"


_PATH = re.compile(r"(?<![\w.~:/-])(?:[A-Za-z]:)?[/\\](?:[^\s,;:=/\\'\"<>]+[/\\])*([^\s,;:=/\\'\"<>]*)")


def no_paths(value: Any) -> str:
    """``value`` with every absolute file path reduced to its file name."""
    return _PATH.sub(lambda m: m.group(1) or "…", "" if value is None else str(value))


def when(value: Any, *, seconds: bool = False) -> str:
    """A time as the committee reads it: with its zone; a time stored without one says so."""
    if value is None or value == "":
        return "not recorded"
    if isinstance(value, datetime):
        moment = value
    elif isinstance(value, date):
        return value.isoformat()
    else:
        try:
            moment = datetime.fromisoformat(str(value))
        except ValueError:
            return str(value)
    if moment.tzinfo is None:
        return moment.isoformat(sep=" ", timespec="seconds") + " (time zone not recorded)"
    offset = moment.utcoffset()
    zone = moment.strftime("%z")
    zone = "UTC" if offset is not None and not offset else f"UTC{zone[:3]}:{zone[3:5]}"
    return moment.strftime("%Y-%m-%d %H:%M:%S" if seconds else "%Y-%m-%d %H:%M") + f" {zone}"


def metric_words(metric: str | None) -> str:
    """What a metric computes, in the scorer's own words (scoring/registry.py), else its name."""
    from medhelm.scoring import registry

    factory = registry.factories().get(str(metric)) if metric in registry.names() else None
    return factory.description if factory is not None and factory.description else str(metric or "–")


def paragraphs(text: str | None) -> str:
    parts = [t.strip() for t in (text or "").split("\n\n") if t.strip()]
    return "".join(f"<p>{esc(t)}</p>" for t in parts)


def int_or_none(x: Any) -> int | None:
    return None if x is None else int(round(float(x)))


def json_list(text: str | None) -> list[str]:
    import json

    try:
        value = json.loads(text or "[]")
    except ValueError:
        return []
    return [str(v) for v in value] if isinstance(value, list) else []
