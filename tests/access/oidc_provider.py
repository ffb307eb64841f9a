"""A real OpenID Connect provider on 127.0.0.1 for the sign-in tests (not a mock of Streamlit or Authlib:
the dashboard talks to it over HTTP exactly as to Entra ID, Okta or Keycloak).

Discovery document, JWKS, the authorization endpoint (a login form: the test types a user name), the
token endpoint (authorization code, client_secret_basic/post, PKCE S256 enforced, one-time codes) and
RS256 ID tokens signed with joserfc (Authlib's JOSE library, which it depends on) carrying ``groups``, ``email``, ``nonce``. ``mode`` makes it
misbehave on purpose: ``forged`` signs with a key that is not in its JWKS, ``expired`` issues a token
that expired an hour ago, ``short`` one that expires ``short_s`` seconds after sign-in.
"""

from __future__ import annotations

import base64
import hashlib
import html
import json
import secrets
import threading
import time
import urllib.parse
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from joserfc import jwt
from joserfc.jwk import RSAKey


# An authorization code is exchanged within seconds; Entra ID gives it 10 minutes. A starved test machine can
# take longer than a minute between the provider's redirect and Streamlit's token request, so the code lives
# as long as Entra's: its expiry is not what these tests test.
CODE_LIFETIME_S = 600


@dataclass
class User:
    sub: str
    email: str
    name: str
    groups: list[str]


@dataclass
class Provider:
    client_id: str
    client_secret: str
    redirect_uris: list[str]
    users: dict[str, User]
    mode: str = "normal"  # normal | forged | expired | short
    short_s: float = 4.0
    issued: list[dict] = field(default_factory=list)  # the ID tokens' claims, in order
    pkce_checked: int = 0

    def __post_init__(self) -> None:
        self.kid = "k1"
        self.key = RSAKey.generate_key(2048, parameters={"kid": self.kid})
        self.rogue = RSAKey.generate_key(2048, parameters={"kid": self.kid})  # same kid, not published
        self.codes: dict[str, dict] = {}
        self.lock = threading.Lock()
        self.server: ThreadingHTTPServer | None = None

    # --- lifecycle -----------------------------------------------------------------------------
    def start(self) -> str:
        provider = self

        class Handler(_Handler):
            p = provider

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self.issuer

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()

    @property
    def issuer(self) -> str:
        assert self.server is not None
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    # --- protocol ------------------------------------------------------------------------------
    def discovery(self) -> dict:
        i = self.issuer
        return {"issuer": i, "authorization_endpoint": f"{i}/authorize", "token_endpoint": f"{i}/token",
                "jwks_uri": f"{i}/jwks", "response_types_supported": ["code"],
                "subject_types_supported": ["public"], "id_token_signing_alg_values_supported": ["RS256"],
                "scopes_supported": ["openid", "email", "profile", "groups"], "grant_types_supported": ["authorization_code"],
                "token_endpoint_auth_methods_supported": ["client_secret_basic", "client_secret_post"],
                "code_challenge_methods_supported": ["S256"], "claims_supported": ["sub", "email", "name", "groups"]}

    def jwks(self) -> dict:
        return {"keys": [{**self.key.as_dict(private=False), "kid": self.kid, "use": "sig", "alg": "RS256"}]}

    def id_token(self, user: User, nonce: str | None) -> str:
        now = int(time.time())
        exp = {"expired": now - 3600, "short": now + int(self.short_s)}.get(self.mode, now + 3600)
        claims = {"iss": self.issuer, "sub": user.sub, "aud": self.client_id, "iat": now if self.mode != "expired"
                  else now - 7200, "exp": exp, "email": user.email, "name": user.name, "groups": user.groups}
        if nonce:
            claims["nonce"] = nonce
        self.issued.append(claims)
        key = self.rogue if self.mode == "forged" else self.key
        return jwt.encode({"alg": "RS256", "kid": self.kid}, claims, key)


class _Handler(BaseHTTPRequestHandler):
    p: Provider

    def log_message(self, *args: object) -> None:  # quiet
        return

    def _send(self, status: int, body: bytes | str, ctype: str = "application/json",
              headers: dict[str, str] | None = None) -> None:
        data = body.encode() if isinstance(body, str) else body
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Cache-Control", "no-store")
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)

    def _json(self, status: int, obj: dict) -> None:
        self._send(status, json.dumps(obj))

    def do_GET(self) -> None:  # noqa: N802
        url = urllib.parse.urlsplit(self.path)
        q = dict(urllib.parse.parse_qsl(url.query))
        if url.path == "/.well-known/openid-configuration":
            return self._json(200, self.p.discovery())
        if url.path == "/jwks":
            return self._json(200, self.p.jwks())
        if url.path == "/authorize":
            error = self._check_authorize(q)
            if error:
                return self._send(400, f"<h1>Bad request</h1><p>{html.escape(error)}</p>", "text/html")
            hidden = "".join(f'<input type="hidden" name="{html.escape(k)}" value="{html.escape(v)}">'
                             for k, v in q.items())
            return self._send(200, f"""<!doctype html><html><head><title>Test identity provider</title></head>
<body><h1>Test identity provider</h1><form method="post" action="/authorize">{hidden}
<label>User name <input name="username" id="username"></label> <button type="submit" id="login">Log in</button>
</form></body></html>""", "text/html")
        return self._send(404, "not found", "text/plain")

    def _check_authorize(self, q: dict) -> str | None:
        if q.get("client_id") != self.p.client_id:
            return "unknown client"
        if q.get("redirect_uri") not in self.p.redirect_uris:
            return "redirect_uri not registered"
        if q.get("response_type") != "code" or "openid" not in q.get("scope", "").split():
            return "only the authorization code flow with scope openid"
        if q.get("code_challenge_method") != "S256" or not q.get("code_challenge"):
            return "PKCE (S256) is required"
        return None

    def _form(self) -> dict:
        length = int(self.headers.get("Content-Length") or 0)
        return dict(urllib.parse.parse_qsl(self.rfile.read(length).decode()))

    def do_POST(self) -> None:  # noqa: N802
        url = urllib.parse.urlsplit(self.path)
        form = self._form()
        if url.path == "/authorize":
            error = self._check_authorize(form)
            user = self.p.users.get(form.get("username", ""))
            if error or user is None:
                return self._send(401 if not error else 400, "<h1>Login failed</h1>", "text/html")
            code = secrets.token_urlsafe(24)
            with self.p.lock:
                self.p.codes[code] = {"user": user, "redirect_uri": form["redirect_uri"], "nonce": form.get("nonce"),
                                      "challenge": form["code_challenge"], "expires": time.time() + CODE_LIFETIME_S}
            query = urllib.parse.urlencode({"code": code, **({"state": form["state"]} if "state" in form else {})})
            return self._send(302, b"", "text/plain", {"Location": f"{form['redirect_uri']}?{query}"})
        if url.path == "/token":
            return self._token(form)
        return self._send(404, "not found", "text/plain")

    def _token(self, form: dict) -> None:
        cid, secret = form.get("client_id"), form.get("client_secret")
        auth = self.headers.get("Authorization", "")
        if auth.startswith("Basic "):
            cid, _, secret = base64.b64decode(auth[6:]).decode().partition(":")
            cid, secret = urllib.parse.unquote(cid), urllib.parse.unquote(secret)
        if cid != self.p.client_id or secret != self.p.client_secret:
            return self._json(401, {"error": "invalid_client"})
        if form.get("grant_type") != "authorization_code":
            return self._json(400, {"error": "unsupported_grant_type"})
        with self.p.lock:
            grant = self.p.codes.pop(form.get("code", ""), None)  # one use only
        if grant is None or grant["expires"] < time.time() or grant["redirect_uri"] != form.get("redirect_uri"):
            return self._json(400, {"error": "invalid_grant"})
        verifier = form.get("code_verifier", "")
        challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()
        if not verifier or challenge != grant["challenge"]:
            return self._json(400, {"error": "invalid_grant", "error_description": "PKCE verification failed"})
        self.p.pkce_checked += 1
        return self._json(200, {"access_token": secrets.token_urlsafe(24), "token_type": "Bearer", "expires_in": 3600,
                                "scope": "openid email profile", "id_token": self.p.id_token(grant["user"], grant["nonce"])})
