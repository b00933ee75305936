"""What of a browser's request may reach a cluster's dashboard: never Jupyter's token.

Jupyter reads its token from a `token` query or form field and its XSRF token from an
`_xsrf` one (dashboard.py strips the headers and cookies that carry them), and Ray logs
request lines. The fields are dropped from the raw text, so that everything else reaches
the dashboard byte for byte.
"""

from __future__ import annotations

from urllib.parse import unquote_plus

from tornado import web
from tornado.httputil import HTTPServerRequest

JUPYTER_FIELDS = frozenset({"token", "_xsrf"})
FORM = "application/x-www-form-urlencoded"


def without_jupyter_fields(text: str) -> str:
    """A query string (or form body) less Jupyter's fields, split on `&` as Tornado does."""
    kept = [p for p in text.split("&") if unquote_plus(p.split("=", 1)[0]) not in JUPYTER_FIELDS]
    return "&".join(kept)


def upstream_body(request: HTTPServerRequest) -> bytes:
    media_type = request.headers.get("Content-Type", "").split(";", 1)[0].strip().lower()
    if media_type == FORM:
        return without_jupyter_fields(request.body.decode("latin-1")).encode("latin-1")
    if JUPYTER_FIELDS & request.body_arguments.keys():
        # A multipart form: rebuilding it is not worth the risk, and Jupyter's own
        # clients send the XSRF token as a header.
        raise web.HTTPError(
            400, "send Jupyter's XSRF token in the X-XSRFToken header, not in a form field"
        )
    return request.body
