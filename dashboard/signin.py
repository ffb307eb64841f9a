"""Who is looking: the principal of this browser session, before any data is read.

Sign-in on (``MEDHELM_AUTH=oidc``): Streamlit's ``st.login`` (Authlib, authorization code + PKCE S256;
the ID token's signature, issuer, audience, nonce and expiry are checked by Authlib at sign-in) puts
the token's claims in a signed cookie; ``st.user`` reads them. We map the group claim to a role with
``access.yaml`` and, since Streamlit keeps that cookie for 30 days and does not check ``exp`` again,
treat a session whose ID token has expired as signed out. No role, expired, or not signed in: the
page shows only the sign-in screen and stops — no release, no number, no text is read.

Sign-in off (loopback, or ``--insecure-no-auth``): the local user, admin — or viewer in redacted mode.
"""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path
from typing import Any

import streamlit as st

from medhelm.access import AccessPolicy, Principal, Role, sessions
from safe_text import literal  # the subject is the provider's text: shown, never rendered


def auth_enabled() -> bool:
    return os.environ.get("MEDHELM_AUTH", "") == "oidc"


@st.cache_resource(show_spinner=False)
def _policy(path: str, stamp: float) -> AccessPolicy:  # stamp: the file's mtime, so an edit applies
    from pathlib import Path

    return AccessPolicy.load(Path(path))


def policy() -> AccessPolicy:
    path = os.environ.get("MEDHELM_ACCESS_POLICY", "")
    if not path:
        return AccessPolicy()
    return _policy(path, os.stat(path).st_mtime)


def current_principal(redacted: bool, title: str) -> Principal:
    """The session's principal, or the sign-in screen and ``st.stop()``."""
    if not auth_enabled():
        local = Principal.local(clinician=True)  # the person at the machine may review too (not blind)
        return local.capped(Role.VIEWER) if redacted else local
    user = st.user
    if not user.is_logged_in:
        _sign_in_screen(title, "Sign in with your organisation's account to see the leaderboard.")
    claims: dict[str, Any] = user.to_dict()
    exp = claims.get("exp")
    if not isinstance(exp, (int, float)) or exp <= time.time():
        _sign_in_screen(title, "Your sign-in has expired. Sign in again to continue.")
    if sessions.ended(_ended_folder(), claims):  # signed out (on any replica): this cookie is void
        _sign_in_screen(title, "You signed out. Sign in again to continue.")
    principal = policy().principal(claims)
    if principal.role == Role.NONE and not principal.clinician:
        st.title(title)
        st.error(f"Signed in as {literal(principal.subject)}, but this account has no MedHELM role. Ask your administrator "
                 "to add you to a viewer, analyst, admin or clinician group.")
        st.button("Sign out", on_click=sign_out, key="signout_norole")
        st.stop()
    return principal.capped(Role.VIEWER) if redacted else principal


def _ended_folder() -> Path:
    """Where ended sessions are recorded (medhelm.access.sessions): the shared volume, seen by every replica."""
    return Path(os.environ.get("MEDHELM_SESSIONS_ENDED") or Path(tempfile.gettempdir()) / "medhelm-sessions-ended")


def sign_out() -> None:
    """End the session on the server (every replica refuses its cookie from now on), then in the browser."""
    if st.user.is_logged_in:
        sessions.end(_ended_folder(), st.user.to_dict())
    st.logout()


def _sign_in_screen(title: str, message: str) -> None:
    st.title(title)
    st.info(message)
    st.button("Sign in", on_click=st.login, type="primary", key="signin")
    st.stop()


def sidebar_identity(principal: Principal) -> None:
    if not auth_enabled():
        return
    st.sidebar.caption(f"Signed in as **{literal(principal.subject)}** · role **{principal.label}**")
    st.sidebar.button("Sign out", on_click=sign_out, key="signout")
