"""The report as one self-contained HTML page: inline CSS, plots as inline SVG (matplotlib, text kept as
text so it can be selected and searched), no script, no external request (no CDN, no font, no image URL),
tables with ``<th scope>`` headers. Every value from the store is HTML-escaped. The page's parts, in order, are
here; their building blocks (CSS, escaping, spellings, tables, plots) are ``page.py``'s.

Failure semantics: matplotlib missing is a ``ConfigError`` naming the extra to install
(``medhelm-k8s[report]``), raised before anything is written; a part without rows is shown as a sentence
saying so, never as an empty table.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from medhelm.report.access import RecordedAccess, disagreements, recorded_access
from medhelm.report.content import ReportContent
from medhelm.report.page import (CSS, PRINT_CSS, Raw, ci, esc, int_or_none, interval_plot, json_list, metric_words,
                                 no_paths, num, paragraphs, table, when)
from medhelm.store.compare import MULTIPLICITY_RULE
from medhelm.store.intervals import PAIRED_METHOD
from medhelm.store.subgroups import SUPPRESSION


def render(content: ReportContent, created_at: str) -> bytes:
    p = content.parts
    meta = {r["key"]: r["value"] for r in p["meta"]}
    bench = {b["benchmark"]: b for b in p["benchmarks"]}
    out = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
           '<meta name="viewport" content="width=device-width, initial-scale=1">',
           # no script, no outside request of any kind (the page must open offline, in a locked-down viewer)
           "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'; "
           "img-src data:\">",
           f"<title>MedHELM evaluation report: {esc(content.release)}</title><style>{CSS}{PRINT_CSS}</style></head>"
           "<body>",
           f"<h1>MedHELM evaluation report: release <code>{esc(content.release)}</code></h1>",
           f'<p class="note">Made {esc(when(created_at))} by medhelm {esc(content.code_version)} from the results store\'s '
           "aggregates only (no prompt, output or patient text is read). Its manifest (the digests of every input "
           "and of this page) is at the end of the file; check it with <code>medhelm report verify FILE --key "
           "SIGNER.pub</code> (the signer's public key: without a trusted key the signature is not checked)."
           "</p>"]
    out += _executive(content, meta, bench)
    out += _sign_off(content)
    out += _use(content)
    out += _summary(meta, p)
    if content.extra.get("legacy_names"):
        out.append('<p class="note drop">This release was summarized before the multiple-choice columns were '
                   "renamed: its exact_match values are the lenient rule (today's lenient_match), not HELM's. Re-run "
                   "<code>medhelm summarize</code> to rank it by HELM's rule.</p>")
    out += _leaderboard(p)
    out += _measures(content, bench)
    out += _benchmarks(p, bench)
    out += _data(content, bench)
    out += _subgroups(p, bench)
    out += _change(content)
    out += _models(content)
    out += _usage(p, bench)
    out += _provenance(content, meta)
    out.append("</body></html>")
    return "\n".join(out).encode("utf-8")


def _summary(meta: dict[str, str], p: dict[str, list[dict]]) -> list[str]:
    rows = [("Runs", meta.get("runs")), ("Instances", meta.get("instances")), ("Benchmarks", len(p["benchmarks"])),
            ("Models", len(p["models"])), ("Suites", ", ".join(json_list(meta.get("suites")))),
            ("Summarised", when(meta.get("created_at"))), ("Bootstrap replicates", meta.get("replicates")),
            ("Bootstrap seed", meta.get("seed"))]
    return ["<h2>Summary</h2>", table("What this release holds", ("Item", "Value"), rows)]


def _leaderboard(p: dict[str, list[dict]]) -> list[str]:
    rows = [(num(r["rank"]), r["model"], r["deployment"], ci(r["rank_low"], r["rank_high"], 1),
             num(r["win_rate"]), ci(r["win_rate_low"], r["win_rate_high"]), r["n_benchmarks"])
            for r in p["leaderboard"]]
    return ["<h2>Leaderboard</h2>",
            '<p class="note">Mean win rate over benchmarks (the share of other models each model beats, per '
            "benchmark) with its 95 % bootstrap interval, and the rank's interval over the same replicates. Scores "
            "of different benchmarks are never averaged: each is on its own metric's scale.</p>",
            table("Leaderboard", ("Rank", "Model", "Deployment", "Rank 95 % CI", "Win rate", "Win rate 95 % CI",
                                   "Benchmarks"), rows, (True, False, False, True, True, True, True))]


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
             c["deployment"], num(c["value"]), ci(c["ci_low"], c["ci_high"]), c["n_instances"], c["n_unscored"])
            for c in cells]
    out.append(table("Main metric per benchmark", ("Benchmark", "Category", "Metric", "Better", "Model",
                                                    "Deployment", "Value", "95 % CI", "Instances", "Unscored"),
                      rows, (False,) * 6 + (True,) * 4))
    beside = [(bench.get(r["benchmark"], {}).get("display_name") or r["benchmark"], r["stat"], r["model"],
               r["deployment"], num(r["value"])) for r in p.get("beside", ())]
    if beside:
        out.append('<p class="note">Beside the main metric, never ranked: lenient_match is our reading of answers '
                   'such as "A." or "The answer is A" (the main exact_match is HELM\'s rule: the answer must be the '
                   'letter); &lt;benchmark&gt;_accuracy is MedHELM\'s 1–5 jury mean, the number its leaderboard '
                   'shows.</p>')
        out.append(table("Beside the main metric", ("Benchmark", "Metric", "Model", "Deployment", "Value"), beside,
                          (False,) * 4 + (True,)))
    metrics_of: dict[str, set] = defaultdict(set)
    for b in p["benchmarks"]:
        metrics_of[b["category"]].add(b["main_metric"])
    groups = [(g["grp"], next(iter(metrics_of[g["grp"]])), g["model"], g["deployment"], num(g["value"]),
               ci(g["ci_low"], g["ci_high"]), g["n_benchmarks"]) for g in p["group_scores"]
              if g["level"] == "category" and len(metrics_of.get(g["grp"], ())) == 1]
    mixed = sorted(c for c, m in metrics_of.items() if len(m) > 1 and c)
    if groups or mixed:
        out.append(table("Mean per category (benchmarks of one metric only)",
                          ("Category", "Metric", "Model", "Deployment", "Mean", "95 % CI", "Benchmarks"), groups,
                          (False, False, False, False, True, True, True)))
    if mixed:
        out.append(f'<p class="note">No mean is shown for {esc(", ".join(mixed))}: its benchmarks use different '
                   "metrics, whose average would mean nothing.</p>")
    return out


def _subgroups(p: dict[str, list[dict]], bench: dict[str, dict]) -> list[str]:
    out = ["<h2>Performance by patient subgroup</h2>"]
    gaps = p["subgroup_gaps"]
    if not gaps:
        return out + ['<p class="note">No benchmark of this release names patient subgroups (a configurable '
                      "benchmark's <code>subgroups:</code>; docs/report.md).</p>"]
    min_cell = sorted({g["min_cell"] for g in gaps})
    out.append(f'<p class="note">{esc(SUPPRESSION.format(min_cell="/".join(map(str, min_cell))))} The gap is the '
               "highest minus the lowest shown group; its p-value is a two-sided permutation test Holm-adjusted over "
               "every pair of the attribute's shown groups.</p>")
    scores: dict[tuple, list[dict]] = defaultdict(list)
    for s in p["subgroup_scores"]:
        scores[(s["benchmark"], s["attribute"])].append(s)
    gap_rows = [(bench.get(g["benchmark"], {}).get("display_name") or g["benchmark"], g["attribute"], g["model"],
                 g["deployment"], g["n_groups"], g["n_suppressed"], g["high_group"], g["low_group"], num(g["gap"]),
                 ci(g["gap_low"], g["gap_high"]), num(g["ratio"]), num(g["p_holm"], 4)) for g in gaps]
    out.append(table("Largest gap between subgroups", ("Benchmark", "Attribute", "Model", "Deployment",
                                                        "Groups shown", "Groups suppressed", "Highest", "Lowest",
                                                        "Gap", "Gap 95 % CI", "Ratio low/high", "p (Holm)"),
                      gap_rows, (False,) * 4 + (True, True, False, False, True, True, True, True)))
    for (b, attr), rows in sorted(scores.items()):
        name = bench.get(b, {}).get("display_name") or b
        out.append(f"<h3>{esc(name)}: by {esc(attr)}</h3>")
        out.append(interval_plot(f"{name} by {attr}", [f"{r['grp']} · {r['model']}" for r in rows],
                                 [r["value"] for r in rows], [r["ci_low"] for r in rows],
                                 [r["ci_high"] for r in rows], "score"))
        out.append(table(f"{name} by {attr}", ("Group", "Model", "Deployment", "Instances", "Value", "95 % CI"),
                          [(r["grp"], r["model"], r["deployment"], r["n"], num(r["value"]),
                            ci(r["ci_low"], r["ci_high"])) for r in rows],
                          (False, False, False, True, True, True)))
    return out


def _change(content: ReportContent) -> list[str]:
    c = content.comparison
    if c is None:
        return []
    out = [f"<h2>Change against the accepted release <code>{esc(content.against)}</code></h2>",
           f'<p class="note">Paired on the instances both releases scored; difference = this release minus the '
           f"accepted one, its 95 % {esc(PAIRED_METHOD)}, McNemar's exact test for 0/1 metrics (else the bootstrap), "
           f"{esc(MULTIPLICITY_RULE.format(family='model and benchmark'))}. "
           f"Drops: {sum(r.change == 'drop' for r in c.results)}"
           f"; gains: {sum(r.change == 'gain' for r in c.results)}.</p>"]
    rows = [(r.display_name or r.benchmark, r.model_b, r.deployment_b, r.n_pairs, num(r.score_a), num(r.score_b),
             num(r.diff), ci(r.ci_low, r.ci_high), num(r.p_adjusted, 4),
             Raw(f'<span class="{esc(r.change.replace(" ", "-"))}">{esc(r.change)}</span>')) for r in c.results]
    out.append(table("Change per benchmark and model", ("Benchmark", "Model", "Deployment", "Paired instances",
                                                         "Accepted", "This release", "Difference", "95 % CI",
                                                         "p (Holm)", "Change"),
                      rows, (False, False, False, True, True, True, True, True, True, False)))
    flagged = [s for s in content.subgroup_changes if s.result.change in ("drop", "gain")]
    if content.subgroup_changes or content.subgroup_changes_suppressed:
        out.append(f'<p class="note">By patient subgroup: {len(content.subgroup_changes)} model × benchmark × group '
                   f"comparisons, every one listed, {len(flagged)} significant; "
                   f"{content.subgroup_changes_suppressed} small group(s) suppressed (pooled); "
                   f"{esc(MULTIPLICITY_RULE.format(family='model × benchmark × group'))}.</p>")
        out.append(table("Changes within each patient subgroup",
                          ("Benchmark", "Attribute", "Group", "Model", "Paired instances", "Accepted", "This release",
                           "Difference", "95 % CI", "p (Holm)", "Change"),
                          [(s.result.display_name or s.result.benchmark, s.attribute, s.group, s.result.model_b,
                            s.result.n_pairs, num(s.result.score_a), num(s.result.score_b), num(s.result.diff),
                            ci(s.result.ci_low, s.result.ci_high), num(s.result.p_adjusted, 4),
                            Raw(f'<span class="{esc(s.result.change.replace(" ", "-"))}">{esc(s.result.change)}</span>'))
                           for s in content.subgroup_changes], (False,) * 4 + (True,) * 6 + (False,)))
    missing = [*(f"only in the accepted release: {x}" for x in c.only_in_a),
               *(f"only in this release: {x}" for x in c.only_in_b), *(f"no counterpart: {x}" for x in c.unmatched)]
    if missing:
        out.append("<ul>" + "".join(f"<li>{esc(m)}</li>" for m in missing) + "</ul>")
    return out


def _provenance(content: ReportContent, meta: dict[str, str]) -> list[str]:
    p = content.parts
    out = ["<h2>Provenance</h2>",
           table("Models and deployments", ("Model", "Deployment", "Redacted", "Suites", "Instances"),
                  [(m["model"], m["deployment"], num(bool(m["redacted"])), m["suites"], m["n_instances"])
                   for m in p["models"]], (False, False, False, False, True)),
           table("Runs (run entries, configuration digests)",
                  ("Run", "Suite", "Model", "Deployment", "Source", "Done / total", "Errors", "Run entry",
                   "Benchmark source", "Settings", "Run spec sha256"),
                  [(no_paths(r["run_name"]), r["suite"], r["model"], r["deployment"], no_paths(r["source"]),
                    f"{num(r['instances_done'])} / {num(r['instances_total'])}", num(r["errors"]),
                    no_paths(r["entry"]), no_paths(r["benchmark_source"]), ", ".join(f"{k}={v}" for k, v in r["settings"].items() if v is not None)
                    + ("; custom prompt" if r["custom_prompt"] else ""), Raw(f"<code>{esc(r['spec_sha256'])}</code>"))
                   for r in p["runs"]], (False,) * 5 + (True, True)),
           table("Inputs of this report (SHA-256 of the aggregates read)", ("Input", "SHA-256"),
                  [(k, Raw(f"<code>{esc(v)}</code>")) for k, v in sorted(content.inputs.items())]),
           table("Code", ("Item", "Value"),
                  [("medhelm version", content.code_version),
                   ("Code commit", Raw(f"<code>{esc(content.build.get('commit', 'not recorded'))}</code>")),
                   ("Image digest", Raw(f"<code>{esc(content.build.get('image', 'not recorded'))}</code>")),
                   ("Release summarised", when(meta.get("created_at"))),
                   ("Skipped runs", len(json_list(meta.get("skipped"))))]),
           '<p class="note">File paths are shown by file name only (a folder can name a person or a ward); the '
           "run spec's digest covers the full entry.</p>"]
    return out


def _cells_by_benchmark(p: dict[str, list[dict]]) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = defaultdict(list)
    for c in p["cells"]:
        out[c["benchmark"]].append(c)
    return out


def _executive(content: ReportContent, meta: dict[str, str], bench: dict[str, dict]) -> list[str]:
    """The page a committee reads first: what was evaluated and what was found, in sentences."""
    p = content.parts
    models = sorted({(m["model"], m["deployment"]) for m in p["models"]})
    names = ", ".join(f"{m} [{d}]" for m, d in models[:8]) + (" …" if len(models) > 8 else "")
    lines = [f"<p>This report evaluates {len(models)} model{'s' if len(models) != 1 else ''} ({esc(names)}) on "
             f"{len(bench)} benchmark{'s' if len(bench) != 1 else ''} with {esc(meta.get('instances', '–'))} scored "
             f"instances in all (release <code>{esc(content.release)}</code>"
             + (f", compared with the accepted release <code>{esc(content.against)}</code>" if content.against
                else "") + "). Each benchmark is scored on its own metric; scores of different benchmarks are not "
             "averaged. Intervals are 95 %.</p>"]
    findings = []
    for name, cells in sorted(_cells_by_benchmark(p).items()):
        b = bench.get(name, {})
        lower = bool(b.get("lower_is_better"))
        ranked = sorted((c for c in cells if c["value"] is not None), key=lambda c: c["value"], reverse=not lower)
        if not ranked:
            continue
        label = b.get("display_name") or name
        metric = f"{b.get('main_metric') or 'score'}, {'lower' if lower else 'higher'} is better"
        best = ranked[0]
        said = (f"{esc(best['model'])} scored {num(best['value'])} {esc(ci(best['ci_low'], best['ci_high']))} on "
                f"{esc(best['n_instances'])} instances")
        if len(ranked) > 1:
            last = ranked[-1]
            said = (f"best {said}; lowest {esc(last['model'])} {num(last['value'])} "
                    f"{esc(ci(last['ci_low'], last['ci_high']))}")
        unscored = sum(int(c["n_unscored"] or 0) for c in cells)
        if unscored:
            said += f"; {unscored} answer(s) could not be scored"
        findings.append(f"<li><strong>{esc(label)}</strong> ({esc(metric)}): {said}.</li>")
    if len(findings) > 12:
        findings = findings[:12] + [f"<li>… and {len(findings) - 12} more benchmarks (below).</li>"]
    board = [r for r in p["leaderboard"] if r["rank"] is not None]
    if len(board) > 1:
        top = board[0]
        findings.append(f"<li>Across benchmarks, <strong>{esc(top['model'])}</strong> beats the other models most "
                        f"often (mean win rate {num(top['win_rate'])} {esc(ci(top['win_rate_low'], top['win_rate_high']))}"
                        f"; its rank lies in {esc(ci(top['rank_low'], top['rank_high'], 1))}).</li>")
    c = content.comparison
    if c is not None:
        drops = [r for r in c.results if r.change == "drop"]
        gains = [r for r in c.results if r.change == "gain"]
        detail = "; ".join(f"{esc(r.display_name or r.benchmark)} · {esc(r.model_b)} {num(r.diff)}" for r in drops[:5])
        findings.append(f"<li>Against <code>{esc(content.against)}</code>: <span class=\"{'drop' if drops else ''}\">"
                        f"{len(drops)} significant drop(s)</span>{': ' + detail if detail else ''}; {len(gains)} "
                        "significant gain(s) (Holm-adjusted over every model and benchmark).</li>")
        sub = [s for s in content.subgroup_changes if s.result.change == "drop"]
        if sub:
            findings.append(f"<li class=\"drop\">{len(sub)} significant drop(s) within a patient subgroup (listed "
                            "under the change).</li>")
    gaps = sorted((g for g in p["subgroup_gaps"] if g["gap"] is not None), key=lambda g: -abs(g["gap"]))
    if gaps:
        g = gaps[0]
        findings.append(f"<li>Largest gap between patient subgroups: {esc(bench.get(g['benchmark'], {}).get('display_name') or g['benchmark'])}"
                        f", {esc(g['model'])}, by {esc(g['attribute'])}: {esc(g['high_group'])} vs {esc(g['low_group'])}, "
                        f"{num(g['gap'])} {esc(ci(g['gap_low'], g['gap_high']))}, p (Holm) {num(g['p_holm'], 4)}."
                        "</li>")
    access = _access(content)
    disagree = [f"{m['model']} [{m['deployment']}]" for m, _, _, d in access if d]
    if disagree:
        findings.append(f'<li class="drop">What the runs recorded of their endpoint, version or access window '
                        f"disagrees with report.yaml for {esc(', '.join(disagree[:8]))}{' …' if len(disagree) > 8 else ''}"
                        " (listed under Models).</li>")
    unrecorded = [f"{m['model']} [{m['deployment']}]" for m, r, _, _ in access if r.total_runs > r.runs]
    if unrecorded:
        findings.append("<li>Runs without a record of their endpoint and access window (run before runs kept one, "
                        f"or imported): {esc(', '.join(unrecorded[:8]))}{' …' if len(unrecorded) > 8 else ''}.</li>")
    about = content.about.about if content.about else None
    if about is None:
        findings.append('<li class="drop">No report.yaml was given: the intended use, limitations, risks, the '
                        "models' endpoints and versions as the hospital states them and the sign-off are missing "
                        "from this report.</li>")
        return ["<h2>Executive summary</h2>", *lines, "<ul>" + "".join(findings) + "</ul>"]
    access = [(m, r, a, d) for m, r, a, d in access if not r.no_model]  # a baseline has nothing to state
    silent = [f"{m['model']} [{m['deployment']}]" for m, r, a, _ in access if a is None and not r.runs]
    if silent:
        findings.append('<li class="drop">No endpoint, version or access window stated or recorded for '
                        f"{esc(', '.join(silent[:8]))}{' …' if len(silent) > 8 else ''} (report.yaml: models).</li>")
    alone = [f"{m['model']} [{m['deployment']}]" for m, r, a, _ in access if a is None and r.runs]
    if alone:
        findings.append("<li>No endpoint, version or access window stated in report.yaml for "
                        f"{esc(', '.join(alone[:8]))}{' …' if len(alone) > 8 else ''}: what the runs recorded is "
                        "shown alone (under Models).</li>")
    approver = about.sign_off.approved_by
    if approver is None:
        findings.append('<li class="drop">Not approved: the sign-off names no approver.</li>')
    else:
        findings.append(f"<li>Approved by {esc(approver.name)}{f' ({esc(approver.role)})' if approver.role else ''} "
                        f"on {esc(when(approver.date))}.</li>")
    return ["<h2>Executive summary</h2>", *lines, "<ul>" + "".join(findings) + "</ul>"]


def _sign_off(content: ReportContent) -> list[str]:
    out = ["<h2>Sign-off</h2>"]
    if content.about is None:
        return out + ['<p class="note drop">Not signed off: give the hospital\'s report.yaml (--about; template '
                      "examples/report.yaml) with who ran, reviewed and approved this evaluation.</p>"]
    s = content.about.about.sign_off
    rows = [(what, person.name if person else "not given", (person.role or "") if person else "",
             when(person.date) if person else "")
            for what, person in (("Ran by", s.ran_by), ("Reviewed by", s.reviewed_by), ("Approved by", s.approved_by))]
    return out + [table("Sign-off", ("", "Name", "Role", "Date"), rows),
                  f'<p class="note">From {esc(content.about.name)} (sha256 <code>{esc(content.about.sha256)}</code>, '
                  "also in the manifest): part of the signed bytes of this report, so it cannot be changed or moved "
                  "to another report without breaking the signature.</p>"]


def _use(content: ReportContent) -> list[str]:
    if content.about is None:
        return []
    a = content.about.about
    out = ["<h2>Intended use, limitations and risks</h2>"]
    if a.organisation or a.title:
        out.append(f"<p><strong>{esc(a.title or '')}</strong>{' — ' if a.title and a.organisation else ''}"
                   f"{esc(a.organisation or '')}</p>")
    out += ["<h3>Intended use</h3>", paragraphs(a.intended_use)]
    if a.out_of_scope:
        out += ["<h3>Out of scope</h3>", paragraphs(a.out_of_scope)]
    out += ["<h3>Known limitations</h3>", "<ul>" + "".join(f"<li>{esc(x)}</li>" for x in a.limitations) + "</ul>",
            "<h3>Risks</h3>", "<ul>" + "".join(f"<li>{esc(x)}</li>" for x in a.risks) + "</ul>"]
    return out


def _span(values: list[Any]) -> str:
    nums = sorted({int(v) for v in values if v is not None})
    return "–" if not nums else str(nums[0]) if len(nums) == 1 else f"{nums[0]}–{nums[-1]}"


def _measures(content: ReportContent, bench: dict[str, dict]) -> list[str]:
    p = content.parts
    about = content.about.about.benchmarks if content.about else {}
    cells = _cells_by_benchmark(p)
    prompts: dict[str, set] = defaultdict(set)
    custom = {(r["suite"], r["run_name"]): r["prompt_sha256"] for r in p.get("prompts", ())}
    for r in p["runs"]:
        digest = custom.get((r["suite"], r["run_name"]))
        source = no_paths(r["benchmark_source"]) or f"built into medhelm {content.code_version}"
        prompts[r["benchmark"]].add("; ".join(x for x in (source, digest and f"custom prompt sha256:{digest[:12]}")
                                             if x))
    rows = []
    for name in sorted(bench):
        b, told = bench[name], about.get(name)
        rows.append((b.get("display_name") or name,
                     (told.measures if told and told.measures else None) or b.get("description") or "not stated",
                     (told.reference_standard if told and told.reference_standard else None) or
                     "not stated (report.yaml: benchmarks)",
                     f"{b.get('main_metric')} ({'lower' if b.get('lower_is_better') else 'higher'} is better): "
                     f"{metric_words(b.get('main_metric'))}",
                     "; ".join(sorted(prompts.get(name, ()))) or "–",
                     _span([c["n_instances"] for c in cells.get(name, ())]),
                     _span([c["n_unscored"] for c in cells.get(name, ())])))
    return ["<h2>What each benchmark measures</h2>",
            '<p class="note">Prompt and data: the digest of the benchmark\'s own files (prompt template and data '
            "set) or the medhelm version whose built-in prompt it uses, and the digest of a custom prompt; instances: "
            "scored per model (n); unscored: answers without a score.</p>",
            table("Benchmarks", ("Benchmark", "What it measures", "Reference standard", "Metric",
                                  "Prompt and data", "Instances", "Unscored"), rows,
                   (False,) * 5 + (True, True))]


def _data(content: ReportContent, bench: dict[str, dict]) -> list[str]:
    p = content.parts
    out = ["<h2>Data</h2>"]
    if content.about is not None:
        d = content.about.about.data
        window = f"{when(d.time_window.start)} to {when(d.time_window.end)}" if d.time_window else "not stated"
        out.append(table("The data, as the hospital describes it", ("Item", "Value"),
                          [("Source", d.source), ("Time window", window), ("Population", d.population or "not stated"),
                           ("Missing labels", d.missing_labels or "not stated"), ("Notes", d.notes or "–")]))
    else:
        out.append('<p class="note drop">Source, time window and population not stated (report.yaml: data).</p>')
    groups: dict[tuple, dict[str, int]] = defaultdict(dict)
    for r in p["subgroup_scores"]:
        groups[(r["benchmark"], r["attribute"])][r["grp"]] = max(int(r["n"] or 0),
                                                                  groups[(r["benchmark"], r["attribute"])].get(r["grp"], 0))
    hidden: dict[tuple, int] = {}
    for g in p["subgroup_gaps"]:
        hidden[(g["benchmark"], g["attribute"])] = max(hidden.get((g["benchmark"], g["attribute"]), 0),
                                                      int(g["n_suppressed"] or 0))
    rows = []
    cells = _cells_by_benchmark(p)
    for name in sorted(bench):
        attrs = sorted({a for b, a in (*groups, *hidden) if b == name})
        sizes = "; ".join(f"{a}: " + ", ".join(f"{g} {n}" for g, n in sorted(groups.get((name, a), {}).items()))
                          + (f" ({hidden[(name, a)]} small group(s) pooled)" if hidden.get((name, a)) else "")
                          for a in attrs) or "no subgroups named"
        rows.append((bench[name].get("display_name") or name,
                     _span([c["n_instances"] for c in cells.get(name, ())]),
                     _span([c["n_unscored"] for c in cells.get(name, ())]), sizes))
    out.append(table("Instances and patient subgroups per benchmark", ("Benchmark", "Instances scored",
                                                                        "Unscored", "Subgroup sizes (scored)"),
                      rows, (False, True, True, False)))
    out.append('<p class="note">Unscored: an answer that could not be scored (a failed request, an answer the metric '
               "cannot read, or an instance without a reference label). A subgroup's blank value is a group of its "
               "own; a group smaller than the minimum is pooled with the next smallest and shown only inside that pool "
               "(its joined name, e.g. 'young + child').</p>")
    return out


def _stated(content: ReportContent, model: str, deployment: str) -> Any:
    """report.yaml's entry for a model and deployment (``about.ModelAbout``), None when it states none."""
    told = content.about.about.models if content.about else []
    return next((m for m in told if m.model == model and m.deployment in (None, deployment)), None)


def _access(content: ReportContent) -> list[tuple[dict, RecordedAccess, Any, list[str]]]:
    """Per model row: (the row, what its runs recorded, what report.yaml states, their disagreements)."""
    p = content.parts
    recorded = recorded_access(p.get("access", []), p["models"])
    for run in p["runs"]:  # every run, also of a store summarised before runs recorded their access
        if (run["model"], run["deployment"]) in recorded:
            recorded[(run["model"], run["deployment"])].total_runs += 1
    out = []
    for m in p["models"]:
        r = recorded[(m["model"], m["deployment"])]
        stated = _stated(content, m["model"], m["deployment"])
        out.append((m, r, stated, disagreements(r, stated)))
    return out


def _lines(*parts: tuple[str, str | None]) -> Raw:
    """A cell of labelled lines ("recorded: …", "report.yaml: …"), escaped, paths reduced to file names."""
    return Raw("<br>".join(f"{esc(label)}: {esc(no_paths(value))}" if value else f"{esc(label)}: not stated"
                            for label, value in parts))


def _models(content: ReportContent) -> list[str]:
    rows, flagged = [], []
    for m, r, a, disagree in _access(content):
        if r.no_model:
            endpoint, version, window = r.endpoints[0], "a reference baseline (answers without a model)", "no model asked"
        elif r.runs:
            endpoint = ", ".join(r.endpoints) or "not recorded"
            answered = ", ".join(r.answered) or ("not stated by the server" if not r.in_process else None)
            version = "; ".join(x for x in (
                f"asked for {', '.join(r.served)}" if r.served else "",
                f"answered as {answered}" if answered else "",
                ", ".join(r.model_files), ", ".join(r.engines)) if x)
            window = (f"{when(r.first, seconds=True)} to {when(r.last, seconds=True)}" if r.first
                      else "no request made (the answers came from the request cache or an earlier run)")
            if r.interrupted:
                window += f" (or later: {r.interrupted} invocation(s) stopped before recording their last request)"
            if r.runs < r.total_runs:
                window += f" ({r.runs} of {r.total_runs} runs recorded it)"
        else:
            endpoint = version = window = "not recorded"
        stated_window = f"{when(a.access_window.start)} to {when(a.access_window.end)}" if a else None
        aspects = list(dict.fromkeys(aspect for aspect, _ in disagree))
        mark = (f'<br><span class="drop">disagrees with report.yaml: {esc(", ".join(aspects))} (listed below)</span>'
                if disagree else "")
        rows.append((m["model"], m["deployment"],
                     _lines(("recorded", endpoint), ("report.yaml", str(a.endpoint) if a and a.endpoint else None)),
                     _lines(("recorded", version), ("report.yaml", a.version if a else None)),
                     Raw(_lines(("recorded", window), ("report.yaml", stated_window)).html + mark),
                     m["suites"], m["n_instances"]))
        flagged += [f"{m['model']} [{m['deployment']}]: {d}" for _, d in disagree]
    out = ["<h2>Models</h2>",
           '<p class="note">Identity as the results store holds it (model and deployment names). Recorded: what the '
           "runs themselves wrote when they called each endpoint (its address without credentials or query string, "
           "the model name asked for and the one the server said answered, an in-process model's file and engine, "
           "the first and last request in UTC; answers taken from the request cache were asked for before the "
           "window). report.yaml: what the hospital states (models). Where they disagree it is marked.</p>",
           table("Models evaluated", ("Model", "Deployment", "Endpoint", "Version", "Access window", "Suites",
                                       "Instances"), rows, (False,) * 6 + (True,))]
    if flagged:
        out.append('<p class="note drop">The runs\' record and report.yaml disagree:</p><ul>'
                   + "".join(f'<li class="drop">{esc(no_paths(f))}</li>' for f in flagged) + "</ul>")
    return out


def _usage(p: dict[str, list[dict]], bench: dict[str, dict]) -> list[str]:
    per_model = [(u["model"], u["deployment"],
                  "–" if u["cost_usd"] is None else f"{u['cost_usd']:.4f} ({u['cost_basis']})",
                  "–" if u["jury_cost_usd"] is None else f"{u['jury_cost_usd']:.4f}", u["prompt_tokens"],
                  u["completion_tokens"], (u["judge_prompt_tokens"] or 0) + (u["judge_completion_tokens"] or 0),
                  num(u["inference_s"], 1), num(u["gpu_s"], 1)) for u in p["model_usage"]]
    stats: dict[tuple, dict[str, tuple]] = defaultdict(dict)
    for u in p["usage"]:
        # PostgreSQL sums a BIGINT to a NUMERIC (Decimal): numbers here are int and float whatever the backend
        stats[(u["benchmark"], u["model"], u["deployment"])][u["stat"]] = (
            None if u["count"] is None else int(u["count"]), None if u["total"] is None else float(u["total"]))
    per_cell = []
    for (b, model, dep), st in sorted(stats.items()):
        requests, runtime = st.get("inference_runtime", (None, None))
        per_cell.append((bench.get(b, {}).get("display_name") or b, model, dep,
                         requests if requests is not None else st.get("num_prompt_tokens", (None,))[0],
                         num(int_or_none(st.get("num_prompt_tokens", (None, None))[1])),
                         num(int_or_none(st.get("num_completion_tokens", (None, None))[1])),
                         num(runtime / requests if runtime is not None and requests else None),
                         num(runtime, 1)))
    return ["<h2>Cost, tokens and latency</h2>",
            '<p class="note">Cost in USD from the hospital\'s price table (its basis: API tokens, GPU or CPU time; '
            "– where no price is set, never 0); the jury's cost apart. Latency: the mean time of one request.</p>",
            table("Per model", ("Model", "Deployment", "Cost USD (basis)", "Jury cost USD", "Prompt tokens",
                                 "Completion tokens", "Judge tokens", "Inference s", "GPU s"), per_model,
                   (False, False) + (True,) * 7),
            table("Per benchmark and model", ("Benchmark", "Model", "Deployment", "Requests", "Prompt tokens",
                                               "Completion tokens", "Mean latency s", "Total s"), per_cell,
                   (False,) * 3 + (True,) * 5)]


