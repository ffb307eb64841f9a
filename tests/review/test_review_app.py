"""The Review and Jury calibration pages under AppTest: the real app script and store, the session's user
seeded as Streamlit's sign-in would (claims with groups), the access policy of a hospital."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from medhelm.access import audit
from medhelm.store import open_store, review
from tests.conftest import DASHBOARD_ENV
from tests.review.conftest import ACCESS_YAML, INSTANCES, MODELS, PLANTED

APP = str(Path(__file__).parents[2] / "dashboard" / "app.py")


@pytest.fixture(autouse=True)
def _clean_env(dashboard_env):  # noqa: ANN202 - the dashboard's variables are put back after each test
    yield


def _app(output: Path, groups: list[str] | None, email: str = "cleo@hospital.example") -> AppTest:
    for key in DASHBOARD_ENV:
        os.environ.pop(key, None)
    os.environ["MEDHELM_STORE"] = str(output / "results.sqlite")
    at = AppTest.from_file(APP, default_timeout=60)
    if groups is not None:  # signed in through OIDC with these groups
        policy = output / "access.yaml"
        policy.write_text(ACCESS_YAML)
        os.environ.update(MEDHELM_AUTH="oidc", MEDHELM_ACCESS_POLICY=str(policy))
        at.user = {"is_logged_in": True, "sub": "u-" + email, "email": email, "groups": groups,
                   "exp": time.time() + 3600}
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def _everything(at: AppTest) -> str:
    """Every element the script sent (labels, values, options, widget ids/keys) as text."""
    out = []

    def walk(node) -> None:  # noqa: ANN001
        proto = getattr(node, "proto", None)
        if proto is not None:
            out.append(str(proto))
        for child in getattr(node, "children", {}).values():
            walk(child)

    walk(at._tree)
    return "\n".join(out)


def _pages(at: AppTest) -> list[str]:
    return next(r.options for r in at.sidebar.radio if r.key == "page")


def _score_radio(at: AppTest):  # noqa: ANN202
    return next(r for r in at.radio if (r.key or "").startswith("review_R-"))


def test_a_clinician_rates_blind_answers(review_output: Path) -> None:
    at = _app(review_output, ["clinical-reviewers"])
    assert _pages(at) == ["Review", "Jury calibration"]  # no leaderboard, benchmark or compare page
    assert at.title[0].value == "Clinician review"
    radio = _score_radio(at)
    item = radio.key.split("_")[1]
    assert radio.options == ["1", "2", "3", "4", "5"] and radio.label == "accuracy"
    shown = _everything(at)
    assert PLANTED not in shown and "model=" not in shown and "id0000" not in shown
    assert f"Item 1 of {min(10, INSTANCES * len(MODELS))} · {item}" in shown
    radio.set_value(4)
    at.button(key=f"FormSubmitter:review_form_{item}-Save ratings").click().run()
    assert not at.exception, [e.value for e in at.exception]
    assert _score_radio(at).key != radio.key  # the next item
    assert PLANTED not in _everything(at)
    with open_store(review_output / "results.sqlite") as s:
        [rating] = review.stored_ratings(s)
        trail = audit.events(s, actor="cleo@hospital.example")
    assert (rating.rater, rating.role, rating.source, rating.blind, rating.score) == \
        ("cleo@hospital.example", "clinician", "oidc", True, 4.0)
    assert {e.action for e in trail} == {"view-review", "rate"}


def test_saving_without_every_score_stores_nothing(review_output: Path) -> None:
    at = _app(review_output, ["clinical-reviewers"])
    item = _score_radio(at).key.split("_")[1]
    at.button(key=f"FormSubmitter:review_form_{item}-Save ratings").click().run()
    assert any("Score every criterion" in w.value for w in at.warning)
    with open_store(review_output / "results.sqlite") as s:
        assert review.stored_ratings(s) == []


@pytest.mark.parametrize("groups", [["medhelm-viewers"], ["medhelm-analysts"], ["medhelm-admins"]])
def test_roles_without_the_grant_get_no_review_page(review_output: Path, groups: list[str]) -> None:
    at = _app(review_output, groups, "someone@hospital.example")
    assert "Review" not in _pages(at) and "Jury calibration" in _pages(at)
    at.sidebar.radio(key="page").set_value("Jury calibration").run()
    assert not at.exception, [e.value for e in at.exception]
    assert not [r for r in at.radio if (r.key or "").startswith("review_")]
    criteria = at.dataframe[0].value
    assert criteria["Criterion"].tolist() == ["accuracy", "all criteria"]
    assert criteria["Jury vs clinicians"].tolist() == ["no ratings", "no ratings"]


def test_calibration_page_shows_jury_vs_clinicians_once_rated(review_output: Path) -> None:
    with open_store(review_output / "results.sqlite") as s:
        from medhelm.access import Principal, Role

        for email, offset in (("cleo@h.org", 0), ("dora@h.org", 1)):
            who = Principal(email, Role.NONE, clinician=True)
            for item in review.sample(s, who, "local", "mtsamples_replicate", n=50):
                review.rate(s, who, item, {"accuracy": 1 + (int(item.place.instance_id[2:]) + offset) % 5})
        expected = review.agreement(s, who, "local", "mtsamples_replicate")
    at = _app(review_output, ["clinical-reviewers"])
    at.sidebar.radio(key="page").set_value("Jury calibration").run()
    assert not at.exception, [e.value for e in at.exception]
    criteria = at.dataframe[0].value
    assert criteria["Jury vs clinicians"].tolist()[0] == str(expected.clinicians.criteria[0].jury_icc2_1)
    assert criteria["Judges vs judges"].tolist()[0] == str(expected.judges.criteria[0].icc2_1)
    judges = at.dataframe[1].value
    assert judges["Judge"].tolist() == list(expected.judges.judges)
    assert judges["ICC(2,1) vs clinicians"].tolist() == [str(j.icc2_1) for j in expected.clinicians.judges]
    assert PLANTED not in _everything(at)  # judges are named, candidate models never


def test_on_loopback_the_person_at_the_machine_may_review_not_blind(review_output: Path) -> None:
    at = _app(review_output, None)
    assert _pages(at)[:1] == ["Leaderboard"] and "Review" in _pages(at)
    at.sidebar.radio(key="page").set_value("Review").run()
    radio = _score_radio(at)
    item = radio.key.split("_")[1]
    radio.set_value(2)
    at.button(key=f"FormSubmitter:review_form_{item}-Save ratings").click().run()
    with open_store(review_output / "results.sqlite") as s:
        [rating] = review.stored_ratings(s)
    assert rating.source == "local" and rating.role == "admin+clinician" and not rating.blind


def test_answers_and_criteria_are_text_never_markup(tmp_path: Path) -> None:
    """An answer and a criterion name carrying Markdown, a Streamlit directive and HTML render as written."""
    import json as _json

    from medhelm.store.synthetic import catalogue, write_suite
    from tests.leaderboard.helpers import run_cli
    from tests.review.conftest import BENCHES

    hostile = "**bold** :red[alarm] <img src=x onerror=alert(1)> [link](http://evil.example)"
    out = tmp_path / "out"
    for run_dir in write_suite(out, "local", MODELS, catalogue(names=BENCHES), 2):
        path = run_dir / "instances.jsonl"
        recs = [_json.loads(line) for line in path.read_text().splitlines()]
        for rec in recs:
            rec["completion"]["text"] = hostile
            for j in rec["judgements"]:
                j["criterion"] = "**crit** :red[x]"
        path.write_text("".join(_json.dumps(r) + "\n" for r in recs))
    assert run_cli("summarize", "--suites", "local", "-o", str(out), "--bootstrap", "10")[0] == 0
    at = _app(out, ["clinical-reviewers"])
    assert hostile in [t.value for t in at.text]  # st.text: shown as written, never parsed
    radio = _score_radio(at)
    assert radio.label == "\\*\\*crit\\*\\* \\:red\\[x\\]"  # escaped for the Markdown label
