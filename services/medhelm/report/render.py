"""The report as one self-contained HTML page: inline CSS, plots as inline SVG (matplotlib, text kept as
text so it can be selected and searched), no script, no external request (no CDN, no font, no image URL),
tables with ``<th scope>`` headers. Every value from the store is HTML-escaped.

Failure semantics: matplotlib missing is a ``ConfigError`` naming the extra to install
(``medhelm-k8s[report]``), raised before anything is written; a part without rows is shown as a sentence
saying so, never as an empty table.
"""

from __future__ import annotations

import html
import io
import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from typing import Any

from medhelm.errors import ConfigError
from medhelm.report.content import ReportContent
from medhelm.store.compare import MULTIPLICITY_RULE
from medhelm.store.subgroups import SUPPRESSION

_CSS = """
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
_PRINT_CSS = """
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


def _e(value: Any) -> str:
    return html.escape("" if value is None else str(value), quote=True)


def _num(x: Any, digits: int = 3) -> str:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "–"
    if isinstance(x, bool):
        return "yes" if x else "no"
    if isinstance(x, int):
        return str(x)
    return f"{float(x):.{digits}f}"


def _ci(low: Any, high: Any, digits: int = 3) -> str:
    return "–" if low is None or high is None else f"[{_num(low, digits)}, {_num(high, digits)}]"


def _table(caption: str, headers: Sequence[str], rows: Iterable[Sequence[Any]], numeric: Sequence[bool] = ()) -> str:
    """A table; cells are escaped here unless given as ``_Raw``. The first column heads each row."""
    body = []
    for row in rows:
        cells = []
        for i, v in enumerate(row):
            text = v.html if isinstance(v, _Raw) else _e(v)
            if i == 0:
                cells.append(f'<th scope="row">{text}</th>')
            else:
                cls = ' class="n"' if i < len(numeric) and numeric[i] else ""
                cells.append(f"<td{cls}>{text}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    if not body:
        return f'<p class="note">{_e(caption)}: none.</p>'
    head = "".join(f'<th scope="col">{_e(h)}</th>' for h in headers)
    wide = ' class="wide"' if len(headers) >= 7 else ""  # across the printed page (render's _PRINT_CSS)
    return (f"<table{wide}><caption>{_e(caption)}</caption><thead><tr>{head}</tr></thead><tbody>"
            + "".join(body) + "</tbody></table>")


class _Raw:
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


def _svg(fig: Any, label: str) -> str:
    """The figure as inline SVG: text as text (selectable), no date, ids fixed (the same input, the same bytes)."""
    plt = pyplot()
    buf = io.StringIO()
    with plt.rc_context({"svg.fonttype": "none", "svg.hashsalt": "medhelm-report"}):
        fig.savefig(buf, format="svg", bbox_inches="tight", metadata={"Date": None, "Creator": None})
    plt.close(fig)
    text = buf.getvalue()
    text = text[text.index("<svg"):]
    return text.replace("<svg ", f'<svg role="img" aria-label="{_e(label)}" ', 1)


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
    return f"<figure>{_svg(fig, caption)}<figcaption>{_e(caption)}: points with 95 % bootstrap intervals." \
           "</figcaption></figure>"


def render(content: ReportContent, created_at: str) -> bytes:
    p = content.parts
    meta = {r["key"]: r["value"] for r in p["meta"]}
    bench = {b["benchmark"]: b for b in p["benchmarks"]}
    out = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
           '<meta name="viewport" content="width=device-width, initial-scale=1">',
           # no script, no outside request of any kind (the page must open offline, in a locked-down viewer)
           "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'; "
           "img-src data:\">",
           f"<title>MedHELM evaluation report: {_e(content.release)}</title><style>{_CSS}{_PRINT_CSS}</style></head>"
           "<body>",
           f"<h1>MedHELM evaluation report: release <code>{_e(content.release)}</code></h1>",
           f'<p class="note">Made {_e(created_at)} by medhelm {_e(content.code_version)} from the results store\'s '
           "aggregates only (no prompt, output or patient text is read). Its manifest (the digests of every input "
           "and of this page) is at the end of the file; check it with <code>medhelm report verify FILE</code>."
           "</p>"]
    out += _summary(meta, p)
    if content.extra.get("legacy_names"):
        out.append('<p class="note drop">This release was summarized before the multiple-choice columns were '
                   "renamed: its exact_match values are the lenient rule (today's lenient_match), not HELM's. Re-run "
                   "<code>medhelm summarize</code> to rank it by HELM's rule.</p>")
    out += _leaderboard(p)
    out += _benchmarks(p, bench)
    out += _subgroups(p, bench)
    out += _change(content)
    out += _provenance(content, meta)
    out.append("</body></html>")
    return "\n".join(out).encode("utf-8")


def _summary(meta: dict[str, str], p: dict[str, list[dict]]) -> list[str]:
    rows = [("Runs", meta.get("runs")), ("Instances", meta.get("instances")), ("Benchmarks", len(p["benchmarks"])),
            ("Models", len(p["models"])), ("Suites", ", ".join(_json_list(meta.get("suites")))),
            ("Summarised", meta.get("created_at")), ("Bootstrap replicates", meta.get("replicates")),
            ("Bootstrap seed", meta.get("seed"))]
    return ["<h2>Summary</h2>", _table("What this release holds", ("Item", "Value"), rows)]


def _leaderboard(p: dict[str, list[dict]]) -> list[str]:
    rows = [(_num(r["rank"]), r["model"], r["deployment"], _ci(r["rank_low"], r["rank_high"], 1),
             _num(r["win_rate"]), _ci(r["win_rate_low"], r["win_rate_high"]), _num(r["mean_score"]),
             r["n_benchmarks"]) for r in p["leaderboard"]]
    return ["<h2>Leaderboard</h2>",
            '<p class="note">Mean win rate over benchmarks (the share of other models each model beats, per '
            "benchmark) with its 95 % bootstrap interval, and the rank's interval over the same replicates.</p>",
            _table("Leaderboard", ("Rank", "Model", "Deployment", "Rank 95 % CI", "Win rate", "Win rate 95 % CI",
                                   "Mean score", "Benchmarks"), rows, (True, False, False, True, True, True, True,
                                                                        True))]


def _benchmarks(p: dict[str, list[dict]], bench: dict[str, dict]) -> list[str]:
    out = ["<h2>Scores per benchmark</h2>"]
    cells = p["cells"]
    if cells:
        labels = [f"{bench.get(c['benchmark'], {}).get('display_name') or c['benchmark']} · {c['model']}"
                  for c in cells]
        out.append(interval_plot("Main metric per benchmark and model", labels, [c["value"] for c in cells],
                                 [c["ci_low"] for c in cells], [c["ci_high"] for c in cells], "score"))
    rows = [(bench.get(c["benchmark"], {}).get("display_name") or c["benchmark"],
             bench.get(c["benchmark"], {}).get("category"), bench.get(c["benchmark"], {}).get("main_metric"),
             "lower" if bench.get(c["benchmark"], {}).get("lower_is_better") else "higher", c["model"],
             c["deployment"], _num(c["value"]), _ci(c["ci_low"], c["ci_high"]), c["n_instances"], c["n_unscored"])
            for c in cells]
    out.append(_table("Main metric per benchmark", ("Benchmark", "Category", "Metric", "Better", "Model",
                                                    "Deployment", "Value", "95 % CI", "Instances", "Unscored"),
                      rows, (False,) * 6 + (True,) * 4))
    beside = [(bench.get(r["benchmark"], {}).get("display_name") or r["benchmark"], r["stat"], r["model"],
               r["deployment"], _num(r["value"])) for r in p.get("beside", ())]
    if beside:
        out.append('<p class="note">Beside the main metric, never ranked: lenient_match is our reading of answers '
                   'such as "A." or "The answer is A" (the main exact_match is HELM\'s rule: the answer must be the '
                   'letter); &lt;benchmark&gt;_accuracy is MedHELM\'s 1–5 jury mean, the number its leaderboard '
                   'shows.</p>')
        out.append(_table("Beside the main metric", ("Benchmark", "Metric", "Model", "Deployment", "Value"), beside,
                          (False,) * 4 + (True,)))
    groups = [(g["grp"], g["model"], g["deployment"], _num(g["value"]), _ci(g["ci_low"], g["ci_high"]),
               g["n_benchmarks"]) for g in p["group_scores"] if g["level"] == "category"]
    out.append(_table("Mean per category", ("Category", "Model", "Deployment", "Mean", "95 % CI", "Benchmarks"),
                      groups, (False, False, False, True, True, True)))
    return out


def _subgroups(p: dict[str, list[dict]], bench: dict[str, dict]) -> list[str]:
    out = ["<h2>Performance by patient subgroup</h2>"]
    gaps = p["subgroup_gaps"]
    if not gaps:
        return out + ['<p class="note">No benchmark of this release names patient subgroups (a configurable '
                      "benchmark's <code>subgroups:</code>; docs/report.md).</p>"]
    min_cell = sorted({g["min_cell"] for g in gaps})
    out.append(f'<p class="note">{_e(SUPPRESSION.format(min_cell="/".join(map(str, min_cell))))} The gap is the '
               "highest minus the lowest shown group; its p-value is a two-sided permutation test Holm-adjusted over "
               "every pair of the attribute's shown groups.</p>")
    scores: dict[tuple, list[dict]] = defaultdict(list)
    for s in p["subgroup_scores"]:
        scores[(s["benchmark"], s["attribute"])].append(s)
    gap_rows = [(bench.get(g["benchmark"], {}).get("display_name") or g["benchmark"], g["attribute"], g["model"],
                 g["deployment"], g["n_groups"], g["n_suppressed"], g["high_group"], g["low_group"], _num(g["gap"]),
                 _ci(g["gap_low"], g["gap_high"]), _num(g["ratio"]), _num(g["p_holm"], 4)) for g in gaps]
    out.append(_table("Largest gap between subgroups", ("Benchmark", "Attribute", "Model", "Deployment",
                                                        "Groups shown", "Groups suppressed", "Highest", "Lowest",
                                                        "Gap", "Gap 95 % CI", "Ratio low/high", "p (Holm)"),
                      gap_rows, (False,) * 4 + (True, True, False, False, True, True, True, True)))
    for (b, attr), rows in sorted(scores.items()):
        name = bench.get(b, {}).get("display_name") or b
        out.append(f"<h3>{_e(name)}: by {_e(attr)}</h3>")
        out.append(interval_plot(f"{name} by {attr}", [f"{r['grp']} · {r['model']}" for r in rows],
                                 [r["value"] for r in rows], [r["ci_low"] for r in rows],
                                 [r["ci_high"] for r in rows], "score"))
        out.append(_table(f"{name} by {attr}", ("Group", "Model", "Deployment", "Instances", "Value", "95 % CI"),
                          [(r["grp"], r["model"], r["deployment"], r["n"], _num(r["value"]),
                            _ci(r["ci_low"], r["ci_high"])) for r in rows],
                          (False, False, False, True, True, True)))
    return out


def _change(content: ReportContent) -> list[str]:
    c = content.comparison
    if c is None:
        return []
    out = [f"<h2>Change against the accepted release <code>{_e(content.against)}</code></h2>",
           f'<p class="note">Paired on the instances both releases scored; difference = this release minus the '
           f"accepted one, its 95 % bootstrap interval, McNemar's exact test for 0/1 metrics (else the bootstrap), "
           f"{_e(MULTIPLICITY_RULE.format(family='model and benchmark'))}. "
           f"Drops: {sum(r.change == 'drop' for r in c.results)}"
           f"; gains: {sum(r.change == 'gain' for r in c.results)}.</p>"]
    rows = [(r.display_name or r.benchmark, r.model_b, r.deployment_b, r.n_pairs, _num(r.score_a), _num(r.score_b),
             _num(r.diff), _ci(r.ci_low, r.ci_high), _num(r.p_adjusted, 4),
             _Raw(f'<span class="{_e(r.change.replace(" ", "-"))}">{_e(r.change)}</span>')) for r in c.results]
    out.append(_table("Change per benchmark and model", ("Benchmark", "Model", "Deployment", "Paired instances",
                                                         "Accepted", "This release", "Difference", "95 % CI",
                                                         "p (Holm)", "Change"),
                      rows, (False, False, False, True, True, True, True, True, True, False)))
    flagged = [s for s in content.subgroup_changes if s.result.change in ("drop", "gain")]
    if content.subgroup_changes or content.subgroup_changes_suppressed:
        out.append(f'<p class="note">By patient subgroup: {len(content.subgroup_changes)} model × benchmark × group '
                   f"comparisons, every one listed, {len(flagged)} significant; "
                   f"{content.subgroup_changes_suppressed} small group(s) suppressed (pooled); "
                   f"{_e(MULTIPLICITY_RULE.format(family='model × benchmark × group'))}.</p>")
        out.append(_table("Changes within each patient subgroup",
                          ("Benchmark", "Attribute", "Group", "Model", "Paired instances", "Accepted", "This release",
                           "Difference", "95 % CI", "p (Holm)", "Change"),
                          [(s.result.display_name or s.result.benchmark, s.attribute, s.group, s.result.model_b,
                            s.result.n_pairs, _num(s.result.score_a), _num(s.result.score_b), _num(s.result.diff),
                            _ci(s.result.ci_low, s.result.ci_high), _num(s.result.p_adjusted, 4),
                            _Raw(f'<span class="{_e(s.result.change.replace(" ", "-"))}">{_e(s.result.change)}</span>'))
                           for s in content.subgroup_changes], (False,) * 4 + (True,) * 6 + (False,)))
    missing = [*(f"only in the accepted release: {x}" for x in c.only_in_a),
               *(f"only in this release: {x}" for x in c.only_in_b), *(f"no counterpart: {x}" for x in c.unmatched)]
    if missing:
        out.append("<ul>" + "".join(f"<li>{_e(m)}</li>" for m in missing) + "</ul>")
    return out


def _provenance(content: ReportContent, meta: dict[str, str]) -> list[str]:
    p = content.parts
    out = ["<h2>Provenance</h2>",
           _table("Models and deployments", ("Model", "Deployment", "Redacted", "Suites", "Instances"),
                  [(m["model"], m["deployment"], _num(bool(m["redacted"])), m["suites"], m["n_instances"])
                   for m in p["models"]], (False, False, False, False, True)),
           _table("Runs (run entries, configuration digests)",
                  ("Run", "Suite", "Model", "Deployment", "Source", "Done / total", "Errors", "Run entry",
                   "Benchmark source", "Settings", "Run spec sha256"),
                  [(r["run_name"], r["suite"], r["model"], r["deployment"], r["source"],
                    f"{_num(r['instances_done'])} / {_num(r['instances_total'])}", _num(r["errors"]), r["entry"],
                    r["benchmark_source"], ", ".join(f"{k}={v}" for k, v in r["settings"].items() if v is not None)
                    + ("; custom prompt" if r["custom_prompt"] else ""), _Raw(f"<code>{_e(r['spec_sha256'])}</code>"))
                   for r in p["runs"]], (False,) * 5 + (True, True)),
           _table("Inputs of this report (SHA-256 of the aggregates read)", ("Input", "SHA-256"),
                  [(k, _Raw(f"<code>{_e(v)}</code>")) for k, v in sorted(content.inputs.items())]),
           f'<p class="note">Code: medhelm {_e(content.code_version)}. Release summarised {_e(meta.get("created_at"))}'
           f"; skipped runs: {_e(len(_json_list(meta.get('skipped'))))}.</p>"]
    return out


def _json_list(text: str | None) -> list[str]:
    import json

    try:
        value = json.loads(text or "[]")
    except ValueError:
        return []
    return [str(v) for v in value] if isinstance(value, list) else []
