"""Serve the leaderboard with a Content-Security-Policy on every HTTP response: ``python csp.py run app.py ...``
(the arguments of ``streamlit run``; ``launch.command`` builds them).

The policy lets the page load and talk only to its own origin: scripts, styles, fonts, images (plus
``data:``/``blob:`` ones Streamlit draws itself), the websocket and workers. A string from data that
somehow became markup still could not load a remote image, post to another host or be framed by one.
Streamlit has no setting for response headers, so the headers are added by a small ASGI middleware
appended to Streamlit's own Starlette middleware stack (Streamlit >= 1.5x serves with Starlette/uvicorn);
on an older Tornado-based Streamlit, ``RequestHandler.clear`` (which every handler calls to reset its
headers) is wrapped instead. If either changes, tests/leaderboard/test_hostile_data.py (the header on
``/``) fails rather than the app silently losing it.

Behind an Ingress the chart may set the same header (docs/deploy.md); both together are harmless.
"""

from __future__ import annotations

import sys

POLICY = ("default-src 'self'; script-src 'self' 'unsafe-eval'; style-src 'self' 'unsafe-inline'; "
          "img-src 'self' data: blob:; font-src 'self' data:; connect-src 'self'; worker-src 'self' blob:; "
          "frame-src 'self'; child-src 'self' blob:; object-src 'none'; base-uri 'self'; form-action 'self'; "
          "frame-ancestors 'self'")


HEADERS = (("content-security-policy", POLICY), ("x-content-type-options", "nosniff"),
           ("referrer-policy", "no-referrer"))


class SecurityHeaders:
    """Pure ASGI middleware: adds ``HEADERS`` to every HTTP response (websockets pass through)."""

    def __init__(self, app) -> None:  # noqa: ANN001 - any ASGI app
        self.app = app

    async def __call__(self, scope, receive, send) -> None:  # noqa: ANN001
        if scope.get("type") != "http":
            await self.app(scope, receive, send)
            return

        async def with_headers(message) -> None:  # noqa: ANN001
            if message.get("type") == "http.response.start":
                names = {k.lower() for k, _ in message.get("headers", [])}
                extra = [(k.encode(), v.encode()) for k, v in HEADERS if k.encode() not in names]
                message = {**message, "headers": [*message.get("headers", []), *extra]}
            await send(message)

        await self.app(scope, receive, with_headers)


def install(policy: str = POLICY) -> None:
    try:
        from streamlit.web.server.starlette import starlette_app
    except ImportError:
        _install_tornado(policy)
        return
    original_stack = starlette_app.create_streamlit_middleware
    if getattr(original_stack, "_medhelm_csp", False):
        return

    def create_streamlit_middleware():  # noqa: ANN202 - Streamlit's own signature
        from starlette.middleware import Middleware

        return [Middleware(SecurityHeaders), *original_stack()]

    create_streamlit_middleware._medhelm_csp = True  # type: ignore[attr-defined]
    starlette_app.create_streamlit_middleware = create_streamlit_middleware


def _install_tornado(policy: str) -> None:
    import tornado.web

    original = tornado.web.RequestHandler.clear
    if getattr(original, "_medhelm_csp", False):
        return

    def clear(self: tornado.web.RequestHandler) -> None:
        original(self)
        self.set_header("Content-Security-Policy", policy)
        self.set_header("X-Content-Type-Options", "nosniff")
        self.set_header("Referrer-Policy", "no-referrer")

    clear._medhelm_csp = True  # type: ignore[attr-defined]
    tornado.web.RequestHandler.clear = clear  # type: ignore[method-assign]


def main() -> int:
    install()
    from streamlit.web.cli import main as streamlit_main

    sys.argv = ["streamlit", *sys.argv[1:]]
    return int(streamlit_main() or 0)  # click exits by itself; the return is for completeness


if __name__ == "__main__":
    sys.exit(main())
