"""Each model's endpoint, version and access window as the runs recorded them, beside what the hospital's
``report.yaml`` states, and where the two disagree.

Recorded: per run, the results store's access columns (``schema.ACCESS_COLUMNS``, from run.json ``access``:
where and when each run asked the evaluated deployment; ``RunDir.access``). Per model and deployment they are
united here: the endpoints and served names called, the models the server said answered, an in-process
model's file and engine, and one window from the earliest first request to the latest last request.

Stated: ``report.yaml``'s ``models`` (``about.py``). A disagreement is a fact either side could explain, so it
is listed, never resolved: the stated endpoint is not one the runs called; a run asked the endpoint outside the
stated window; the server named the models it answered with and none of them names the stated version.

Failure semantics: a store without the access columns (summarised before they were kept), a run without an
access record (made before runs kept one, a HELM import) or a time without a zone is "not recorded", never
guessed and never an error. Nothing here reads an instance.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from medhelm.inference import IN_PROCESS, NO_MODEL, public_url


@dataclass
class RecordedAccess:
    """What the runs of one model and deployment recorded (``runs`` with a record; ``total_runs``: every run of it,
    counted by the caller)."""

    model: str
    deployment: str
    runs: int = 0
    total_runs: int = 0
    endpoints: list[str] = field(default_factory=list)
    served: list[str] = field(default_factory=list)
    answered: list[str] = field(default_factory=list)
    model_files: list[str] = field(default_factory=list)
    engines: list[str] = field(default_factory=list)
    first: datetime | None = None
    last: datetime | None = None
    requests: int = 0
    interrupted: int = 0

    @property
    def in_process(self) -> bool:
        return self.endpoints == [IN_PROCESS]

    @property
    def no_model(self) -> bool:
        """A reference baseline: no model was asked (nothing to state)."""
        return self.endpoints == [NO_MODEL]


def _add(values: list[str], value: Any) -> None:
    if isinstance(value, str) and value and value not in values:
        values.append(value)


def utc(value: Any) -> datetime | None:
    """A recorded time in UTC; None for none, or for a time without its zone (not a recorded time)."""
    if isinstance(value, datetime):
        moment = value
    elif isinstance(value, str) and value:
        try:
            moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            return None
    else:
        return None
    return moment.astimezone(timezone.utc) if moment.tzinfo is not None else None


def recorded_access(runs: list[dict[str, Any]], models: list[dict[str, Any]]) -> dict[tuple[str, str], RecordedAccess]:
    """Per (model, deployment) of ``models``: what ``runs`` (the report's ``access`` part) recorded."""
    out = {(m["model"], m["deployment"]): RecordedAccess(m["model"], m["deployment"]) for m in models}
    for r in runs:
        a = out.get((r["model"], r["deployment"]))
        if a is None:
            continue
        first, last = utc(r.get("first_request")), utc(r.get("last_request"))
        if not (r.get("endpoint") or first or last):
            continue
        a.runs += 1
        _add(a.endpoints, r.get("endpoint"))
        _add(a.served, r.get("served_model"))
        for name in _json_list(r.get("answered_models")):
            _add(a.answered, name)
        _add(a.model_files, r.get("model_file"))
        _add(a.engines, r.get("engine"))
        if first is not None and (a.first is None or first < a.first):
            a.first = first
        if last is not None and (a.last is None or last > a.last):
            a.last = last
        a.requests += int(r.get("access_requests") or 0)
        a.interrupted += int(r.get("access_interrupted") or 0)
    return out


def disagreements(recorded: RecordedAccess, stated: Any) -> list[tuple[str, str]]:
    """Where ``report.yaml``'s entry (``about.ModelAbout``) and the runs' record disagree: (what — endpoint,
    access window, version —, one sentence) each."""
    if stated is None or not recorded.runs or recorded.no_model:
        return []
    out = []
    endpoint = _same_url(str(stated.endpoint)) if stated.endpoint is not None else None
    called = [_same_url(e) for e in recorded.endpoints]
    if endpoint is not None and called and endpoint not in called:
        out.append(("endpoint", f"report.yaml names the endpoint {endpoint}; the runs called "
                                f"{', '.join(recorded.endpoints)}"))
    start, end = utc(stated.access_window.start), utc(stated.access_window.end)
    if recorded.first is not None and start is not None and recorded.first < start:
        out.append(("access window", f"the runs called the endpoint from "
                                     f"{recorded.first.isoformat(timespec='seconds')}, before the stated access window"))
    if recorded.last is not None and end is not None and recorded.last > end:
        out.append(("access window", f"the runs called the endpoint until "
                                     f"{recorded.last.isoformat(timespec='seconds')}, after the stated access window"))
    version = " ".join(str(stated.version).split())
    names = [*recorded.answered, *recorded.model_files, *recorded.engines]
    if version and names and not any(_names(version, n) or _names(n, version) for n in names):
        said = "the server said it answered as" if recorded.answered else "the runs used"
        out.append(("version", f"report.yaml states version '{stated.version}'; {said} {', '.join(names)}"))
    return out


def _names(text: str, part: str) -> bool:
    """``part`` (of at least 4 characters) is in ``text`` as a whole word or name (not inside a longer one),
    ignoring case: '2024-08-06' names 'gpt-4o-2024-08-06', 'm' names nothing."""
    if len(part) < 4:
        return False
    return re.search(rf"(?<![A-Za-z0-9]){re.escape(part)}(?![A-Za-z0-9])", text, flags=re.IGNORECASE) is not None


def _same_url(url: str) -> str:
    """A URL as compared: without credentials, query and a trailing slash ("in-process" stays itself)."""
    return (public_url(url) or url).rstrip("/")


def _json_list(text: Any) -> list[str]:
    try:
        value = json.loads(text) if isinstance(text, str) else []
    except ValueError:
        return []
    return [v for v in value if isinstance(v, str)] if isinstance(value, list) else []
