"""The page: a read-only web page of the fleet served by the daemon at `/` of `daemon.http`
(issue 43; README "The page", docs/status.md). Its templates and assets ship in the wheel.

- views.py: the routes (HTML from Jinja2 templates, the /v1 JSON they are built from)
- documents.py: the JSON documents, from inspect/'s status and ledger builders
- ledger_cache.py: today's ledger per slot, refreshed in the background
- auth.py: the token gate (`daemon.http_token_env`) and the loopback rule
- templates/, static/: HTML, one JavaScript file that polls the JSON, one stylesheet
"""

from tpucared.runtime.page.auth import Gate, TokenMissing, middleware
from tpucared.runtime.page.views import Page

__all__ = ["Gate", "Page", "TokenMissing", "middleware"]
