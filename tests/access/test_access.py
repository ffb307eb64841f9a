"""Roles from claims, the store's guarded readers, the audit trail (SQLite and PostgreSQL), `medhelm audit`,
audited exports, and `medhelm serve` refusing a non-loopback address without sign-in."""

from __future__ import annotations

import argparse
import json
import sqlite3
from pathlib import Path

import pytest
from prometheus_client import REGISTRY

from medhelm.access import AccessDenied, AccessPolicy, Principal, Role, audit
from medhelm.errors import ConfigError
from medhelm.store import open_store, read
from medhelm.store.synthetic import catalogue, default_models, write_suite
from tests.access.conftest import MARKER, plant_marker
from tests.leaderboard.browser import launch_module
from tests.leaderboard.helpers import run_cli


@pytest.fixture
def policy(access_yaml: Path) -> AccessPolicy:
    return AccessPolicy.load(access_yaml)


def _people(policy: AccessPolicy) -> dict[str, Principal]:
    return {"viewer": policy.principal({"sub": "1", "email": "v@h.org", "groups": ["medhelm-viewers"]}),
            "analyst": policy.principal({"sub": "2", "email": "a@h.org", "groups": ["staff", "medhelm-analysts"]}),
            "oncologist": policy.principal({"sub": "3", "email": "o@h.org",
                                            "groups": "medhelm-analysts oncology-team"}),
            "admin": policy.principal({"sub": "4", "email": "ad@h.org", "groups": ["medhelm-admins"]}),
            "nobody": policy.principal({"sub": "5", "groups": ["staff"]})}


def test_claims_map_to_the_highest_role_and_releases_restrict(policy):
    p = _people(policy)
    assert [p[k].role for k in ("viewer", "analyst", "oncologist", "admin", "nobody")] == \
        [Role.VIEWER, Role.ANALYST, Role.ANALYST, Role.ADMIN, Role.NONE]
    assert p["nobody"].subject == "5"  # no e-mail claim: the subject
    assert p["analyst"].may_see_release("local") and not p["analyst"].may_see_release("private-onc")
    assert p["oncologist"].may_see_release("private-onc") and p["admin"].may_see_release("private-onc")
    with pytest.raises(AccessDenied, match="analyst role"):
        p["viewer"].require_text("local")
    assert p["admin"].capped(Role.VIEWER).role == Role.VIEWER


@pytest.mark.parametrize("text,message", [
    ("roles: {superuser: [x]}\n",
     ":1: field 'roles.superuser': input should be 'none', 'viewer', 'analyst', 'admin' or 'clinician'"),
    ("roles: {viewer: [x]}\nextra: 1\n", ":2: field 'extra': unknown key (allowed: groups_claim, subject_claim, roles"),
    ("roles: {viewer: {a: 1}}\n", ":1: field 'roles.viewer': must be a list"),
    ("roles:\n  viewer: [x, [y]]\n", ":2: field 'roles.viewer[1]': must be text"),
    ("roles: [a]\n", ":1: field 'roles': must be a mapping"),
    ("default_role: root\n", ":1: field 'default_role': input should be"),
    ("releases: {r1: 5}\n", ":1: field 'releases.r1': must be a list"),
    ("roles: [\n", "invalid YAML"),
])
def test_a_bad_policy_is_one_line_naming_the_file(tmp_path, text, message):
    p = tmp_path / "access.yaml"
    p.write_text(text)
    with pytest.raises(ConfigError) as err:
        AccessPolicy.load(p)
    assert str(err.value).startswith(str(p)) and message in str(err.value) and "\n" not in str(err.value)


@pytest.fixture
def store_url(request, marked_output, tmp_path) -> str:
    """The marked release in SQLite, or copied into the scratch PostgreSQL server."""
    if request.param == "sqlite":
        return str(marked_output / "results.sqlite")
    url = request.getfixturevalue("postgres_url")
    code, _, err = run_cli("summarize", "--suites", "local", "-o", str(marked_output), "--store", url,
                           "--bootstrap", "50")
    assert code == 0, err
    return url


@pytest.mark.parametrize("store_url", ["sqlite", "postgres"], indirect=True)
def test_text_only_for_analysts_and_every_read_is_audited(store_url, policy):
    p = _people(policy)
    before = REGISTRY.get_sample_value("medhelm_audit_events_total", {"action": "view-instances", "role": "analyst"})
    with open_store(store_url) as s:
        run_id = read.runs(s, "local", read.benchmarks(s, "local")[0]["benchmark"])[0]["run_id"]
        with pytest.raises(AccessDenied) as denied:
            read.instances_page(s, run_id, principal=p["viewer"], limit=3)
        assert MARKER not in str(denied.value)
        page = read.instances_page(s, run_id, principal=p["analyst"], offset=2, limit=3)
        assert [i["instance_id"] for i in page] == ["id00002", "id00003", "id00004"]
        assert MARKER in page[0]["prompt"]  # the text itself reached the analyst
        pairs = read.paired_instances(s, run_id, run_id, principal=p["admin"], limit=2)
        assert len(pairs) == 2
        trail = audit.events(s, release="local")
    mine = {(e.actor, e.action) for e in trail}
    assert {("v@h.org", "denied"), ("a@h.org", "view-instances"), ("ad@h.org", "view-paired")} <= mine
    viewed = next(e for e in trail if e.actor == "a@h.org")
    assert viewed.run_ids == (run_id,) and viewed.instance_ids == ("id00002", "id00003", "id00004")
    assert viewed.role == "analyst" and viewed.detail == "offset=2 limit=3"
    assert MARKER not in json.dumps([e.__dict__ for e in trail])
    after = REGISTRY.get_sample_value("medhelm_audit_events_total", {"action": "view-instances", "role": "analyst"})
    assert after == (before or 0) + 1


def test_no_audit_row_no_text(marked_output, tmp_path, policy):
    """The audit table refuses writes (a trigger, as a full disk or a revoked grant would): nothing is shown."""
    db = tmp_path / "copy.sqlite"
    db.write_bytes((marked_output / "results.sqlite").read_bytes())
    with open_store(db) as s:
        audit.ensure_table(s)
    failures = REGISTRY.get_sample_value("medhelm_audit_failures_total") or 0
    with open_store(db) as s:  # opened first: a store holding a trigger of another's is refused when opened
        con = sqlite3.connect(db)
        con.execute("CREATE TRIGGER no_audit BEFORE INSERT ON audit BEGIN SELECT RAISE(ABORT, 'disk full'); END")
        con.commit()
        con.close()
        run_id = s.query("SELECT MIN(run_id) FROM runs")[0][0]
        with pytest.raises(audit.AuditError, match="instance text withheld") as err:
            read.instances_page(s, run_id, principal=_people(policy)["analyst"])
    assert MARKER not in str(err.value)
    assert REGISTRY.get_sample_value("medhelm_audit_failures_total") == failures + 1


def test_a_restricted_release_is_invisible_to_other_groups(tmp_path, policy):
    out = tmp_path / "out"
    write_suite(out, "private-onc", default_models(2), catalogue(1), 4)
    plant_marker(out, "private-onc")
    assert run_cli("summarize", "--suites", "private-onc", "-o", str(out), "--bootstrap", "20")[0] == 0
    p = _people(policy)
    with open_store(out / "results.sqlite") as s:
        run_id = s.query("SELECT MIN(run_id) FROM runs")[0][0]
        with pytest.raises(AccessDenied, match="restricted"):
            read.instances_page(s, run_id, principal=p["analyst"])
        assert read.instances_page(s, run_id, principal=p["oncologist"], limit=1)


def test_audit_cli_lists_and_filters(marked_output, policy):
    store = str(marked_output / "results.sqlite")
    with open_store(store) as s:
        run_id = s.query("SELECT MIN(run_id) FROM runs")[0][0]
        read.instances_page(s, run_id, principal=_people(policy)["analyst"], limit=1)
    code, out, err = run_cli("audit", "--store", store, "--actor", "a@h.org", "--json")
    assert code == 0, err
    rows = [json.loads(line) for line in out.splitlines()]
    assert rows and all(r["actor"] == "a@h.org" for r in rows)
    code, out, _ = run_cli("audit", "--store", store, "--run-id", str(run_id), "--since", "2000-01-01")
    assert code == 0 and "a@h.org" in out and "view-instances" in out
    assert run_cli("audit", "--store", store, "--since", "2099-01-01")[1].strip() == "no audit events match"
    code, _, err = run_cli("audit", "--store", store, "--since", "last tuesday")
    assert code == 2 and err.count("\n") == 1 and "--since" in err


def test_audit_table_escapes_control_characters_in_actor_names(marked_output, policy):
    """An actor is whatever the identity provider put in the claim: a terminal escape or a newline in it must
    not repaint the reviewer's terminal or forge a row of the table."""
    store = str(marked_output / "results.sqlite")
    forged = "eve\x1b[2K\r\nad@h.org\u202e"
    who = policy.principal({"sub": "9", "email": forged, "groups": ["medhelm-analysts"]})
    with open_store(store) as s:
        run_id = s.query("SELECT MIN(run_id) FROM runs")[0][0]
        read.instances_page(s, run_id, principal=who, limit=1)
    code, out, err = run_cli("audit", "--store", store)
    assert code == 0, err
    assert "\x1b" not in out and "\r" not in out and "\u202e" not in out
    (line,) = [row for row in out.splitlines() if row.split()[1].startswith("eve")]
    assert "eve\\x1b[2K\\r\\nad@h.org" in line  # shown escaped, on its own row
    assert not any(row.startswith("ad@h.org") for row in out.splitlines())  # no forged row


def test_exports_are_audited_and_redacted_bundles_hold_no_text(marked_output, tmp_path):
    store = str(marked_output / "results.sqlite")
    code, _, err = run_cli("export", str(tmp_path / "shared"), "--redact", "--store", store)
    assert code == 0, err
    for f in (tmp_path / "shared").iterdir():
        assert MARKER.encode() not in f.read_bytes(), f.name
    code, _, err = run_cli("export", str(tmp_path / "internal"), "--store", store)
    assert code == 0 and MARKER.encode() in (tmp_path / "internal" / "results.sqlite").read_bytes()
    with open_store(store) as s:
        actions = [e.action for e in audit.events(s, release="local") if e.source == "cli"]
    assert actions[:2] == ["export", "export-redacted"]  # newest first


def test_serve_refuses_a_public_address_without_sign_in(marked_output, tmp_path, capsys):
    from medhelm.cli import main

    store = str(marked_output / "results.sqlite")
    assert main(["serve", "--host", "0.0.0.0", "--store", store]) == 2
    err = capsys.readouterr().err
    assert "without sign-in" in err and "--insecure-no-auth" in err and err.count("\n") == 1
    assert main(["serve", "scenarios", "--host", "0.0.0.0", "--port", "0", "--metrics-port", "-1"]) == 2
    assert "without caller authorization" in capsys.readouterr().err
    launch = launch_module()
    ok = argparse.Namespace(host="0.0.0.0", insecure_no_auth=True)
    launch.check_exposure(ok, None)  # explicit: allowed
    launch.check_exposure(argparse.Namespace(host="127.0.0.1"), None)  # loopback: as simple as before
    launch.check_exposure(argparse.Namespace(host="::1"), None)


def test_sign_in_settings_never_come_from_flags(tmp_path, access_yaml):
    launch = launch_module()
    args = argparse.Namespace(oidc_issuer="https://login.example/tenant/v2.0", oidc_client_id="cid",
                              oidc_redirect_uri=None, access_policy=access_yaml, host="127.0.0.1", port=8600)
    with pytest.raises(ConfigError, match="MEDHELM_OIDC_CLIENT_SECRET or MEDHELM_OIDC_CLIENT_SECRET_FILE"):
        launch.oidc_settings(args, {})
    (tmp_path / "cs").write_text("the-client-secret\n")
    oidc = launch.oidc_settings(args, {"MEDHELM_OIDC_CLIENT_SECRET_FILE": str(tmp_path / "cs"),
                                       "MEDHELM_OIDC_COOKIE_SECRET": "c" * 32})
    assert oidc.redirect_uri == "http://127.0.0.1:8600/oauth2callback" and oidc.client_secret == "the-client-secret"
    path = launch.write_secrets(oidc)
    try:
        assert oct(path.stat().st_mode & 0o777) == "0o600" and oct(path.parent.stat().st_mode & 0o777) == "0o700"
        import tomllib

        auth = tomllib.loads(path.read_text())["auth"]
        assert auth["server_metadata_url"] == "https://login.example/tenant/v2.0/.well-known/openid-configuration"
        assert auth["client_secret"] == "the-client-secret" and auth["client_kwargs"]["scope"] == "openid email profile groups"
    finally:
        import shutil

        shutil.rmtree(path.parent)
    env = launch.environment(argparse.Namespace(store="x.sqlite", oidc_issuer="https://i", access_policy=access_yaml))
    assert env["MEDHELM_AUTH"] == "oidc" and "MEDHELM_OIDC_CLIENT_SECRET" not in env


def test_the_dashboard_data_layer_hides_restricted_releases(tmp_path, policy):
    board_data = pytest.importorskip("medhelm_dashboard.board_data")
    out = tmp_path / "out"
    for suite in ("local", "private-onc"):
        write_suite(out, suite, default_models(2), catalogue(1), 3)
        assert run_cli("summarize", "--suites", suite, "-o", str(out), "--release", suite, "--bootstrap", "10")[0] == 0
    store = str(out / "results.sqlite")
    p = _people(policy)
    assert [r for r, _ in board_data.releases(store, p["viewer"])] == ["local"]
    assert {r for r, _ in board_data.releases(store, p["oncologist"])} == {"local", "private-onc"}
    with pytest.raises(AccessDenied):
        board_data.load_release(store, "private-onc", "", p["analyst"])
    with open_store(store) as s:
        run_id = read.runs(s, "local", read.benchmarks(s, "local")[0]["benchmark"])[0]["run_id"]
    with pytest.raises(AccessDenied):  # the drill-down's reader refuses a viewer whatever the page shows
        board_data.instances(store, run_id, 0, 5, p["viewer"])
    assert len(board_data.instances(store, run_id, 0, 5, p["analyst"])) == 3


@pytest.mark.parametrize("subject", [
    "[update your password](https://evil.example/login)", "**admin** · role admin", "![x](https://evil.example/t.png)",
    "<img src=x onerror=alert(1)>", "a_b_c\\*d`code`", "$\\LaTeX$ ~~gone~~ | table |", "eve\nrole **admin**",
    "# heading", ":red[alert] :material/lock:",
])
def test_signed_in_as_shows_the_subject_as_text(subject):
    """The sidebar's "Signed in as **<subject>** · role **<role>**" (dashboard/signin.py, the subject through
    safe_text.literal), rendered by a CommonMark parser with GFM's tables and strikethrough: exactly two bold
    runs, the first holding the subject's own text; no link, image, HTML or block from the identity provider."""
    import html

    from markdown_it import MarkdownIt

    safe_text = pytest.importorskip("medhelm_dashboard.safe_text")
    source = (Path(__file__).parents[2] / "dashboard" / "signin.py").read_text()
    assert 'f"Signed in as **{literal(principal.subject)}** · role **{principal.label}**"' in source
    md = f"Signed in as **{safe_text.literal(subject)}** · role **admin**"
    rendered = MarkdownIt("commonmark").enable(["table", "strikethrough"]).render(md)
    shown = html.escape(safe_text.one_line(subject), quote=False)
    assert rendered.replace("\u2060", "") == f"<p>Signed in as <strong>{shown}</strong> · role <strong>admin</strong></p>\n"


def test_sign_out_ends_the_session_for_every_replica(tmp_path):
    """Sign-out records the session's fingerprint on the shared folder: the same cookie's claims are refused by
    any process reading it (the dashboard checks `ended` before any read); another session of the same user (a
    new sign-in: new iat and nonce) is not; markers of sessions past their expiry are cleared; a folder that
    cannot be written is one line naming it."""
    import os

    from medhelm.access import sessions

    folder = tmp_path / "volume" / ".sessions-ended"
    now = 1_800_000_000
    claims = {"iss": "https://idp.example", "sub": "u-1", "email": "a@h.org", "iat": now - 60, "nonce": "n1",
              "exp": now + 3600}
    again = {**claims, "iat": now - 5, "nonce": "n2"}
    assert not sessions.ended(folder, claims)
    sessions.end(folder, claims, now=now)
    assert sessions.ended(folder, claims) and sessions.ended(folder, dict(claims))  # any replica, same cookie
    assert not sessions.ended(folder, again)
    (marker,) = folder.iterdir()
    assert "u-1" not in marker.name and "a@h.org" not in marker.name and marker.read_bytes() == b""
    stale = {**claims, "nonce": "old", "exp": now - 3600}
    sessions.end(folder, stale, now=now)  # its own marker is already past expiry: cleared with the rest
    assert sessions.ended(folder, claims) and not sessions.ended(folder, stale)
    blocked = tmp_path / "file"
    blocked.write_text("")
    with pytest.raises(ConfigError, match="cannot record the sign-out") as err:
        sessions.end(blocked / "sub", claims)
    assert str(blocked) in str(err.value) and "\n" not in str(err.value)
    assert os.stat(folder).st_mode & 0o777 == 0o700
    source = (Path(__file__).parents[2] / "dashboard" / "signin.py").read_text()  # the dashboard's door to it
    assert "sessions.ended(_ended_folder(), claims)" in source and 'on_click=sign_out, key="signout"' in source
