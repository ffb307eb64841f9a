"""What only the hospital can say about an evaluation, in a file it writes (``report.yaml``; the template is
``examples/report.yaml``), checked here and shown on the committee's page (``render``): the intended use and
what is out of scope, known limitations and risks, the data (source, time window, population, missing labels),
per benchmark what it measures and its reference standard, per model its endpoint, version and access window,
and the sign-off (who ran, reviewed and approved the evaluation, and when).

The file is part of what is signed: its text is shown in the report's body, and its SHA-256 is in the manifest
(``about_sha256``), so a sign-off cannot be edited or moved to another report without breaking the signature.

Every time is a date and time with its time zone (``2026-11-20T08:00:00+01:00``): a committee reading the
report in another zone, or months later, must not have to guess. Sign-off dates may be plain dates. Endpoints
are URLs without a user or password (the report is shared; a credential in a URL would be published).

Failure semantics: a file that does not fit the schema is one ``ConfigError`` naming the file, the line and the
field (``schemas.check``); a model or benchmark named here that the release does not hold is one line naming
the file and the field (``check_names``), checked before anything is written.
"""

from __future__ import annotations

import hashlib
import urllib.parse
from dataclasses import dataclass
from datetime import date, datetime
from pathlib import Path
from typing import Annotated, Any

from pydantic import AfterValidator, BeforeValidator, Field

from medhelm.errors import ConfigError
from medhelm.files import load_yaml_doc
from medhelm.schemas import LongText, NameText, Strict, Text, Url, check


def _aware(value: Any) -> Any:
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value.strip())
        except ValueError:
            raise ValueError("must be a date and time with a time zone, e.g. 2026-11-20T08:00:00+01:00") from None
    if not isinstance(value, datetime) or value.tzinfo is None or value.utcoffset() is None:
        raise ValueError("must be a date and time with a time zone, e.g. 2026-11-20T08:00:00+01:00 (or ...Z)")
    return value


def _day(value: Any) -> Any:
    if isinstance(value, str):
        try:
            value = date.fromisoformat(value.strip())
        except ValueError:
            raise ValueError("must be a date, e.g. 2026-11-22") from None
    if isinstance(value, datetime):
        return _aware(value)
    if not isinstance(value, date):
        raise ValueError("must be a date, e.g. 2026-11-22")
    return value


def _no_credentials(value: str) -> str:
    if urllib.parse.urlsplit(value).username is not None:
        raise ValueError("must not hold a user or password (the report is shared)")
    return value


Aware = Annotated[Any, BeforeValidator(_aware)]
Day = Annotated[Any, BeforeValidator(_day)]
Endpoint = Annotated[Url, AfterValidator(_no_credentials)]
Items = Annotated[list[Annotated[str, Field(min_length=1, max_length=4000)]], Field(max_length=100)]


class Window(Strict):
    start: Aware = Field(alias="from")
    end: Aware = Field(alias="to")


class DayWindow(Strict):
    start: Day = Field(alias="from")
    end: Day = Field(alias="to")


class Data(Strict):
    source: Text
    time_window: DayWindow | None = None
    population: LongText | None = None
    missing_labels: LongText | None = None
    notes: LongText | None = None


class BenchmarkAbout(Strict):
    measures: LongText | None = None
    reference_standard: LongText | None = None


class ModelAbout(Strict):
    model: NameText
    deployment: NameText | None = None
    endpoint: Endpoint | None = None
    version: Text
    access_window: Window


class Person(Strict):
    name: Text
    role: Text | None = None
    date: Day


class SignOff(Strict):
    ran_by: Person
    reviewed_by: Person | None = None
    approved_by: Person | None = None


class About(Strict):
    organisation: Text | None = None
    title: Text | None = None
    intended_use: LongText
    out_of_scope: LongText | None = None
    limitations: Items
    risks: Items
    data: Data
    benchmarks: dict[NameText, BenchmarkAbout] = Field(default_factory=dict)
    models: list[ModelAbout] = Field(default_factory=list)
    sign_off: SignOff


@dataclass(frozen=True)
class AboutFile:
    about: About
    sha256: str
    name: str  # the file's name (never its folder: no absolute path on the page)
    lines: dict[tuple, int | None]  # (section, key) -> line, for check_names


def load(path: Path) -> AboutFile:
    doc = load_yaml_doc(path)
    if not isinstance(doc.data, dict):
        raise ConfigError("expected a mapping with intended_use, limitations, risks, data and sign_off "
                          "(the template: examples/report.yaml)", path=path)
    about = check(About, doc.data, path=path, doc=doc)
    raw = path.read_bytes()
    lines = {("benchmarks", name): doc.line("benchmarks", name) for name in about.benchmarks}
    lines |= {("models", i): doc.line("models", i) for i in range(len(about.models))}
    return AboutFile(about, hashlib.sha256(raw).hexdigest(), path.name, lines)


def check_names(about: AboutFile, path: Path, benchmarks: set[str], models: set[tuple[str, str]]) -> None:
    """Every benchmark and model the file describes is in the release (a typo would hide a description)."""
    for name in about.about.benchmarks:
        if name not in benchmarks:
            raise ConfigError(f"benchmark '{name[:64]}' is not in the release (it has: "
                              f"{', '.join(sorted(benchmarks))[:300]})", path=path,
                              line=about.lines.get(("benchmarks", name)), field=f"benchmarks.{name[:64]}")
    for i, m in enumerate(about.about.models):
        if not any(m.model == model and (m.deployment is None or m.deployment == dep) for model, dep in models):
            held = ", ".join(f"{a} [{b}]" for a, b in sorted(models))[:300]
            raise ConfigError(f"model '{m.model[:64]}'{f' [{m.deployment[:64]}]' if m.deployment else ''} is not in "
                              f"the release (it has: {held})", path=path, line=about.lines.get(("models", i)),
                              field=f"models[{i}]")
