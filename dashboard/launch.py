"""Start the leaderboard: ``streamlit run app.py`` headless on 127.0.0.1, no usage statistics.

The app's settings travel as environment variables (``MEDHELM_STORE``, ``MEDHELM_RELEASE``,
``MEDHELM_REDACTED``, ``MEDHELM_AUTH``, ``MEDHELM_ACCESS_POLICY``), which Streamlit passes to the script
untouched and tests can set directly.

Sign-in (OpenID Connect, Streamlit's own ``st.login``; see docs/access.md): issuer, client id and
redirect URI come from flags or ``MEDHELM_OIDC_*``; the client secret and the cookie secret only from
the environment or files (a mounted Kubernetes Secret), never from a flag or a log line. They are
written to a private ``secrets.toml`` (0600, in a 0700 temp folder, removed on exit) that Streamlit
reads via ``--secrets.files``. Serving on a non-loopback address without sign-in is refused unless
``--insecure-no-auth`` says so explicitly. Failure semantics: every missing or bad setting is one
``ConfigError`` line before Streamlit starts. Streamlit runs as a child that never outlives ``medhelm
serve``: stop signals are passed on, and on Linux the kernel stops it if the parent is killed outright.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

APP = Path(__file__).with_name("app.py")
CSP = Path(__file__).with_name("csp.py")  # streamlit run, with a Content-Security-Policy on every response
DEFAULT_PORT = 8501


def add_dashboard_arguments(p: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    """The dashboard's own flags (``medhelm serve`` adds --host, --port and --output-path itself)."""
    from medhelm.files import env_secret

    p.add_argument("--store", default=env_secret("MEDHELM_STORE_URL"),
                   help="results store: sqlite:///path or postgresql://... (default: env MEDHELM_STORE_URL, "
                        "so a password never sits in argv; else <output-path>/results.sqlite)")
    p.add_argument("--release", "--suite", dest="release",
                   help="release to open first; --suite S opens what `medhelm summarize --suite S` built, as "
                        "helm-server --suite does (default: the latest summarised)")
    p.add_argument("--create-store", action="store_true",
                   help="create an empty results store when there is none yet (a deployment whose leaderboard "
                        "comes up before the first `medhelm summarize`)")
    p.add_argument("--redacted", action="store_true",
                   help="aggregates only: never show instance text (for sharing outside the organisation)")
    env = os.environ.get
    p.add_argument("--oidc-issuer", default=env("MEDHELM_OIDC_ISSUER"),
                   help="sign in with this OpenID Connect issuer (URL; env MEDHELM_OIDC_ISSUER); the client "
                        "secret and cookie secret come from MEDHELM_OIDC_CLIENT_SECRET[_FILE] and "
                        "MEDHELM_OIDC_COOKIE_SECRET[_FILE]")
    p.add_argument("--oidc-client-id", default=env("MEDHELM_OIDC_CLIENT_ID"),
                   help="the dashboard's client id at the issuer (env MEDHELM_OIDC_CLIENT_ID)")
    p.add_argument("--oidc-redirect-uri", default=env("MEDHELM_OIDC_REDIRECT_URI"),
                   help="this dashboard's public URL + /oauth2callback (env MEDHELM_OIDC_REDIRECT_URI; "
                        "default http://HOST:PORT/oauth2callback)")
    p.add_argument("--access-policy", type=Path, default=Path(env("MEDHELM_ACCESS_POLICY"))
                   if env("MEDHELM_ACCESS_POLICY") else None,
                   help="access.yaml: identity-provider groups -> viewer/analyst/admin, restricted releases "
                        "(env MEDHELM_ACCESS_POLICY; needed with --oidc-issuer)")


SECRET_VARS = ("MEDHELM_OIDC_CLIENT_SECRET", "MEDHELM_OIDC_COOKIE_SECRET")
# `groups` asks the provider for the group claim access.yaml maps to roles (Keycloak, Okta, Dex, Authentik);
# Entra ID sends groups from its token configuration instead and refuses the scope: set MEDHELM_OIDC_SCOPES there.
DEFAULT_SCOPES = "openid email profile groups"


@dataclass(frozen=True)
class Oidc:
    """Sign-in settings; ``secrets_toml()`` is what Streamlit's ``st.login`` reads (``[auth]``)."""

    issuer: str
    client_id: str
    redirect_uri: str
    client_secret: str
    cookie_secret: str
    scopes: str = DEFAULT_SCOPES

    def secrets_toml(self) -> str:
        metadata = self.issuer.rstrip("/") + "/.well-known/openid-configuration"
        q = json.dumps  # a JSON string is a valid TOML basic string
        return (f"[auth]\nredirect_uri = {q(self.redirect_uri)}\ncookie_secret = {q(self.cookie_secret)}\n"
                f"client_id = {q(self.client_id)}\nclient_secret = {q(self.client_secret)}\n"
                f"server_metadata_url = {q(metadata)}\n\n[auth.client_kwargs]\nscope = {q(self.scopes)}\n")


def oidc_settings(args: argparse.Namespace, env: dict[str, str] | None = None) -> Oidc | None:
    """The sign-in settings from flags and the environment; None when no issuer is configured."""
    from medhelm.errors import ConfigError

    env = dict(os.environ if env is None else env)
    issuer = getattr(args, "oidc_issuer", None)
    if not issuer:
        return None
    if not issuer.startswith(("https://", "http://")):
        raise ConfigError("--oidc-issuer must be an http(s) URL", field="--oidc-issuer")
    client_id = getattr(args, "oidc_client_id", None)
    if not client_id:
        raise ConfigError("sign-in needs --oidc-client-id (or MEDHELM_OIDC_CLIENT_ID)")
    from medhelm.access.exposure import is_loopback

    host = getattr(args, "host", None) or "127.0.0.1"
    redirect = getattr(args, "oidc_redirect_uri", None)
    if not redirect and not is_loopback(host):
        raise ConfigError("sign-in on a non-loopback address needs --oidc-redirect-uri "
                          "(the URL users reach the dashboard at + /oauth2callback)")
    redirect = redirect or f"http://{_url_host(host)}:{getattr(args, 'port', None) or DEFAULT_PORT}/oauth2callback"
    if getattr(args, "access_policy", None) is None:
        raise ConfigError("sign-in needs --access-policy access.yaml (which groups are viewer/analyst/admin)")
    return Oidc(issuer, client_id, redirect, _secret(env, "MEDHELM_OIDC_CLIENT_SECRET"),
                _secret(env, "MEDHELM_OIDC_COOKIE_SECRET"), env.get("MEDHELM_OIDC_SCOPES") or DEFAULT_SCOPES)


def _secret(env: dict[str, str], name: str) -> str:
    from medhelm.errors import ConfigError

    from medhelm.scrub import register

    if env.get(name):
        register(env[name])  # held: scrubbed from every text this process emits
        return env[name]
    path = env.get(f"{name}_FILE")
    if path:
        try:
            value = Path(path).read_text(encoding="utf-8").strip()
        except OSError as err:
            raise ConfigError(f"cannot read {name}_FILE ({err.strerror})", path=path) from None
        if value:
            register(value)
            return value
    raise ConfigError(f"sign-in needs {name} or {name}_FILE (from a Kubernetes Secret; never a flag)")


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host and not host.startswith("[") else host


def environment(args: argparse.Namespace) -> dict[str, str]:
    store = getattr(args, "store", None) or str(Path(getattr(args, "output_path", None) or "benchmark_output")
                                               / "results.sqlite")
    env = {k: v for k, v in os.environ.items() if k not in SECRET_VARS}  # the app never needs them
    env["MEDHELM_STORE"] = store
    # sign-out is recorded here (medhelm.access.sessions): beside the results, on the volume replicas share
    env.setdefault("MEDHELM_SESSIONS_ENDED",
                   str(Path(getattr(args, "output_path", None) or "benchmark_output") / ".sessions-ended"))
    if getattr(args, "oidc_issuer", None):
        env["MEDHELM_AUTH"] = "oidc"
    if getattr(args, "access_policy", None) is not None:
        env["MEDHELM_ACCESS_POLICY"] = str(Path(args.access_policy).resolve())
    if (getattr(args, "metrics_port", None) or -1) > 0:  # audit counters (docs/access.md)
        env["MEDHELM_METRICS_PORT"] = str(args.metrics_port)
        env["MEDHELM_METRICS_ADDR"] = getattr(args, "host", None) or "127.0.0.1"
    if getattr(args, "release", None):
        env["MEDHELM_RELEASE"] = args.release
    if getattr(args, "redacted", False):
        env["MEDHELM_REDACTED"] = "1"
    return env


def command(args: argparse.Namespace, secrets: Path | None = None) -> list[str]:
    host = getattr(args, "host", None) or "127.0.0.1"
    port = getattr(args, "port", None)
    cmd = [sys.executable, str(CSP), "run", str(APP), "--server.headless", "true",
           "--server.address", host, "--server.port", str(DEFAULT_PORT if port is None else port),
           "--browser.gatherUsageStats", "false", "--server.fileWatcherType", "none",
           "--global.developmentMode", "false", "--client.toolbarMode", "viewer",
           "--client.showErrorDetails", _no_error_details()]  # viewers never see tracebacks (server paths)
    return cmd + (["--secrets.files", str(secrets)] if secrets is not None else [])


def _no_error_details() -> str:
    """Streamlit >= 1.46 takes a level ("none"); older ones a boolean (false = no tracebacks)."""
    import importlib.metadata

    try:
        major, minor = (int(x) for x in importlib.metadata.version("streamlit").split(".")[:2])
    except (importlib.metadata.PackageNotFoundError, ValueError):
        return "none"
    return "none" if (major, minor) >= (1, 46) else "false"


def write_secrets(oidc: Oidc) -> Path:
    """A private secrets.toml for Streamlit (0600 in a fresh 0700 folder); the caller removes the folder."""
    folder = Path(tempfile.mkdtemp(prefix="medhelm-oidc-"))
    path = folder / "secrets.toml"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(oidc.secrets_toml())
    return path


def check_exposure(args: argparse.Namespace, oidc: Oidc | None) -> None:
    """Refuse a non-loopback address without sign-in unless the operator said --insecure-no-auth."""
    from medhelm.access.exposure import is_loopback
    from medhelm.errors import ConfigError

    host = getattr(args, "host", None) or "127.0.0.1"
    if oidc is None and not is_loopback(host) and not getattr(args, "insecure_no_auth", False):
        raise ConfigError(f"refusing to serve the leaderboard on {host} without sign-in: configure OpenID Connect "
                          "(--oidc-issuer, see docs/access.md) or pass --insecure-no-auth to run it open")


def main(args: argparse.Namespace) -> int:
    from medhelm.store import open_store
    from medhelm.store.opening import INTACT_ENV, intact_token

    from medhelm.access import AccessPolicy

    from medhelm.rpc.server import check_port_free

    oidc = oidc_settings(args)
    check_exposure(args, oidc)
    # a port in use is one line naming it and --port, before anything is written (Streamlit said "Port N is not
    # available" after our start-up line and exited 1)
    check_port_free(getattr(args, "host", None) or "127.0.0.1", getattr(args, "port", None) or DEFAULT_PORT, "--port")
    if oidc is not None:
        AccessPolicy.load(args.access_policy)  # a bad access.yaml is one line now
    env = environment(args)
    open_store(env["MEDHELM_STORE"], create=bool(getattr(args, "create_store", False))).close()  # a wrong path or URL is one line now, not a page later
    env[INTACT_ENV] = intact_token(env["MEDHELM_STORE"])  # checked here: the app's first page need not again
    print(f"medhelm: leaderboard at http://{getattr(args, 'host', None) or '127.0.0.1'}:"
          f"{getattr(args, 'port', None) or DEFAULT_PORT} (store {_shown(env['MEDHELM_STORE'])}; "
          f"{'sign-in ' + oidc.issuer if oidc else 'no sign-in'})", file=sys.stderr)
    secrets = write_secrets(oidc) if oidc is not None else None
    try:
        return _run_streamlit(command(args, secrets), env)
    finally:
        if secrets is not None:
            shutil.rmtree(secrets.parent, ignore_errors=True)


def _run_streamlit(cmd: list[str], env: dict[str, str]) -> int:
    """Streamlit as our child, never outliving us: SIGTERM/SIGHUP sent to ``medhelm serve`` (a kubelet
    stopping the pod, where we are PID 1 and would otherwise ignore it; a terminal closing) is passed on and
    waited for, and on Linux the child is told to stop (SIGTERM) if we die by a signal we cannot catch
    (``kill -9``). Ctrl-C reaches the whole process group by itself; we only wait."""
    proc = subprocess.Popen(cmd, env=env, preexec_fn=_stop_with_parent if sys.platform == "linux" else None)

    def forward(signum: int, _frame: object) -> None:
        if proc.poll() is None:
            proc.send_signal(signum)

    previous = {sig: signal.signal(sig, forward) for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        while True:
            try:
                code = proc.wait()
                break
            except KeyboardInterrupt:
                continue  # Streamlit got the same Ctrl-C; wait for it to finish
        return 0 if code in (0, -signal.SIGTERM, -signal.SIGINT, -signal.SIGHUP) else code
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _stop_with_parent() -> None:
    """In the child before exec: ask the kernel for SIGTERM when the parent dies (prctl PR_SET_PDEATHSIG)."""
    import ctypes
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM, 0, 0, 0)  # 1 = PR_SET_PDEATHSIG
    except (OSError, AttributeError):  # not glibc/musl: the SIGTERM forwarding above still applies
        pass


def _shown(store: str) -> str:
    from medhelm.errors import without_password

    return without_password(store)
