"""Access fixtures: a results store whose instances carry a planted marker string, a real OIDC provider
on 127.0.0.1, and the dashboard started as `medhelm serve` starts it with sign-in on."""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from medhelm.store.synthetic import catalogue, default_models, write_suite
from tests.leaderboard.browser import launch_module, start_streamlit, stop
from tests.leaderboard.conftest import postgres_url  # noqa: F401 - the shared scratch PostgreSQL fixture
from tests.leaderboard.helpers import run_cli

# Stands for patient text: it must reach an analyst's page and nothing else.
MARKER = "ZQX-PATIENT-7731-MARKER"

ACCESS_YAML = """\
groups_claim: groups
roles:
  viewer: [medhelm-viewers]
  analyst: [medhelm-analysts]
  admin: [medhelm-admins]
default_role: none
releases:
  private-*: [oncology-team]
"""


def plant_marker(output: Path, suite: str) -> None:
    """Put MARKER into every instance's question, prompt and answer of a written suite."""
    for f in (output / "runs" / suite).glob("*/instances.jsonl"):
        text = f.read_text(encoding="utf-8")
        f.write_text(text.replace("Synthetic question", f"{MARKER} question")
                     .replace("A synthetic clinical answer", f"A {MARKER} answer"), encoding="utf-8")


@pytest.fixture(scope="session")
def marked_output(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """3 models x 2 benchmarks x 8 instances, the marker in every instance; release 'local'."""
    out = tmp_path_factory.mktemp("access_out")
    write_suite(out, "local", default_models(3), catalogue(2), 8)
    plant_marker(out, "local")
    code, _, err = run_cli("summarize", "--suites", "local", "-o", str(out), "--bootstrap", "50")
    assert code == 0, err
    return out


@pytest.fixture
def access_yaml(tmp_path: Path) -> Path:
    p = tmp_path / "access.yaml"
    p.write_text(ACCESS_YAML)
    return p


@dataclass
class App:
    url: str
    proc: subprocess.Popen
    log: Path

    def stderr(self) -> str:
        return self.log.read_text(encoding="utf-8", errors="replace")


@contextmanager
def signed_in_app(users: dict, store: Path, access_yaml: str, work: Path) -> Iterator[tuple[App, object]]:
    """The real dashboard (`streamlit run`, as `medhelm serve` starts it) with sign-in against the real test
    OIDC provider (tests/access/oidc_provider.py) knowing ``users``; yields (app, provider); stops both."""
    from tests.access.oidc_provider import Provider

    launch = launch_module()
    provider = Provider(client_id="medhelm-dashboard", client_secret="s3cret-client-" + os.urandom(8).hex(),
                        redirect_uris=[], users=users)
    issuer = provider.start()
    policy = work / "access.yaml"
    policy.write_text(access_yaml)
    (work / "client_secret").write_text(provider.client_secret)
    secret_env = {"MEDHELM_OIDC_CLIENT_SECRET_FILE": str(work / "client_secret"),
                  "MEDHELM_OIDC_COOKIE_SECRET": os.urandom(24).hex()}
    written: list[Path] = []

    def make(port: int) -> tuple[list[str], dict[str, str]]:  # the redirect URI names the port
        redirect = f"http://127.0.0.1:{port}/oauth2callback"
        provider.redirect_uris = [redirect]
        args = argparse.Namespace(store=str(store), host="127.0.0.1", port=port, release=None,
                                  redacted=False, output_path=None, oidc_issuer=issuer,
                                  oidc_client_id=provider.client_id, oidc_redirect_uri=redirect,
                                  access_policy=policy)
        written.append(launch.write_secrets(launch.oidc_settings(args, {**os.environ, **secret_env})))
        env = {**launch.environment(args), "MEDHELM_SESSIONS_ENDED": str(work / "sessions-ended")}
        return launch.command(args, written[-1]), env

    log = work / "streamlit.log"
    try:
        proc, url = start_streamlit(make, log, "streamlit with sign-in")
        try:
            yield App(url, proc, log), provider
        finally:
            stop(proc)
    finally:
        provider.stop()
        for secrets in written:
            shutil.rmtree(secrets.parent, ignore_errors=True)


@pytest.fixture(scope="module")
def oidc_app(tmp_path_factory: pytest.TempPathFactory, marked_output: Path) -> Iterator[tuple[App, object]]:
    """The real dashboard with sign-in against the real test provider; yields (app, provider)."""
    pytest.importorskip("joserfc")
    from tests.access.oidc_provider import User
    from tests.leaderboard import browser

    why = browser.missing_tools()
    if why:
        pytest.skip(why)
    users = {"vera": User("u-vera", "vera@hospital.example", "Vera Viewer", ["medhelm-viewers"]),
             "anna": User("u-anna", "anna@hospital.example", "Anna Analyst", ["medhelm-analysts", "staff"]),
             "nobody": User("u-nobody", "nobody@hospital.example", "No Body", ["staff"])}
    with signed_in_app(users, marked_output / "results.sqlite", ACCESS_YAML,
                       tmp_path_factory.mktemp("oidc_app")) as running:
        yield running
