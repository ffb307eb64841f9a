"""The report as a PDF: the same page as the HTML report (``render.render``), laid out by WeasyPrint with the
page's own print rules (A4 landscape, numbered pages: render's ``_PRINT_CSS``). The plots stay vector
(WeasyPrint draws the inline SVG: lines as paths, words as text), every word is selectable text in an embedded
font, and the PDF is tagged (a structure tree of headings, tables with their header cells, figures;
``pdf_tags``) with the page's language and title, so a screen reader can follow it.

Why WeasyPrint and not a PDF writer fed table by table (reportlab, fpdf2): the report is written once, as
HTML, and both formats show exactly the same sections, numbers and suppression; WeasyPrint is well kept and
its only system need, Pango (>= 1.44), is a Debian package.

No external resource: WeasyPrint is given a URL fetcher that refuses every URL, so even a page that named
one could not make it fetch anything (the page names none: render.py's Content-Security-Policy).

Failure semantics: WeasyPrint (the ``report-pdf`` extra) or Pango missing is a ``ConfigError`` naming the
extra / the system package, raised by ``check`` before anything is written.
"""

from __future__ import annotations

from typing import Any

from medhelm.errors import ConfigError


def _weasyprint():
    try:
        import weasyprint
    except ImportError:
        raise ConfigError("the PDF report needs WeasyPrint: pip install 'medhelm-k8s[report-pdf]'") from None
    except OSError as err:  # the Python package is there, Pango is not (WeasyPrint loads it at import)
        raise ConfigError(f"the PDF report needs Pango >= 1.44 (Debian: apt-get install libpango-1.0-0 "
                          f"libpangoft2-1.0-0): {str(err)[:160]}") from None
    return weasyprint


def check() -> None:
    """Raise the one-line error now if a PDF cannot be made (before anything is read or written)."""
    _weasyprint()


def to_pdf(page: bytes) -> bytes:
    """The HTML report ``page`` as a tagged PDF (its bytes)."""
    weasyprint = _weasyprint()
    from weasyprint.urls import URLFetcher

    class Refuse(URLFetcher):  # WeasyPrint >= 68's fetcher API; its error is caught and the resource left out
        def fetch(self, url: str, headers: Any = None) -> Any:
            raise ValueError("the report fetches nothing")

    document = weasyprint.HTML(string=page.decode("utf-8"), url_fetcher=Refuse(), base_url=None)
    return document.write_pdf(pdf_tags=True)
