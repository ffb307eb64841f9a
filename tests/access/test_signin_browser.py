"""Sign-in end to end: the real dashboard (`streamlit run`, st.login/Authlib) against a real OIDC provider on
127.0.0.1, driven by headless chromium. A marker planted in every instance stands for patient text."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from medhelm.access import audit
from medhelm.store import open_store
from tests.access.conftest import MARKER
from tests.leaderboard.browser import CHROMIUM, NODE_CACHE

pytestmark = pytest.mark.slow

FLOW = Path(__file__).with_name("signin_flow.js")
MODEL = "org/model-00"  # a leaderboard row: proves data did reach a signed-in page


def drive(url: str, user: str = "", **opts: object) -> dict:
    env = {**os.environ, "NODE_PATH": str(NODE_CACHE / "node_modules"), "CHROMIUM": CHROMIUM}
    if os.environ.get("MEDHELM_SCREENSHOT_DIR"):  # a picture of the page when a step fails
        opts = {**opts, "failShot": str(Path(os.environ["MEDHELM_SCREENSHOT_DIR"]) / f"signin-{user or 'anon'}.png")}
    done = subprocess.run(["node", str(FLOW), json.dumps({"url": url, "user": user, "markers": [MARKER, MODEL],
                                                          **opts})],
                          capture_output=True, text=True, env=env, timeout=3600)
    assert done.returncode == 0, done.stderr[-800:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def _audit_rows(store: Path, actor: str) -> list[audit.Event]:
    with open_store(store) as s:
        return audit.events(s, actor=actor)


def test_unauthenticated_gets_the_login_page_and_never_data(oidc_app):
    app, provider = oidc_app
    r = drive(app.url)
    assert r["login_page"] and not r["signed_in"], r
    assert not any(r["in_network"].values()) and not any(r["in_dom"].values()), r
    assert r["network_bytes"] > 10_000  # the app itself did load


def test_viewer_sees_the_leaderboard_but_never_instance_text(oidc_app, marked_output):
    app, provider = oidc_app
    provider.mode = "normal"
    r = drive(app.url, "vera")
    assert r["login_page"] and r["signed_in"], r
    assert r["in_network"][MODEL]  # the leaderboard's data arrived ...
    assert r["drilldown"] == "refused", r  # ... the drill-down did not
    assert not r["in_network"][MARKER] and not r["in_dom"][MARKER], r
    assert provider.pkce_checked >= 1 and provider.issued[-1]["groups"] == ["medhelm-viewers"]
    assert not [e for e in _audit_rows(marked_output / "results.sqlite", "vera@hospital.example")
                if e.action.startswith("view")]


def test_analyst_drills_down_and_is_audited(oidc_app, marked_output):
    app, provider = oidc_app
    provider.mode = "normal"
    r = drive(app.url, "anna")
    assert r["signed_in"] and r["drilldown"] == "shown", r
    assert r["in_dom"][MARKER] and r["in_network"][MARKER]  # the capture sees text when text is sent
    rows = [e for e in _audit_rows(marked_output / "results.sqlite", "anna@hospital.example")
            if e.action == "view-instances"]
    assert rows and rows[0].role == "analyst" and rows[0].source == "oidc" and rows[0].release == "local"
    assert rows[0].run_ids and rows[0].instance_ids[0] == "id00000"
    assert MARKER not in json.dumps([e.__dict__ for e in rows])  # ids, never text
    assert MARKER not in app.stderr()  # nor in the server's log


@pytest.mark.parametrize("mode", ["forged", "expired"])
def test_forged_or_expired_id_token_is_refused(oidc_app, mode):
    app, provider = oidc_app
    provider.mode = mode
    try:
        r = drive(app.url, "anna")
    finally:
        provider.mode = "normal"
    assert provider.issued[-1]["email"] == "anna@hospital.example"  # the provider did issue the bad token
    assert not r["signed_in"] and r["drilldown"] == "none", r
    assert not r["in_network"][MARKER] and not r["in_network"][MODEL], r


def test_forged_session_cookie_is_refused(oidc_app):
    app, _ = oidc_app
    r = drive(app.url, forgeCookie=True)
    assert r["login_page"] and not r["signed_in"], r
    assert not any(r["in_network"].values()), r


def test_a_session_ends_when_its_id_token_expires(oidc_app):
    """A session whose ID token expires gets the expired screen on its next page. The token lives 20 s; when
    signing in took longer than that (a starved machine), the first page is rightly already expired and proves
    nothing about a session ending, so the sign-in is repeated with a token living twice as long."""
    app, provider = oidc_app
    provider.mode = "short"
    try:
        for lifetime in (20, 40, 80, 160, 320):
            provider.short_s = lifetime
            r = drive(app.url, "vera", expiresWithinS=lifetime)  # reloads once that much has passed
            if not r["expired_at_sign_in"]:
                break
    finally:
        provider.mode = "normal"
    assert r["signed_in"] and r["expired_screen"] is True, r


def test_signed_in_without_a_role_sees_nothing(oidc_app):
    app, provider = oidc_app
    r = drive(app.url, "nobody")
    assert not r["signed_in"] and any("no MedHELM role" in t for t in r["texts"]), r
    assert not any(r["in_network"].values()), r


def test_sign_out_ends_the_session_for_a_copied_cookie_too(oidc_app):
    """Sign in, copy the session's cookies, sign out in the browser: the copy, replayed in a new browser context,
    gets the sign-in screen and no data (the server refuses the session), where the same copy made before the
    sign-out showed the leaderboard (so the refusal is the sign-out's doing)."""
    app, provider = oidc_app
    provider.mode = "normal"
    r = drive(app.url, "anna", signOutReplay=True)
    assert r["signed_in"] and "_streamlit_user" in r["copied_cookies"], r
    before, after = r["replay_before"], r["replay_after"]
    assert before["signed_in"] and before["in_network"][MODEL], r  # the copy works while the session lives
    assert r["signed_out_screen"], r
    assert after["login_page"] and not after["signed_in"], r
    assert any("You signed out" in t for t in after["texts"]), r
    assert not any(after["in_network"].values()), r  # not a leaderboard row, not an instance's text


def test_a_page_that_loses_one_of_its_scripts_is_reloaded_as_a_user_would(oidc_app):
    """Streamlit fetches a widget's code when it first draws one; a fetch that fails leaves that widget undrawn
    for good (streamlit/streamlit#10510; a loaded CI run lost the sidebar's multiselect at sign-in and waited out
    its 10-minute step). Made to happen here (the first fetch of the chunk is reset), the flow notices the lost
    script, reloads as a user would, and signs in and drills down as if nothing had happened."""
    app, provider = oidc_app
    provider.mode = "normal"
    r = drive(app.url, "anna", dropScript="Multiselect")
    assert r.get("dropped", "").startswith("Multiselect"), r  # the page did ask for it, and lost it once
    assert r["reloads"] >= 1, r
    assert r["signed_in"] and r["drilldown"] == "shown" and r["in_dom"][MODEL], r
