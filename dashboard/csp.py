"""Serve the leaderboard with a Content-Security-Policy on every HTTP response: ``python csp.py run app.py ...``
(the arguments of ``streamlit run``; ``launch.command`` builds them).

The policy lets the page load and talk only to its own origin: scripts, styles, fonts, images (plus
``data:``/``blob:`` ones Streamlit draws itself), the websocket and workers. A string from data that
somehow became markup still could not load a remote image, post to another host or be framed by one.
Streamlit has no setting for response headers, so Tornado's ``RequestHandler.clear`` (which every
handler calls to reset its headers) is wrapped to add the header; if Tornado changes, the check in
tests/leaderboard (the header on ``/``) fails rather than the app silently losing it.

Behind an Ingress the chart may set the same header (docs/deploy.md); both together are harmless.
"""

from __future__ import annotations

import sys

POLICY = ("default-src 'self'; script-src 'self' 'unsafe-eval'; style-src 'self' 'unsafe-inline'; "
          "img-src 'self' data: blob:; font-src 'self' data:; connect-src 'self'; worker-src 'self' blob:; "
          "frame-src 'self'; child-src 'self' blob:; object-src 'none'; base-uri 'self'; form-action 'self'; "
          "frame-ancestors 'self'")


def install(policy: str = POLICY) -> None:
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
