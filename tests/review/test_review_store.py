"""Clinician review in the data layer, on SQLite and a real PostgreSQL: blinded samples, ratings stored
with who and when, refusals for every role without the clinician grant, audit rows, and ratings that
outlive a re-summarise."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path

import pytest

from medhelm.access import AccessDenied, AccessPolicy, Principal, Role
from medhelm.access import audit
from medhelm.errors import ConfigError
from medhelm.store import open_store, review
from tests.leaderboard.helpers import run_cli
from tests.review.conftest import ACCESS_YAML, INSTANCES, JURY_BENCH, MODELS, PLANTED, write_output

import yaml


def _policy() -> AccessPolicy:
    return AccessPolicy.from_dict(yaml.safe_load(ACCESS_YAML))


def _person(groups: list[str], email: str) -> Principal:
    return _policy().principal({"sub": email, "email": email, "groups": groups})


CLEO = ("clinical-reviewers",)


@pytest.fixture(params=["sqlite", "postgres"])
def store_url(request, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return str(write_output(tmp_path / "out") / "results.sqlite")
    import psycopg

    base = request.getfixturevalue("postgres_url")
    with psycopg.connect(base, autocommit=True) as conn:  # a database of its own on the shared server
        conn.execute("DROP DATABASE IF EXISTS review_store")
        conn.execute("CREATE DATABASE review_store")
    url = base.rsplit("/", 1)[0] + "/review_store"
    write_output(tmp_path / "out", store=url)
    return url


def test_the_policy_maps_a_clinician_group_to_the_review_grant() -> None:
    cleo = _person(["clinical-reviewers"], "cleo@h.org")
    assert cleo.clinician and cleo.role == Role.NONE and cleo.label == "clinician" and cleo.blind
    both = _person(["clinical-reviewers", "medhelm-analysts"], "ana@h.org")
    assert both.clinician and both.role == Role.ANALYST and both.label == "analyst+clinician" and not both.blind
    vera = _person(["medhelm-viewers"], "vera@h.org")
    assert not vera.clinician and vera.label == "viewer"
    assert not cleo.capped(Role.VIEWER).clinician  # redacted mode: no instance text, so no review either
    with pytest.raises(ConfigError, match="default_role"):
        AccessPolicy.from_dict({"default_role": "clinician"})  # a grant, not a default level


def test_a_clinician_sees_a_blinded_sample_and_ratings_are_stored_with_who_and_when(store_url: str) -> None:
    cleo = _person(list(CLEO), "cleo@hospital.example")
    with open_store(store_url) as s:
        items = review.sample(s, cleo, "local", JURY_BENCH, n=5)
        assert len(items) == 5 and len({i.item for i in items}) == 5
        for it in items:  # everything the page may render: no model, deployment, run or instance id
            public = json.dumps([it.item, it.question, it.answer, list(it.references),
                                 [c.__dict__ for c in it.criteria]])
            assert PLANTED not in public and it.place.instance_id not in public and "local" not in it.item
            assert it.item.startswith("R-") and len(it.item) == 14
            assert [(c.name, c.min_score, c.max_score) for c in it.criteria] == [("accuracy", 1.0, 5.0)]
            assert PLANTED not in repr(it)  # the place is kept out of repr (logs, tracebacks) too
        assert {it.place.run_name.split("model=")[1].split(",")[0] for it in items} <= \
            {m.model.replace("/", "_") for m in MODELS}  # the server side still knows whose answer it is
        before = datetime.now(timezone.utc).isoformat()
        at = review.rate(s, cleo, items[0], {"accuracy": 4})
        review.rate(s, cleo, items[1], {"accuracy": 2})
        after = datetime.now(timezone.utc).isoformat()
        stored = review.stored_ratings(s, release="local")
        trail = audit.events(s, actor="cleo@hospital.example")
    assert before <= at <= after
    assert [(r.rater, r.role, r.source, r.blind, r.benchmark, r.instance_id, r.run_name, r.criterion, r.score,
             r.min_score, r.max_score) for r in stored] == [
        ("cleo@hospital.example", "clinician", "oidc", True, JURY_BENCH, it.place.instance_id, it.place.run_name,
         "accuracy", score, 1.0, 5.0) for it, score in ((items[0], 4.0), (items[1], 2.0))]
    assert stored[0].at == at and stored[0].suite == "local"
    actions = [e.action for e in reversed(trail)]
    assert actions == ["view-review", "rate", "rate"]
    shown = trail[-1]
    assert shown.role == "clinician" and set(shown.instance_ids) == {i.place.instance_id for i in items}
    assert shown.detail == f"benchmark={JURY_BENCH} n=5"
    rated = [e for e in trail if e.action == "rate"]
    assert {e.detail for e in rated} == {f"benchmark={JURY_BENCH} item={i.item} criteria=1" for i in items[:2]}
    assert {e.instance_ids for e in rated} == {(i.place.instance_id,) for i in items[:2]}


def test_one_keyed_shuffle_for_every_clinician_and_rated_items_are_not_offered_again(review_output: Path) -> None:
    cleo, dora = (_person(list(CLEO), e) for e in ("cleo@h.org", "dora@h.org"))
    with open_store(review_output / "results.sqlite") as s:
        first = review.sample(s, cleo, "local", JURY_BENCH, n=50)
        [(key,)] = s.query("SELECT value FROM meta WHERE release = '' AND key = 'review_key'")
    with open_store(review_output / "results.sqlite") as s:  # another connection (another dashboard process)
        again = review.sample(s, cleo, "local", JURY_BENCH, n=50)
        other = review.sample(s, dora, "local", JURY_BENCH, n=50)
        assert len(first) == len(MODELS) * INSTANCES and len(key) == 64
        stored_order = sorted(first, key=lambda i: (i.place.run_name, i.place.instance_id))
        assert [i.place for i in first] != [i.place for i in stored_order]  # not the store's order ...
        assert [i.place for i in again] == [i.place for i in first]  # ... stable across processes ...
        assert [i.place for i in other] == [i.place for i in first]  # ... and shared: ratings overlap
        assert [i.item for i in again] == [i.item for i in first]  # same opaque ids
        models = [i.place.run_name.split("model=")[1].split(",")[0] for i in first[:6]]
        assert len(set(models)) == 2  # the models' answers are interleaved, not in blocks
        review.rate(s, cleo, first[0], {"accuracy": 3})
        left = review.sample(s, cleo, "local", JURY_BENCH, n=50)
        dora_left = review.sample(s, dora, "local", JURY_BENCH, n=50)
    assert [i.item for i in left] == [i.item for i in first[1:]]
    assert [i.item for i in dora_left] == [i.item for i in first]  # dora has not rated it: still hers to rate


@pytest.mark.parametrize("groups", [["medhelm-viewers"], ["medhelm-analysts"], ["medhelm-admins"], ["staff"]])
def test_every_role_without_the_clinician_grant_is_refused_and_audited(review_output: Path, groups) -> None:
    cleo = _person(list(CLEO), "cleo@h.org")
    other = _person(groups, "other@h.org")
    with open_store(review_output / "results.sqlite") as s:
        item = review.sample(s, cleo, "local", JURY_BENCH, n=1)[0]
        with pytest.raises(AccessDenied, match="clinician role") as refused:
            review.sample(s, other, "local", JURY_BENCH, n=3)
        assert PLANTED not in str(refused.value)
        with pytest.raises(AccessDenied):
            review.rate(s, other, item, {"accuracy": 5})
        with pytest.raises(AccessDenied):  # redacted mode caps the clinician too
            review.sample(s, cleo.capped(Role.VIEWER), "local", JURY_BENCH)
        assert review.stored_ratings(s) == []
        denied = [e for e in audit.events(s, actor="other@h.org")]
    assert [e.action for e in denied] == ["denied", "denied"] and {e.detail for e in denied} == {"view-review", "rate"}


def test_bad_scores_write_nothing(review_output: Path) -> None:
    cleo = _person(list(CLEO), "cleo@h.org")
    with open_store(review_output / "results.sqlite") as s:
        item = review.sample(s, cleo, "local", JURY_BENCH, n=1)[0]
        for scores, message in (({"accuracy": 6}, "whole number from 1 to 5"), ({"accuracy": 2.5}, "whole number"),
                                ({"accuracy": "x"}, "not a number"), ({}, "no score for criterion 'accuracy'"),
                                ({"accuracy": 3, "fluency": 3}, "unknown criterion 'fluency'")):
            with pytest.raises(ConfigError, match=message):
                review.rate(s, cleo, item, scores)
        assert review.stored_ratings(s) == []


def test_ratings_outlive_a_re_summarise_and_the_latest_rating_counts(review_output: Path) -> None:
    cleo = _person(list(CLEO), "cleo@h.org")
    store = review_output / "results.sqlite"
    with open_store(store) as s:
        item = review.sample(s, cleo, "local", JURY_BENCH, n=1)[0]
        review.rate(s, cleo, item, {"accuracy": 2})
        review.rate(s, cleo, item, {"accuracy": 5})  # changed her mind: both rows stay, the latest counts
    code, _, err = run_cli("summarize", "--suites", "local", "-o", str(review_output), "--bootstrap", "20")
    assert code == 0, err
    with open_store(store) as s:
        assert [r.score for r in review.stored_ratings(s, latest=False)] == [2.0, 5.0]
        assert [r.score for r in review.stored_ratings(s)] == [5.0]
        assert s.query("SELECT value FROM meta WHERE release = '' AND key = 'review_schema_version'") == [("1",)]
        ratings = review.clinician_ratings(s, "local", JURY_BENCH)
        records = review.rated_records(s, "local", JURY_BENCH)
    assert [(r.run, r.instance_id, r.score) for r in ratings] == [(item.place.run_name, item.place.instance_id, 5.0)]
    assert {r.run for r in records} == {item.place.run_name} and len(records) == INSTANCES
