"""Clinician review end to end: the real dashboard (`streamlit run`, st.login/Authlib) against the real
OIDC provider on 127.0.0.1, driven by headless chromium. The candidate models carry a planted name: a
clinician's session must never receive it — not in the DOM, not in any HTTP body or websocket frame."""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from medhelm.access import audit
from medhelm.store import open_store, review
from tests.access.conftest import signed_in_app
from tests.leaderboard.browser import CHROMIUM, NODE_CACHE, missing_tools
from tests.review.conftest import ACCESS_YAML, JURY_BENCH, PLANTED, write_output

pytestmark = pytest.mark.slow

FLOW = Path(__file__).with_name("review_flow.js")
QUESTION = "Synthetic question"  # instance text: it does reach the clinician (proves the capture sees text)


@pytest.fixture(scope="module")
def review_app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """(url, store): the real dashboard with sign-in against the real test provider, over a planted store."""
    pytest.importorskip("joserfc")
    from tests.access.oidc_provider import User

    why = missing_tools()
    if why:
        pytest.skip(why)
    work = tmp_path_factory.mktemp("review_app")
    output = write_output(work / "out")
    users = {"cleo": User("u-cleo", "cleo@hospital.example", "Cleo Clinician", ["clinical-reviewers"]),
             "cruz": User("u-cruz", "cruz@hospital.example", "Cruz Clinician", ["clinical-reviewers"]),
             "cora": User("u-cora", "cora@hospital.example", "Cora Clinician", ["clinical-reviewers"]),
             "vera": User("u-vera", "vera@hospital.example", "Vera Viewer", ["medhelm-viewers"])}
    with signed_in_app(users, output / "results.sqlite", ACCESS_YAML, work) as (app, _provider):
        yield app.url, output / "results.sqlite"
        assert PLANTED not in app.stderr()  # nor in the server's log


def drive(url: str, user: str, score: str = "4", **extra: object) -> dict:
    env = {**os.environ, "NODE_PATH": str(NODE_CACHE / "node_modules"), "CHROMIUM": CHROMIUM}
    opts: dict = {"url": url, "user": user, "score": score, "markers": [PLANTED, QUESTION], **extra}
    if os.environ.get("MEDHELM_SCREENSHOT_DIR"):
        opts["failShot"] = str(Path(os.environ["MEDHELM_SCREENSHOT_DIR"]) / f"review-{user}.png")
    done = subprocess.run(["node", str(FLOW), json.dumps(opts)], capture_output=True, text=True, env=env,
                          timeout=3600)
    assert done.returncode == 0, done.stderr[-800:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_a_clinician_rates_in_the_browser_and_never_receives_a_model_name(review_app) -> None:
    url, store = review_app
    started = time.time()
    r = drive(url, "cleo", score="4")
    assert r["signed_in"] and r["pages"] == ["Review", "Jury calibration"], r
    assert r["review"] == "rated" and r["item_before"] != r["item_after"] and r["calibration"] == "shown", r
    assert r["in_network"][QUESTION] and r["in_dom"][QUESTION]  # the capture does see what is sent ...
    assert not r["in_network"][PLANTED] and not r["in_dom"][PLANTED], r  # ... and no model name was
    assert r["network_bytes"] > 10_000
    with open_store(store) as s:
        [rating] = review.stored_ratings(s, release="local", benchmark=JURY_BENCH)
        trail = audit.events(s, actor="cleo@hospital.example")
    assert (rating.rater, rating.role, rating.source, rating.blind, rating.criterion, rating.score) == \
        ("cleo@hospital.example", "clinician", "oidc", True, "accuracy", 4.0)
    from datetime import datetime

    assert started - 1 <= datetime.fromisoformat(rating.at).timestamp() <= time.time()
    assert {"view-review", "rate"} <= {e.action for e in trail}
    assert PLANTED not in json.dumps([e.__dict__ for e in trail if e.action == "view-review"])


def test_a_viewer_gets_no_review_page(review_app) -> None:
    url, store = review_app
    r = drive(url, "vera")
    assert r["signed_in"] and "Review" not in r["pages"] and r["review"] == "absent", r
    assert r["pages"][:1] == ["Leaderboard"] and r["calibration"] == "shown", r
    assert r["in_network"][PLANTED]  # the leaderboard names models: the capture does see a model name
    assert not r["in_network"][QUESTION] and not r["in_dom"][QUESTION], r  # no instance text for a viewer


def test_a_review_page_that_loses_one_of_its_scripts_is_reloaded_and_rated_once(review_app) -> None:
    """The browser may fail to fetch one of Streamlit's own scripts (streamlit/streamlit#10510): a loaded CI run
    lost the sidebar's radio right after sign-in and waited out its 10-minute step. Made to happen here (the first
    fetch of the radio's chunk is reset), the flow reloads as a user would, rates one answer, and the store holds
    exactly that one rating of this clinician's."""
    url, store = review_app
    r = drive(url, "cruz", score="2", dropScript="Radio")
    assert r.get("dropped", "").startswith("Radio"), r  # the page did ask for it, and lost it once
    assert r["reloads"] >= 1, r
    assert r["signed_in"] and r["pages"] == ["Review", "Jury calibration"], r
    assert r["review"] == "rated" and r["item_before"] != r["item_after"] and r["calibration"] == "shown", r
    assert not r["in_network"][PLANTED] and not r["in_dom"][PLANTED], r
    with open_store(store) as s:
        mine = [x for x in review.stored_ratings(s, release="local", benchmark=JURY_BENCH)
                if x.rater == "cruz@hospital.example"]
    assert [(x.criterion, x.score) for x in mine] == [("accuracy", 2.0)], mine


def test_a_calibration_page_that_loses_the_grids_stylesheet_is_reloaded_and_shown(review_app) -> None:
    """The data grid's code comes with a stylesheet; when its fetch fails, Streamlit draws "Unable to preload CSS"
    where the grid would be (a loaded CI run waited out its 10-minute calibration step on such a page). A clinician's
    first grid is on Jury calibration: the stylesheet's first fetch is reset there, the flow reloads as a user would
    and the page shows its tables; the rating made before is stored once."""
    url, store = review_app
    r = drive(url, "cora", score="3", dropScript="css/DataFrame")
    assert r.get("dropped", "").startswith("DataFrame") and r["dropped"].endswith(".css"), r
    assert r["reloads"] >= 1 and r["calibration"] == "shown" and r["review"] == "rated", r
    assert not r["in_network"][PLANTED] and not r["in_dom"][PLANTED], r
    with open_store(store) as s:
        mine = [x for x in review.stored_ratings(s, release="local", benchmark=JURY_BENCH)
                if x.rater == "cora@hospital.example"]
    assert [(x.criterion, x.score) for x in mine] == [("accuracy", 3.0)], mine
