"""Evaluation schedules: names and dates shared by the chart's CronJobs, `medhelm k8s schedule` and the
shards a CronJob starts (`medhelm job --suite-date`).

A Kubernetes CronJob names each Job it creates ``<cronjob>-<scheduled time in minutes since the epoch>``
(the controller's ``getJobName``); the shards read their Job's name from the downward API (the pod label
``batch.kubernetes.io/job-name``), so every shard of one scheduled run — and every retry of a shard —
derives the same suite name, ``<prefix>-<date>``, from the *scheduled* time (not the start time, which
differs per pod), formatted in the schedule's time zone. A Job made by hand (``kubectl create job
--from=cronjob/...``) has no scheduled time in its name: the date of the moment it runs is used instead.

Failure semantics: a bad cron expression, time zone, date format or name is a ``ConfigError`` naming the
field; nothing here touches a file or the cluster.
"""

from __future__ import annotations

import re
from datetime import datetime, timezone

from medhelm.errors import ConfigError
from medhelm.files import plain_name

DEFAULT_DATE_FORMAT = "%Y-%m-%d"
CRONJOB_MAX = 52  # the API server's limit: the controller appends "-" and 10 digits for each Job's name
_DNS = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_MINUTES = re.compile(r"-([0-9]{7,10})$")
_CRON_FIELD = re.compile(r"^[0-9A-Za-z*/,\-?]+$")
_MACROS = {"@yearly", "@annually", "@monthly", "@weekly", "@daily", "@midnight", "@hourly"}
# 2020-01-01 .. 2100-01-01 in minutes: a trailing number outside is not a CronJob's scheduled time
_PLAUSIBLE = (26_297_280, 68_374_080)


def scheduled_time(job_name: str | None) -> datetime | None:
    """The scheduled time (UTC) a CronJob encoded in its Job's name, or None for a Job made otherwise."""
    m = _MINUTES.search(job_name or "")
    if not m or not _PLAUSIBLE[0] <= int(m.group(1)) <= _PLAUSIBLE[1]:
        return None
    return datetime.fromtimestamp(int(m.group(1)) * 60, tz=timezone.utc)


def zone(name: str | None, *, field: str = "--timezone"):
    """A ``zoneinfo`` zone (UTC for None/empty); the IANA database comes from the system or the ``tzdata``
    package (slim images have no /usr/share/zoneinfo)."""
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

    if not name:
        return timezone.utc
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise ConfigError(f"unknown time zone '{name[:60]}' (an IANA name such as Europe/Berlin)",
                          field=field) from None


def dated_suite(prefix: str, when: datetime, *, tz: str | None = None,
                date_format: str = DEFAULT_DATE_FORMAT) -> str:
    """``<prefix>-<when formatted in tz>``: the suite (and release) a scheduled run writes."""
    check_date_format(date_format)
    return plain_name(f"{prefix}-{when.astimezone(zone(tz)).strftime(date_format)}", what="--suite (dated)")


def check_date_format(date_format: str) -> str:
    stamp = datetime(2031, 12, 24, 23, 59, tzinfo=timezone.utc).strftime(date_format)
    if "%" not in date_format or not re.fullmatch(r"[A-Za-z0-9_.+-]{1,40}", stamp):
        raise ConfigError(f"date format '{date_format[:40]}' must make a plain name (letters, digits, _ . + -), "
                          f"e.g. %Y-%m-%d or %Y-%m-%d-%H%M", field="--date-format")
    return date_format


def check_cron(expr: str, *, field: str = "--schedule") -> str:
    """Five cron fields or a macro (@daily ...), as the CronJob controller accepts; the time zone goes in
    ``timeZone``, never in the expression (``TZ=`` / ``CRON_TZ=`` are refused by the API server)."""
    text = (expr or "").strip()
    if text in _MACROS:
        return text
    parts = text.split()
    if len(parts) != 5 or not all(_CRON_FIELD.match(p) for p in parts):
        raise ConfigError(f"schedule '{text[:60]}' is not a cron expression (5 fields: minute hour day-of-month "
                          f"month day-of-week, e.g. '0 2 * * *'; the time zone goes in --timezone)", field=field)
    return text


def cronjob_name(fullname: str, name: str) -> str:
    """``<fullname>-cron-<name>``: the CronJob of schedule ``name`` (the chart and the CLI use the same)."""
    if not _DNS.match(name or ""):
        raise ConfigError(f"schedule name '{(name or '')[:60]}' must be lowercase letters, digits and '-'",
                          field="--name")
    full = f"{fullname}-cron-{name}"
    if len(full) > CRONJOB_MAX:
        raise ConfigError(f"CronJob name '{full}' is longer than {CRONJOB_MAX} characters; use a shorter schedule "
                          f"name", field="--name")
    return full
